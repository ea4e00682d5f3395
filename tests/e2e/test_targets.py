"""End to end, as root: which processes the agent attaches to, and what their requests mean.

kube-apiserver's requests are counted in stormwatch_requests_total (exactly what the server
handled); etcd's gRPC calls (seen at its gRPC interceptor) go to stormwatch_etcd_requests_total
by method, resource, client and code, never into the apiserver's series. With no
flags the agent finds both by executable name.
"""
import json
import os
import subprocess
import sys
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import Agent, free_port, require_bpf_privileges  # noqa: E402
from cluster import Cluster  # noqa: E402
from counts import count_map, delta  # noqa: E402


class TargetsEndToEnd(unittest.TestCase):
    def setUp(self):
        require_bpf_privileges(self)
        self.cluster = Cluster().start()
        self.addCleanup(self.cluster.stop)
        self.kubeconfig = self.cluster.kubeconfig(self.cluster.mint_token("default", "reader"))

    def start_agent(self, args):
        agent = Agent(self.cluster.tmp, extra_args=args).start()
        self.addCleanup(agent.stop)
        return agent

    def test_apiserver_and_etcd_are_told_apart(self):
        c = self.cluster
        agent = self.start_agent(["--pid", "%d,%d" % (c.apiserver_pid, c.etcd.pid)])
        agent.wait_attached(2)
        time.sleep(0.5)
        before = count_map(c.server_counts())
        for args in (("get", "pods", "-A"), ("get", "configmaps"), ("create", "configmap", "c1")):
            r = c.kubectl(*args, kubeconfig=self.kubeconfig)
            self.assertEqual(r.returncode, 0, r.stderr)
        expected = {k[1:]: v for k, v in delta(count_map(c.server_counts()), before).items()}
        deadline = time.monotonic() + 10
        while agent.request_counts() != expected and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(agent.request_counts(), expected)
        etcd = {}
        for n, l, v in agent.metrics():
            if n == "stormwatch_etcd_requests_total":
                key = (l["method"], l["resource"], l["code"])
                etcd[key] = etcd.get(key, 0) + v
        print("\netcd requests seen: %s" % etcd, file=sys.stderr)
        # The configmap create is one etcd Txn on configmaps; the LISTs are Range reads of
        # their resources' prefixes.
        self.assertGreaterEqual(etcd.get(("/etcdserverpb.KV/Txn", "configmaps", "OK"), 0), 1)
        self.assertGreaterEqual(etcd.get(("/etcdserverpb.KV/Range", "pods", "OK"), 0), 1)
        self.assertGreaterEqual(etcd.get(("/etcdserverpb.KV/Range", "configmaps", "OK"), 0), 1)
        self.assertNotIn("other", {m for m, _, _ in etcd})

    def test_client_certificate_identity(self):
        """kubectl with the admin certificate (CN=kubernetes-admin, O=system:masters): no token,
        so the agent reads the certificate the server verified from the TLS connection."""
        c = self.cluster
        agent = self.start_agent(["--pid", str(c.apiserver_pid)])
        agent.wait_attached(1)
        time.sleep(0.5)
        before = count_map(c.server_counts())
        dev_cert, dev_key = c.client_cert("jane", ["dev", "qa"])
        dev = c.kubeconfig_cert(dev_cert, dev_key)
        for kubeconfig in (c.admin_kubeconfig, dev, self.kubeconfig):
            r = c.kubectl("get", "pods", "-A", kubeconfig=kubeconfig)
            self.assertEqual(r.returncode, 0, r.stderr)
        expected = {k[1:]: v for k, v in delta(count_map(c.server_counts()), before).items()}
        self.assertEqual({k[0] for k in expected},
                         {"kubernetes-admin", "jane", "system:serviceaccount:default:reader"})
        deadline = time.monotonic() + 10
        while agent.request_counts() != expected and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(agent.request_counts(), expected)

    def test_default_targets_found_by_name(self):
        c = self.cluster
        agent = self.start_agent([])  # default: --target kube-apiserver,etcd
        deadline = time.monotonic() + 15
        want = {(str(c.apiserver_pid), "kube-apiserver"), (str(c.etcd.pid), "etcd")}
        seen = set()
        while time.monotonic() < deadline and not want <= seen:
            try:
                seen = {(l["pid"], l["target"]) for n, l, v in agent.metrics()
                        if n == "stormwatch_target_info" and l["status"] == "attached" and v == 1}
            except OSError:
                pass
            time.sleep(0.2)
        self.assertLessEqual(want, seen, agent.stderr())

    def test_connection_ends_per_client(self):
        """Every request carries its connection's two ends. curl bound to 127.0.0.3 (HTTP/2, three
        requests on one connection), to 127.0.0.4 (HTTP/1.1, two) and to 127.0.0.5 (HTTP/1.1 with
        a client certificate, two), each from a fixed source port and with its own identity:
        /debug/clients names exactly those peers, and the server's own address, per client.
        (HTTP/2 ends are read in BPF; HTTP/1.1 ends from the target's memory.)"""
        c = self.cluster
        agent = self.start_agent(["--pid", str(c.apiserver_pid)])
        agent.wait_attached(1)
        time.sleep(0.5)
        server_port = urllib.parse.urlsplit(c.base_url).port
        url = c.base_url + "/api/v1/namespaces/default/configmaps"
        expected = {}
        # Two service accounts by token, and a certificate user over HTTP/1.1 (its certificate is
        # read from the target's memory; HTTP/2's is found by the BPF program).
        cert, key = c.client_cert("h1-cert-user", orgs=("team-a",))
        for client, protocol, source_ip, requests in (
                ("system:serviceaccount:default:h2-caller", "--http2", "127.0.0.3", 3),
                ("system:serviceaccount:default:h1-caller", "--http1.1", "127.0.0.4", 2),
                ("h1-cert-user", "--http1.1", "127.0.0.5", 2)):
            if client.startswith("system:serviceaccount:"):
                with open(c.mint_token("default", client.rsplit(":", 1)[1])) as f:
                    credentials = ["-H", "Authorization: Bearer " + f.read().strip()]
            else:
                credentials = ["--cert", cert, "--key", key]
            source_port = free_port()
            r = subprocess.run(["curl", "-sS", "-w", "%{http_version}\n", protocol,
                                "--interface", source_ip, "--local-port", str(source_port),
                                "--cacert", c.ca_file, *credentials,
                                *["-o", "/dev/null", url] * requests],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split(), ["2" if protocol == "--http2" else "1.1"] * requests)
            expected[client] = {
                "requests": requests,
                "peers": [{"ip": source_ip, "requests": requests,
                           "last_peer": "%s:%d" % (source_ip, source_port),
                           "last_local": "127.0.0.1:%d" % server_port}]}
        deadline = time.monotonic() + 10
        seen = {}
        while time.monotonic() < deadline:
            status, body = agent.debug("/debug/clients")
            self.assertEqual(status, 200)
            seen = {e["client"]: {"requests": e["requests"], "peers": e["peers"]}
                    for e in json.loads(body) if e["client"] in expected}
            if seen == expected:
                break
            time.sleep(0.2)
        print("\n/debug/clients: %s" % json.dumps(seen), file=sys.stderr)
        self.assertEqual(seen, expected)


if __name__ == "__main__":
    unittest.main(verbosity=2)
