"""End to end, as root: no credential leaves the agent.

Clients with service-account tokens (bound, with a pod), a legacy-style opaque bearer token,
an invalid token and client certificates make requests, a storm fires and resolves; then
everything the agent wrote (stdout alert lines, stderr logs, the metrics text, and any file
under its working directory) is scanned for every token, token part and private key used in
the test. None may appear.
"""
import base64
import glob
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import Agent, require_bpf_privileges  # noqa: E402
from cluster import Cluster  # noqa: E402

DATAJOB = """apiVersion: batch.company.com/v1
kind: DataJob
metadata: {name: %s, namespace: etl}
spec: {schedule: "0 2 * * *"}
"""


def pem_body(path):
    """The base64 body of a PEM file, as one string, and its first line (what a leak shows)."""
    with open(path) as f:
        lines = [l.strip() for l in f if l.strip() and not l.startswith("-----")]
    return ["".join(lines), lines[0]]


class SecretsNeverLeave(unittest.TestCase):
    def setUp(self):
        require_bpf_privileges(self)
        self.cluster = Cluster().start()
        self.addCleanup(self.cluster.stop)

    def test_no_token_or_key_in_anything_the_agent_wrote(self):
        c = self.cluster
        workdir = os.path.join(c.tmp, "agent-out")
        os.makedirs(workdir)
        agent = Agent(workdir, extra_args=["--pid", str(c.apiserver_pid),
                                           "--update-loop-resource-rate", "50"])
        agent.start()
        self.addCleanup(agent.stop)
        agent.wait_attached(1)

        op_file = c.mint_token("datajobs-system", "datajob-operator", pod="op-6f7c9d5b8-xk2lp")
        human_file = c.mint_token("default", "ops-engineer")
        human = c.kubeconfig(human_file)
        self.assertEqual(c.kubectl("create", "namespace", "etl", kubeconfig=c.admin_kubeconfig).returncode, 0)
        for name in ("a", "b"):
            r = c.kubectl("create", "-f", "-", input=DATAJOB % name, kubeconfig=human)
            self.assertEqual(r.returncode, 0, r.stderr)
        jane_cert, jane_key = c.client_cert("jane", ["dev"])
        c.kubectl("get", "pods", "-A", kubeconfig=c.kubeconfig_cert(jane_cert, jane_key))
        # An opaque (non-JWT) bearer token and a forged JWT: both rejected by the server (401).
        opaque = os.path.join(c.tmp, "tokens", "opaque.token")
        with open(opaque, "w") as f:
            f.write("abcdef.0123456789abcdef")  # bootstrap-token shaped
        forged = os.path.join(c.tmp, "tokens", "forged.token")
        claims = base64.urlsafe_b64encode(b'{"sub":"system:serviceaccount:x:y","iss":"me"}').rstrip(b"=")
        with open(forged, "w") as f:
            f.write("eyJhbGciOiJSUzI1NiJ9." + claims.decode() + ".c2lnbmF0dXJlLW5vdC12YWxpZA")
        for tok in (opaque, forged):
            c.kubectl("get", "pods", kubeconfig=c.kubeconfig(tok))
        op = c.run_operator(op_file, ["a", "b"], duration=5, namespace="etl",
                            extra_args=["--workers", "2"])
        op.communicate(timeout=30)
        firing, _ = agent.wait_alert(lambda a: a["state"] == "firing", timeout=10)
        self.assertIsNotNone(firing, "the storm should have fired (it is part of what is scanned)")
        resolved, _ = agent.wait_alert(lambda a: a["state"] == "resolved", timeout=25)
        self.assertIsNotNone(resolved)
        metrics_text = "\n".join("%s %s %s" % m for m in agent.metrics())
        agent.stop()

        secrets = {}
        for path in glob.glob(os.path.join(c.tmp, "tokens", "*.token")):
            token = open(path).read().strip()
            secrets[path] = token
            parts = token.split(".")
            if len(parts) == 3:
                secrets[path + " (payload)"] = parts[1]
                secrets[path + " (signature)"] = parts[2]
        for path in glob.glob(os.path.join(c.tmp, "pki", "*.key")):
            for i, piece in enumerate(pem_body(path)):
                secrets["%s (%d)" % (path, i)] = piece
        self.assertGreaterEqual(len(secrets), 10)

        written = {"stdout": "\n".join(agent.stdout_lines), "stderr": agent.stderr(),
                   "metrics": metrics_text}
        for path in glob.glob(os.path.join(workdir, "**"), recursive=True):
            if os.path.isfile(path):
                with open(path, errors="replace") as f:
                    written[path] = f.read()
        self.assertIn("datajob-operator", written["stdout"])  # the scan reads real output
        for where, text in written.items():
            for what, secret in secrets.items():
                self.assertNotIn(secret, text, "%s leaked into %s" % (what, where))
        print("\nscanned %d outputs (%d bytes) for %d secrets: none found"
              % (len(written), sum(len(t) for t in written.values()), len(secrets)), file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
