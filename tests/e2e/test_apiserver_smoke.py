"""Smoke test of the test apiserver + runaway operator against real etcd, kubectl, curl and the
Python kubernetes client.

    cd /work/main && /usr/bin/python3 -m unittest tests/e2e/test_apiserver_smoke.py

Needs the built binaries (cmake: build/go/test-apiserver, build/go/runaway-operator, or
STORMWATCH_GO_OUT pointing at a directory holding them).

Every test uses its own service account, so that the server's per-identity counts
(/debug/counts, the oracle the agent's tests use) can be asserted exactly. For kubectl the
expected counts are derived from kubectl's own -v=6 request log, mapped to labels by an
independent Python copy of the apiserver's RequestInfo rules (request_labels below).
"""

import collections
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster  # noqa: E402

CONFLICT_MSG = ('Operation cannot be fulfilled on datajobs.batch.company.com "{name}": the object has been '
                'modified; please apply your changes to the latest version and try again')

DATAJOB_YAML = """\
apiVersion: batch.company.com/v1
kind: DataJob
metadata:
  name: {name}
  labels:
    team: data
spec:
  image: registry.company.com/etl:2.1.0
  schedule: "*/10 * * * *"
"""

METRIC_VERBS = {"get": "GET", "list": "LIST", "watch": "WATCH", "create": "POST", "update": "PUT",
                "patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETECOLLECTION", "proxy": "CONNECT"}


def request_labels(method, url):
    """(verb, group, version, resource, subresource, scope) as apiserver_request_total labels
    them: k8s.io/apiserver requestinfo.go + metrics.CleanScope/CanonicalVerb/CleanVerb."""
    u = urllib.parse.urlsplit(url)
    q = urllib.parse.parse_qs(u.query)
    parts = [p for p in u.path.split("/") if p]
    non_resource = (method, "", "", "", "", "")
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    verb = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete"}.get(method, "")
    if parts[0] in ("watch", "proxy"):
        verb, parts = parts[0], parts[1:]
    ns = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        ns = parts[1]
        if len(parts) > 2 and parts[2] not in ("status", "finalize"):
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) > 1 else ""
    sub = parts[2] if len(parts) > 2 and verb != "proxy" else ""
    if not name and verb == "get":
        verb = "watch" if q.get("watch", [""])[0].lower() not in ("", "false", "0") else "list"
        m = re.match(r"^metadata\.name==?([^,]+)$", q.get("fieldSelector", [""])[0])
        if m:
            name = m.group(1)
    if not name and verb == "delete":
        verb = "deletecollection"
    scope = "resource" if (name or verb == "create") else ("namespace" if ns else "cluster")
    return (METRIC_VERBS.get(verb, method), group, version, resource, sub, scope)


KUBECTL_LOG = re.compile(r"round_trippers\.go:\d+\]\s+\"?(?:Response\"?\s+verb=\"?)?(GET|POST|PUT|PATCH|DELETE|HEAD)\"?\s+"
                         r"(?:url=\"?)?(https://\S+?)\"?\s+(?:status=\"?)?(\d{3})")


def kubectl_requests(stderr):
    """(method, url, code) of every request in a kubectl -v=6 log."""
    return [(m.group(1), m.group(2), m.group(3)) for m in KUBECTL_LOG.finditer(stderr)]


def counts_for(rows, client):
    """{(verb, group, version, resource, subresource, scope, code, proto): count} for one client."""
    out = collections.Counter()
    for r in rows:
        if r["client"] == client:
            out[(r["verb"], r["group"], r["version"], r["resource"], r["subresource"], r["scope"],
                 r["code"], r["proto"])] += r["count"]
    return dict(out)


def fold_not_modified(counts):
    out = collections.Counter()
    for (verb, group, version, resource, sub, scope, code, proto), n in counts.items():
        if code == "304" and not resource:
            code = "200"
        out[(verb, group, version, resource, sub, scope, code, proto)] += n
    return dict(out)


def sa_user(ns, name):
    return f"system:serviceaccount:{ns}:{name}"


