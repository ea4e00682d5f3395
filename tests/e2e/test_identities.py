"""End to end, as root: every kind of client identity, named as Kubernetes names it (issue 4).

Against the test API server and real etcd, with the real agent attached by uprobes, one client
per kind of credential makes a known set of requests, one kind after the other:

  - kubectl with the admin client certificate (CN=kubernetes-admin, O=system:masters), HTTP/2;
  - the real Python Kubernetes client with a service-account token, HTTP/1.1 (keep-alive);
  - curl --http2 with a bound service-account token carrying a pod claim; a legacy secret-based
    service-account token; an OIDC ID token; a bootstrap token; an opaque static token; no
    credentials at all; a client certificate with several O values (and one 429 from APF).

The test server authenticates only client certificates and bound service-account tokens
(tests/apiserver/auth.go, token.go); the other tokens are answered 401 and counted by the server
as system:anonymous, while the agent names them by what they claim (agent/kube/identity.h: claims
are decoded, never verified; the 401 says the server did not agree). The oracle is therefore the
server's own /debug/counts, per kind, with system:anonymous read as the kind's claimed name.

Asserted per identity, from the agent's /metrics: stormwatch_requests_total equal to the
server's counts per (client, verb, group, version, resource, subresource, scope, code); the
client label of each kind; stormwatch_list_requests_total's consistency and paginated labels for
every LIST made (from the URLs each client sent); stormwatch_apf_requests_total's priority level
and flow schema for every request, from the X-Kubernetes-PF-* UIDs the client received, named by
the server's /debug/apf; stormwatch_throttled_requests_total and the Retry-After histogram for the
429; no capture loss. Finally no token, token part or private key appears in the agent's
stdout, stderr or metrics.

The agent names APF UIDs from the server's flowcontrol lists, read with its own token
(--apiserver-url, --apiserver-token-file for monitoring/stormwatch, --apiserver-ca-file); its
own requests are part of the exact counts.

    cd tests/e2e && STORMWATCH_BUILD_DIR=BUILD STORMWATCH_GO_OUT=BUILD/go /usr/bin/python3 -m unittest -v test_identities
"""
import base64
import collections
import glob
import itertools
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import Agent, require_bpf_privileges  # noqa: E402
from cluster import Cluster  # noqa: E402
from counts import count_map, delta  # noqa: E402

NS = "identities"
ANONYMOUS = "system:anonymous"
ADMIN = "kubernetes-admin"
AGENT_SA = ("monitoring", "stormwatch")  # the agent's own token, to name APF UIDs
BOUND_SA, BOUND_POD = (NS, "reconciler"), "reconciler-5d8f7c9b4-q2wxk"
PYTHON_SA = (NS, "inventory")
LEGACY_SA = ("ci", "deployer")
OIDC_ISSUER, OIDC_SUBJECT = "https://dex.example.com", "CgVqYW5lEgRsZGFw"
BOOTSTRAP_ID = "07401b"
CERT_USER, CERT_GROUPS = "jane", ["dev", "qa", "oncall"]
OPAQUE_LABEL = re.compile(r"^token:[0-9a-f]{12}$")
# Server flags: requests may ask to be slow; jane's level (global-default) has one seat and a
# queued request is rejected after a quarter of --request-timeout (1 s): one cheap 429.
APISERVER_ARGS = ["--test-delays", "--max-inflight-per-level", "global-default=1", "--request-timeout", "4s"]
KUBECTL_REQUEST = re.compile(r"round_trippers\.go:\d+\] (GET|POST|PUT|PATCH|DELETE) (https://\S+) (\d{3}) ")
CONFIGMAP = '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s"},"data":{"a":"1"}}'


def sa_user(ns_name):
    return "system:serviceaccount:%s:%s" % ns_name


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_jwt(claims):
    """A JWT-shaped token with a random (invalid) signature: the agent only decodes claims."""
    header = b64url(json.dumps({"alg": "RS256", "kid": secrets.token_hex(8)}).encode())
    return "%s.%s.%s" % (header, b64url(json.dumps(claims).encode()), b64url(secrets.token_bytes(256)))


def list_shape(method, url):
    """(group, resource, scope, consistency, paginated) of a LIST, from its URL (None if the
    request is no LIST), by the Kubernetes semantics of resourceVersion, continue and limit."""
    if method != "GET":
        return None
    parsed = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parsed.query))
    parts = [p for p in parsed.path.split("/") if p]
    if query.get("watch") in ("1", "true") or len(parts) < 3:
        return None
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if rest[0] == "namespaces" and len(rest) >= 3:
        scope, rest = "namespace", rest[2:]
    else:
        scope = "cluster"
    if len(rest) != 1:
        return None  # a named object (GET) or a subresource
    if query.get("continue"):
        consistency = "exact"
    elif not query.get("resourceVersion"):
        consistency = "consistent"
    elif query["resourceVersion"] == "0":
        consistency = "any"
    elif query.get("resourceVersionMatch") == "Exact":
        consistency = "exact"
    else:
        consistency = "not_older_than"
    return (group, rest[0], scope, consistency, "true" if int(query.get("limit", "0") or 0) > 0 else "false")


class Identity:
    """One client: how it authenticates and what the agent must call it."""

    def __init__(self, key, label, accepted, token=None, cert=None):
        self.key = key            # a short name for messages
        self.label = label        # expected client label (None: a keyed hash, found at run time)
        self.accepted = accepted  # does the test server authenticate it?
        self.token = token
        self.cert = cert          # (cert, key) paths
        self.made = []            # one dict per request: method, url, status, fs_uid, pl_uid, retry_after
        self.server = {}          # the server's count_map delta while this client ran