class ApiserverSmokeTest(unittest.TestCase):
    c = None
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.c = Cluster().start()
        cls.ssl_ctx = ssl.create_default_context(cafile=cls.c.ca_file)

    @classmethod
    def tearDownClass(cls):
        if cls.c:
            cls.c.stop()

    # ---- helpers ----

    def identity(self, ns, sa, pod=None):
        tok = self.c.mint_token(ns, sa, pod=pod)
        with open(tok) as f:
            token = f.read().strip()
        return tok, self.c.kubeconfig(tok), token

    def kubectl_logged(self, kc, log, *args, input=None, expect_ok=True):
        """Runs kubectl -v=6, appends its requests to log, returns the CompletedProcess."""
        r = self.c.kubectl("-v=6", *args, kubeconfig=kc, input=input)
        log.extend(kubectl_requests(r.stderr))
        if expect_ok:
            self.assertEqual(r.returncode, 0, f"kubectl {' '.join(args)} failed:\n{r.stderr[-3000:]}")
        return r

    def expected_from_log(self, log, proto="HTTP/2.0"):
        out = collections.Counter()
        for method, url, code in log:
            out[request_labels(method, url) + (code, proto)] += 1
        return dict(out)

    def assert_counts(self, client, expected, timeout=3.0, fold_304=False):
        """The server counts a request when its handler returns, a hair after the client has the
        response: poll briefly for equality.

        fold_304: kubectl's HTTP cache revalidates aggregated discovery (/api, /apis) with
        If-None-Match; the server answers 304 (as a 1.28 apiserver does, with its ETag) and the
        cache hands kubectl a 200, which is what kubectl's -v log shows. So a kubectl log cannot
        tell 304 from 200 for discovery: fold the server's non-resource 304s into 200s."""
        deadline = time.time() + timeout
        while True:
            got = counts_for(self.c.server_counts(), client)
            if fold_304:
                got = fold_not_modified(got)
            if got == expected or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(got, expected, f"server counts for {client}")

    def http(self, method, path, token=None, body=None, content_type="application/json", headers=None):
        """One HTTP/1.1 request (urllib); returns (status, headers, body bytes)."""
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        req = urllib.request.Request(self.c.base_url + path, data=data, method=method)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        if data is not None:
            req.add_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, context=self.ssl_ctx, timeout=30) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    # ---- tests ----

    def test_kubectl_datajob_lifecycle(self):
        tok, kc, _ = self.identity("default", "kubectl-user")
        log = []
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "dj.yaml")
            with open(path, "w") as f:
                f.write(DATAJOB_YAML.format(name="job1"))
            r = self.kubectl_logged(kc, log, "create", "-f", path)
            self.assertIn("datajob.batch.company.com/job1 created", r.stdout)

        r = self.kubectl_logged(kc, log, "get", "dj", "job1")
        self.assertRegex(r.stdout, r"NAME\s+AGE\njob1\s+\d+s\n")
        r = self.kubectl_logged(kc, log, "get", "datajobs.batch.company.com", "job1", "-o", "json")
        obj = json.loads(r.stdout)
        self.assertEqual(obj["metadata"]["generation"], 1)
        self.assertEqual(obj["spec"]["image"], "registry.company.com/etl:2.1.0")
        stale = dict(obj)

        r = self.kubectl_logged(kc, log, "annotate", "dj", "job1", "batch.company.com/lastSyncTime=2024-05-01T00:00:00Z")
        self.assertIn("annotated", r.stdout)
        r = self.kubectl_logged(kc, log, "get", "dj", "job1", "-o", "json")
        current = json.loads(r.stdout)
        self.assertNotEqual(current["metadata"]["resourceVersion"], stale["metadata"]["resourceVersion"])
        self.assertEqual(current["metadata"]["generation"], 1, "an annotation change must not bump generation")

        # replace with the stale resourceVersion: the apiserver's Conflict, word for word.
        stale["spec"] = dict(stale["spec"], image="registry.company.com/etl:2.2.0")
        r = self.kubectl_logged(kc, log, "replace", "-f", "-", input=json.dumps(stale), expect_ok=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("Error from server (Conflict)", r.stderr)
        self.assertIn(CONFLICT_MSG.format(name="job1"), r.stderr)

        # replace with the current one succeeds and, as spec changed, bumps generation.
        current["spec"]["image"] = "registry.company.com/etl:2.2.0"
        r = self.kubectl_logged(kc, log, "replace", "-f", "-", input=json.dumps(current))
        self.assertIn("replaced", r.stdout)
        r = self.kubectl_logged(kc, log, "get", "dj", "job1", "-o", "json")
        self.assertEqual(json.loads(r.stdout)["metadata"]["generation"], 2)

        r = self.kubectl_logged(kc, log, "delete", "dj", "job1")
        self.assertIn('datajob.batch.company.com "job1" deleted', r.stdout)
        r = self.kubectl_logged(kc, log, "get", "dj", "job1", expect_ok=False)
        self.assertIn('datajobs.batch.company.com "job1" not found', r.stderr)

        self.assertGreater(len(log), 10)
        self.assert_counts(sa_user("default", "kubectl-user"), self.expected_from_log(log), fold_304=True)

    def test_kubectl_pods_configmaps_namespaces(self):
        tok, kc, _ = self.identity("kube-system", "deployer")
        log = []
        self.kubectl_logged(kc, log, "create", "namespace", "team-a")
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "team-a",
               "labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}}
        self.kubectl_logged(kc, log, "create", "-f", "-", input=json.dumps(pod))
        self.kubectl_logged(kc, log, "-n", "team-a", "create", "configmap", "settings", "--from-literal=mode=fast")
        self.kubectl_logged(kc, log, "-n", "default", "create", "configmap", "other", "--from-literal=a=b")

        r = self.kubectl_logged(kc, log, "-n", "team-a", "get", "pod", "web-0", "-o", "json")
        got = json.loads(r.stdout)
        self.assertEqual(got["kind"], "Pod")
        self.assertEqual(got["status"]["phase"], "Pending")
        self.assertEqual(got["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent")
        r = self.kubectl_logged(kc, log, "-n", "team-a", "get", "pods", "-l", "app=web")
        self.assertRegex(r.stdout, r"web-0\s+0/1\s+Pending\s+0\s+")
        r = self.kubectl_logged(kc, log, "-n", "team-a", "get", "cm", "settings", "-o", "jsonpath={.data.mode}")
        self.assertEqual(r.stdout, "fast")
        r = self.kubectl_logged(kc, log, "get", "configmaps", "--all-namespaces")
        self.assertIn("settings", r.stdout)
        self.assertIn("other", r.stdout)
        r = self.kubectl_logged(kc, log, "get", "pods", "-A", "-o", "name")
        self.assertEqual(r.stdout.split(), ["pod/web-0"])
        r = self.kubectl_logged(kc, log, "get", "ns")
        self.assertIn("team-a", r.stdout)
        self.kubectl_logged(kc, log, "-n", "team-a", "delete", "pod", "web-0")
        self.kubectl_logged(kc, log, "-n", "team-a", "delete", "configmap", "settings")

        self.assert_counts(sa_user("kube-system", "deployer"), self.expected_from_log(log), fold_304=True)

    def test_watch_over_http2_with_curl(self):
        tok, kc, token = self.identity("default", "watcher")
        ns = "watch-test"
        status, _, _ = self.http("POST", "/api/v1/namespaces", token,
                                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self.assertEqual(status, 201)
        status, _, body = self.http("GET", f"/api/v1/namespaces/{ns}/configmaps", token)
        rv = json.loads(body)["metadata"]["resourceVersion"]

        # The watch starts after rv, so the events below are delivered however fast we are.
        curl = subprocess.Popen(
            ["curl", "-sS", "-N", "--http2", "--cacert", self.c.ca_file, "-H", f"Authorization: Bearer {token}",
             "-w", "\\nHTTP_VERSION=%{http_version} CODE=%{http_code}\\n",
             f"{self.c.base_url}/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=3"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w1"}, "data": {"k": "1"}}
            self.assertEqual(self.http("POST", f"/api/v1/namespaces/{ns}/configmaps", token, cm)[0], 201)
            patch = {"data": {"k": "2"}}
            status, _, _ = self.http("PATCH", f"/api/v1/namespaces/{ns}/configmaps/w1", token, patch,
                                     content_type="application/merge-patch+json")
            self.assertEqual(status, 200)
            out, err = curl.communicate(timeout=15)
        finally:
            if curl.poll() is None:
                curl.kill()
                curl.wait()
        self.assertIn("HTTP_VERSION=2 CODE=200", out, err)
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in events],
                         [("ADDED", "w1"), ("MODIFIED", "w1")])
        self.assertEqual(events[1]["object"]["data"], {"k": "2"})
        self.assertEqual(events[0]["object"]["kind"], "ConfigMap")

        self.assert_counts(sa_user("default", "watcher"), {
            ("POST", "", "v1", "namespaces", "", "resource", "201", "HTTP/1.1"): 1,
            ("LIST", "", "v1", "configmaps", "", "namespace", "200", "HTTP/1.1"): 1,
            ("WATCH", "", "v1", "configmaps", "", "namespace", "200", "HTTP/2.0"): 1,
            ("POST", "", "v1", "configmaps", "", "resource", "201", "HTTP/1.1"): 1,
            ("PATCH", "", "v1", "configmaps", "", "resource", "200", "HTTP/1.1"): 1,
        })

    def test_unauthorized(self):
        before = counts_for(self.c.server_counts(), "system:anonymous")
        _, _, good = self.identity("default", "someone")
        forged = good[:-8] + ("AAAAAAAA" if not good.endswith("AAAAAAAA") else "BBBBBBBB")
        for token in (None, "not-a-jwt", forged):
            status, headers, body = self.http("GET", "/api/v1/namespaces/default/pods", token)
            self.assertEqual(status, 401)
            self.assertEqual(json.loads(body), {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                "status": "Failure", "message": "Unauthorized",
                                                "reason": "Unauthorized", "code": 401})
            self.assertTrue(headers["Audit-Id"])
            self.assertIsNone(headers["X-Kubernetes-PF-FlowSchema-UID"])  # APF runs after authn
        r = subprocess.run(["curl", "-sS", "--http2", "--cacert", self.c.ca_file, "-o", "/dev/null",
                            "-w", "%{http_code} %{http_version}", "-H", "Authorization: Bearer " + forged,
                            self.c.base_url + "/version"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.stdout, "401 2")
        after = counts_for(self.c.server_counts(), "system:anonymous")
        delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        self.assertEqual(delta, {
            ("LIST", "", "v1", "pods", "", "namespace", "401", "HTTP/1.1"): 3,
            ("GET", "", "", "", "", "", "401", "HTTP/2.0"): 1,
        })

    def test_concurrent_puts_same_resource_version(self):
        _, _, token = self.identity("default", "racer")
        base = "/apis/batch.company.com/v1/namespaces/default/datajobs"
        dj = {"apiVersion": "batch.company.com/v1", "kind": "DataJob", "metadata": {"name": "race"},
              "spec": {"image": "a"}}
        self.assertEqual(self.http("POST", base, token, dj)[0], 201)
        status, _, body = self.http("GET", base + "/race", token)
        obj = json.loads(body)

        results = []
        barrier = threading.Barrier(2)

        def put(i):
            o = json.loads(json.dumps(obj))
            o["metadata"].setdefault("annotations", {})["writer"] = str(i)
            barrier.wait()
            results.append(self.http("PUT", base + "/race", token, o))

        threads = [threading.Thread(target=put, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(r[0] for r in results)
        self.assertEqual(codes, [200, 409])
        conflict = json.loads(next(r[2] for r in results if r[0] == 409))
        self.assertEqual(conflict["reason"], "Conflict")
        self.assertEqual(conflict["message"], CONFLICT_MSG.format(name="race"))
        self.assertEqual(conflict["details"], {"name": "race", "group": "batch.company.com", "kind": "datajobs"})
        self.assert_counts(sa_user("default", "racer"), {
            ("POST", "batch.company.com", "v1", "datajobs", "", "resource", "201", "HTTP/1.1"): 1,
            ("GET", "batch.company.com", "v1", "datajobs", "", "resource", "200", "HTTP/1.1"): 1,
            ("PUT", "batch.company.com", "v1", "datajobs", "", "resource", "200", "HTTP/1.1"): 1,
            ("PUT", "batch.company.com", "v1", "datajobs", "", "resource", "409", "HTTP/1.1"): 1,
        })

    def test_runaway_operator_counts_match(self):
        tok, _, _ = self.identity("default", "datajob-operator", pod="datajob-operator-6f7d9c-abcde")
        p = self.c.run_operator(tok, ["etl-hourly", "etl-daily"], 2)
        out, _ = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, self.c.log(f"operator-{len(self.c.procs) - 1}.log"))
        report = json.loads(out.decode().strip().splitlines()[-1])
        self.assertEqual(report["connections"], 1)
        self.assertGreater(report["requests"].get("PUT 200", 0), 50, report)

        expected = {}
        for key, n in report["requests"].items():
            method, code = key.split()
            verb = {"GET": "GET", "POST": "POST", "PUT": "PUT"}[method]
            expected[(verb, "batch.company.com", "v1", "datajobs", "", "resource", code, "HTTP/2.0")] = n
        self.assert_counts(sa_user("default", "datajob-operator"), expected)

        # Metadata-only writes: generation stayed 1 through every PUT.
        _, _, token = self.identity("default", "inspector")
        _, _, body = self.http("GET", "/apis/batch.company.com/v1/namespaces/default/datajobs/etl-hourly", token)
        obj = json.loads(body)
        self.assertEqual(obj["metadata"]["generation"], 1)
        self.assertIn("batch.company.com/lastSyncTime", obj["metadata"]["annotations"])

    def test_python_client_http11_list_all_pods(self):
        import kubernetes  # Debian's python3-kubernetes
        tok, _, token = self.identity("monitoring", "python-agent")
        cfg = kubernetes.client.Configuration()
        cfg.host = self.c.base_url
        cfg.ssl_ca_cert = self.c.ca_file
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        with kubernetes.client.ApiClient(cfg) as api:
            pods = kubernetes.client.CoreV1Api(api).list_pod_for_all_namespaces()
            api.rest_client.pool_manager.clear()  # close its keep-alive connection
        self.assertIsInstance(pods.items, list)
        self.assertTrue(pods.metadata.resource_version)
        self.assert_counts(sa_user("monitoring", "python-agent"), {
            ("LIST", "", "v1", "pods", "", "cluster", "200", "HTTP/1.1"): 1})

    def test_wire_details(self):
        _, _, token = self.identity("default", "wire")
        status, h, body = self.http("GET", "/version", token)
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["gitVersion"], "v1.28.7")
        self.assertEqual(h["Cache-Control"], "no-cache, private")
        self.assertRegex(h["Audit-Id"], r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
        self.assertTrue(h["X-Kubernetes-PF-FlowSchema-UID"])
        self.assertTrue(h["X-Kubernetes-PF-PriorityLevel-UID"])
        status, _, body = self.http("GET", "/api/v1/namespaces/default/pods/nope", token)
        self.assertEqual((status, json.loads(body)["reason"], json.loads(body)["message"]),
                         (404, "NotFound", 'pods "nope" not found'))
        status, _, body = self.http("PATCH", "/apis/batch.company.com/v1/namespaces/default/datajobs/x", token,
                                    {"a": 1}, content_type="application/strategic-merge-patch+json")
        self.assertEqual((status, json.loads(body)["reason"]), (415, "UnsupportedMediaType"))
        # HTTP/2 must be served by golang.org/x/net/http2 (what the agent probes), not net/http's copy.
        r = subprocess.run(["curl", "-sS", "--http2", "--cacert", self.c.ca_file, "-o", "/dev/null",
                            "-w", "%{http_code} %{http_version}", "-H", "Authorization: Bearer " + token,
                            self.c.base_url + "/version"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.stdout, "200 2")
        self.assertEqual(self.c.server_writers().get("HTTP/2.0"), "*http2.responseWriter")


if __name__ == "__main__":
    unittest.main()