class IdentitiesEndToEnd(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        require_bpf_privileges(self)
        self.cluster = Cluster(apiserver_args=APISERVER_ARGS).start()
        self.addCleanup(self.cluster.stop)
        self.curl_seq = itertools.count()
        os.makedirs(os.path.join(self.cluster.tmp, "curl"))
        self.agent = None

    def tearDown(self):
        if self.agent:
            self.agent.stop()
            result = getattr(getattr(self, "_outcome", None), "result", None)
            failed = any(t is self for t, _ in (getattr(result, "errors", []) or []) +
                         (getattr(result, "failures", []) or []))
            if failed:
                print("agent stderr:\n" + self.agent.stderr()[-4000:], file=sys.stderr)

    # ---- clients ----

    def curl(self, who, method, path, body=None, content_type=None, delay=None):
        """One request with curl --http2 as `who`; recorded in who.made with the response's
        status and APF headers."""
        c = self.cluster
        n = next(self.curl_seq)
        dump = os.path.join(c.tmp, "curl", "%d.headers" % n)
        argv = ["curl", "--http2", "-sS", "--cacert", c.ca_file, "-o", "/dev/null", "-D", dump,
                "-w", "%{http_code} %{http_version}", "-X", method, c.base_url + path]
        if who.token:
            # From a 0600 file, not argv: a command line is world-readable in /proc.
            header_file = os.path.join(c.tmp, "tokens", "curl-%d.header" % n)
            fd = os.open(header_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("Authorization: Bearer %s\n" % who.token)
            argv += ["-H", "@" + header_file]
        if who.cert:
            argv += ["--cert", who.cert[0], "--key", who.cert[1]]
        if body is not None:
            argv += ["-H", "Content-Type: " + content_type, "--data-binary", body]
        if delay:
            argv += ["-H", "X-Stormwatch-Test-Delay: " + delay]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        status, version = r.stdout.split()
        self.assertEqual(version, "2", "curl did not speak HTTP/2")
        headers = {}
        with open(dump) as f:
            for line in f:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
        who.made.append({"method": method, "url": c.base_url + path, "status": int(status),
                         "fs_uid": headers.get("x-kubernetes-pf-flowschema-uid", ""),
                         "pl_uid": headers.get("x-kubernetes-pf-prioritylevel-uid", ""),
                         "retry_after": headers.get("retry-after")})
        return int(status)

    def kubectl(self, who, *args, input=None):
        """kubectl -v=6 as `who` (a client certificate); its request log lines are recorded."""
        kubeconfig = self.cluster.kubeconfig_cert(*who.cert)
        r = self.cluster.kubectl("-v=6", *args, kubeconfig=kubeconfig, input=input)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        for method, url, status in KUBECTL_REQUEST.findall(r.stderr):
            who.made.append({"method": method, "url": url, "status": int(status), "fs_uid": None,
                             "pl_uid": None, "retry_after": None})

    def python_client(self, who, token_file):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                              "python_configmap_calls.py")
        r = subprocess.run(["/usr/bin/python3", script, "--kubeconfig", self.cluster.kubeconfig(token_file),
                            "--namespace", NS, "--name", "inventory-snapshot"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        for call in json.loads(r.stdout.strip().splitlines()[-1]):
            who.made.append({"method": call["method"], "url": self.cluster.base_url + call["path"],
                             "status": call["status"], "fs_uid": call["flow_schema_uid"],
                             "pl_uid": call["priority_level_uid"], "retry_after": None})

    # ---- the oracle ----

    def settled_server_counts(self):
        """The server's counts once they stop moving (a request is counted just after its
        response is written, so a client can finish a hair before the count)."""
        last = count_map(self.cluster.server_counts())
        while True:
            time.sleep(0.15)
            now = count_map(self.cluster.server_counts())
            if now == last:
                return now
            last = now

    def run_phase(self, who, fn):
        before = self.settled_server_counts()
        fn()
        who.server = delta(self.settled_server_counts(), before)
        self.phases.append(who)

    def agent_delta(self):
        now = self.agent.request_counts()
        return {k: v - self.agent_before.get(k, 0) for k, v in now.items() if v - self.agent_before.get(k, 0)}

    # ---- the test ----

    def test_every_identity_kind_counted_named_and_classified(self):
        c = self.cluster
        agent_token_file = c.mint_token(*AGENT_SA)
        self.agent = Agent(c.tmp, extra_args=[
            "--pid", str(c.apiserver_pid), "--apiserver-url", c.base_url,
            "--apiserver-token-file", agent_token_file, "--apiserver-ca-file", c.ca_file]).start()
        self.agent.wait_attached(1)
        # The agent names APF UIDs from the lists it reads with its own token: wait for them.
        deadline = time.monotonic() + 20
        while not any(r["client"] == sa_user(AGENT_SA) and r["resource"] == "flowschemas" and r["code"] == "200"
                      for r in c.server_counts()):
            self.assertLess(time.monotonic(), deadline, "the agent never listed the flow schemas")
            time.sleep(0.2)
        baseline = self.settled_server_counts()
        time.sleep(1.0)  # the agent has counted everything before the baseline too
        self.agent_before = self.agent.request_counts()
        self.phases = []

        def token_of(path):
            with open(path) as f:
                return f.read().strip()

        bound_file = c.mint_token(*BOUND_SA, pod=BOUND_POD)
        python_file = c.mint_token(*PYTHON_SA)
        admin = Identity("admin certificate", ADMIN, True, cert=(c.admin_cert, c.admin_key))
        python = Identity("python client (service account)", sa_user(PYTHON_SA), True, token=token_of(python_file))
        bound = Identity("bound service-account token with pod", sa_user(BOUND_SA), True, token=token_of(bound_file))
        legacy = Identity("legacy service-account token", sa_user(LEGACY_SA), False, token=unsigned_jwt({
            "iss": "kubernetes/serviceaccount",
            "kubernetes.io/serviceaccount/namespace": LEGACY_SA[0],
            "kubernetes.io/serviceaccount/secret.name": LEGACY_SA[1] + "-token-x7k2q",
            "kubernetes.io/serviceaccount/service-account.name": LEGACY_SA[1],
            "kubernetes.io/serviceaccount/service-account.uid": "0b9c7a53-1d1e-4d3c-9d61-3c1f1a5e0c42",
            "sub": sa_user(LEGACY_SA)}))
        now = int(time.time())
        oidc = Identity("OIDC ID token", OIDC_ISSUER + "#" + OIDC_SUBJECT, False, token=unsigned_jwt({
            "iss": OIDC_ISSUER, "sub": OIDC_SUBJECT, "aud": "kubernetes", "iat": now, "exp": now + 3600}))
        bootstrap = Identity("bootstrap token", "system:bootstrap:" + BOOTSTRAP_ID, False,
                             token=BOOTSTRAP_ID + "." + secrets.token_hex(8))
        opaque = Identity("opaque static token", None, False, token="static-" + secrets.token_urlsafe(24))
        anonymous = Identity("anonymous", ANONYMOUS, False)
        jane = Identity("client certificate with several O", CERT_USER, True,
                        cert=c.client_cert(CERT_USER, CERT_GROUPS))

        cms = "/api/v1/namespaces/%s/configmaps" % NS

        def admin_requests():
            self.kubectl(admin, "create", "namespace", NS)
            for name in ("cm-a", "cm-b"):
                self.kubectl(admin, "create", "configmap", name, "-n", NS, "--from-literal=a=1")
            self.kubectl(admin, "get", "configmaps", "-n", NS)
            self.kubectl(admin, "get", "pods", "-A")
            self.kubectl(admin, "label", "configmap", "cm-a", "-n", NS, "tier=gold")
            self.kubectl(admin, "get", "configmap", "cm-b", "-n", NS, "-o", "json")

        def bound_requests():
            for path in (cms, cms + "?resourceVersion=0", cms + "?limit=1", "/api/v1/pods?limit=10&resourceVersion=0",
                         "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % NS):
                self.assertEqual(self.curl(bound, "GET", path), 200, path)
            self.assertEqual(self.curl(bound, "POST", cms, CONFIGMAP % "bound-cm", "application/json"), 201)
            self.assertEqual(self.curl(bound, "GET", cms + "/bound-cm"), 200)
            self.assertEqual(self.curl(bound, "PATCH", cms + "/bound-cm", '{"data":{"b":"2"}}',
                                       "application/merge-patch+json"), 200)
            self.assertEqual(self.curl(bound, "DELETE", cms + "/bound-cm"), 200)
            self.assertEqual(self.curl(bound, "GET", "/apis/coordination.k8s.io/v1/namespaces/%s/leases/missing" % NS), 404)
            self.assertEqual(self.curl(bound, "GET", "/healthz"), 200)  # APF: probes, exempt

        def rejected_requests(who):
            def run():
                for path in (cms + "?limit=2", cms + "/cm-a", "/api/v1/nodes"):
                    self.assertEqual(self.curl(who, "GET", path), 401, (who.key, path))
            return run

        def jane_requests():
            self.assertEqual(self.curl(jane, "GET", cms), 200)
            self.assertEqual(self.curl(jane, "GET", cms + "/cm-b"), 200)
            # One seat in global-default: a slow request holds it, the next is rejected after 1 s.
            slow = threading.Thread(target=self.curl, args=(jane, "GET", cms + "/cm-a"), kwargs={"delay": "3s"})
            slow.start()
            deadline = time.monotonic() + 5
            while c.server_apf()["priorityLevels"]["global-default"]["executing"] < 1:
                self.assertLess(time.monotonic(), deadline, "the slow request never took its seat")
                time.sleep(0.05)
            self.assertEqual(self.curl(jane, "GET", cms + "?resourceVersion=0"), 429)
            slow.join()

        self.run_phase(admin, admin_requests)
        self.run_phase(python, lambda: self.python_client(python, python_file))
        self.run_phase(bound, bound_requests)
        for who in (legacy, oidc, bootstrap, opaque, anonymous):
            self.run_phase(who, rejected_requests(who))
        self.run_phase(jane, jane_requests)
        everything = delta(self.settled_server_counts(), baseline)

        # The opaque token's name is a keyed hash (per agent process): find it.
        deadline = time.monotonic() + 10
        while True:
            hashed = {k[0] for k in self.agent_delta() if OPAQUE_LABEL.match(k[0])}
            if hashed or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(len(hashed), 1, "the opaque token's client label: %s" % sorted(hashed))
        opaque.label = hashed.pop()
        print("\nopaque token named %s" % opaque.label, file=sys.stderr)

        # Expected stormwatch_requests_total: the server's counts; a rejected token's requests
        # (system:anonymous, 401 at the server) under the name its token claims.
        expected = collections.Counter()
        per_phase = collections.Counter()
        for who in self.phases:
            for key, n in who.server.items():
                proto, client = key[0], key[1]
                per_phase[key] += n
                if client == sa_user(AGENT_SA):
                    expected[key[1:]] += n  # the agent's own APF fetch, whenever it runs
                    continue
                with self.subTest(who.key, row=key):
                    self.assertEqual(client, who.label if who.accepted else ANONYMOUS)
                    self.assertEqual(proto, "HTTP/1.1" if who is python else "HTTP/2.0")
                    if not who.accepted:
                        self.assertEqual(key[-1], "401")
                expected[(who.label,) + key[2:]] += n
        between = delta(everything, per_phase)  # outside every phase: only the agent's own requests
        self.assertEqual({k[1] for k in between} - {sa_user(AGENT_SA)}, set(), between)
        for key, n in between.items():
            expected[key[1:]] += n
        expected = dict(expected)

        deadline = time.monotonic() + 10
        while self.agent_delta() != expected and time.monotonic() < deadline:
            time.sleep(0.2)
        got = self.agent_delta()
        metrics = self.agent.metrics()
        for who in self.phases:
            with self.subTest("stormwatch_requests_total", identity=who.key, client=who.label):
                mine = lambda counts: {k: v for k, v in counts.items() if k[0] == who.label}  # noqa: E731
                self.assertTrue(mine(expected), "the server counted nothing for %s" % who.key)
                self.assertEqual(mine(got), mine(expected))
                # The oracle is complete: every request the client made is in it.
                self.assertEqual(sum(mine(expected).values()), len(who.made), who.made)
        with self.subTest("stormwatch_requests_total, every series"):
            self.assertEqual(got, expected)

        # LIST shapes, from the URLs each client sent.
        lists = collections.Counter()
        for n, l, v in metrics:
            if n == "stormwatch_list_requests_total":
                lists[(l["client"], l["group"], l["resource"], l["scope"], l["consistency"], l["paginated"])] += int(v)
        for who in self.phases:
            want = collections.Counter()
            for r in who.made:
                shape = list_shape(r["method"], r["url"])
                if shape:
                    want[(who.label,) + shape] += 1
            with self.subTest("stormwatch_list_requests_total", identity=who.key):
                self.assertEqual({k: v for k, v in lists.items() if k[0] == who.label}, dict(want))
        with self.subTest("stormwatch_list_requests_total: the Python client's four shapes"):
            python_shapes = {k[4:]: v for k, v in lists.items() if k[0] == python.label and k[2] == "configmaps"}
            self.assertEqual(python_shapes, {("consistent", "false"): 1, ("any", "false"): 1,
                                             ("consistent", "true"): 1, ("exact", "true"): 1})

        # APF: the level and schema of every request, from the UIDs its response carried.
        apf = c.server_apf()
        pl_name = {v["uid"]: name for name, v in apf["priorityLevels"].items()}
        fs_name = {v["uid"]: name for name, v in apf["flowSchemas"].items()}
        self.assertEqual(apf["flowSchemas"]["exempt"]["priorityLevel"], "exempt")
        got_apf = collections.Counter()
        for n, l, v in metrics:
            if n == "stormwatch_apf_requests_total":
                got_apf[(l["client"], l["priority_level"], l["flow_schema"])] += int(v)
        for who in self.phases:
            want = collections.Counter()
            for r in who.made:
                if r["status"] == 401:
                    continue  # authentication comes before APF: no headers
                if who is admin:  # kubectl's log has no headers; system:masters is exempt
                    want[(who.label, "exempt", "exempt")] += 1
                    continue
                self.assertTrue(r["pl_uid"] and r["fs_uid"], r)
                want[(who.label, pl_name[r["pl_uid"]], fs_name[r["fs_uid"]])] += 1
            with self.subTest("stormwatch_apf_requests_total", identity=who.key):
                self.assertEqual({k: v for k, v in got_apf.items() if k[0] == who.label}, dict(want))
        print("APF per client: %s" % dict(got_apf), file=sys.stderr)
        with self.subTest("stormwatch_apf_requests_total: the bound token's two levels, jane's one"):
            self.assertEqual({k[1:]: v for k, v in got_apf.items() if k[0] == bound.label},
                             {("workload-low", "service-accounts"): 10, ("exempt", "probes"): 1})
            self.assertEqual({k[1:] for k in got_apf if k[0] == jane.label}, {("global-default", "global-default")})

        # The 429: counted for jane at global-default, Retry-After observed.
        rejected = [r for r in jane.made if r["status"] == 429]
        self.assertEqual([r["retry_after"] for r in rejected], ["1"])
        with self.subTest("stormwatch_throttled_requests_total, stormwatch_retry_after_seconds"):
            throttled = {(l["client"], l["priority_level"]): v for n, l, v in metrics
                         if n == "stormwatch_throttled_requests_total"}
            self.assertEqual(throttled, {(jane.label, "global-default"): 1})
            retry = {(n, l.get("le")): v for n, l, v in metrics
                     if n.startswith("stormwatch_retry_after_seconds") and l.get("priority_level") == "global-default"}
            self.assertEqual(retry.get(("stormwatch_retry_after_seconds_count", None)), 1)
            self.assertEqual(retry.get(("stormwatch_retry_after_seconds_sum", None)), 1)
            self.assertEqual(retry.get(("stormwatch_retry_after_seconds_bucket", "1")), 1)

        with self.subTest("stormwatch_capture_lost_total"):
            lost = {l["cause"]: v for n, l, v in metrics if n == "stormwatch_capture_lost_total" and v}
            self.assertEqual(lost, {}, "capture losses reported")

        # No credential in anything the agent wrote.
        metrics_text = "\n".join("%s %s %s" % m for m in metrics)
        self.agent.stop()
        leaks = {}
        tokens = [(who.key, who.token) for who in self.phases if who.token]
        for name, token in tokens + [("the agent's own token", token_of(agent_token_file))]:
            leaks[name] = token  # named, never shown: a failure message must not print it either
            parts = token.split(".")
            if len(parts) == 3:
                leaks[name + " (payload)"] = parts[1]
                leaks[name + " (signature)"] = parts[2]
            elif len(parts) == 2:
                leaks[name + " (secret part)"] = parts[1]
        for path in glob.glob(os.path.join(c.tmp, "pki", "*.key")):
            with open(path) as f:
                body = [l.strip() for l in f if l.strip() and not l.startswith("-----")]
            leaks[path] = "".join(body)
            leaks[path + " (first line)"] = body[0]
        written = {"stdout": "\n".join(self.agent.stdout_lines), "stderr": self.agent.stderr(),
                   "metrics": metrics_text}
        self.assertIn(sa_user(BOUND_SA), written["metrics"])  # the scan reads real output
        for where, text in written.items():
            for what, secret in leaks.items():
                self.assertFalse(secret in text, "%s leaked into the agent's %s" % (what, where))
        print("exact match over %d series, %d requests, %d identities; scanned %d bytes for %d secrets"
              % (len(expected), sum(expected.values()), len(self.phases),
                 sum(len(t) for t in written.values()), len(leaks)), file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
