"""The test apiserver's kube-apiserver semantics, with real clients (kubectl, curl, the Python
kubernetes client) against real etcd: client-certificate authentication, API Priority and
Fairness (classification, UIDs, 429 + Retry-After under a concurrency limit), LIST semantics
(resourceVersion ""/"0"/N, resourceVersionMatch, limit + continue) and finalizers.

    cd /work/main && STORMWATCH_GO_OUT=/tmp/sw /usr/bin/python3 -m unittest -v tests/e2e/test_apiserver_semantics.py

The server runs with --test-delays (requests carrying X-Stormwatch-Test-Delay are slow),
--max-inflight-per-level global-default=1 (certificate users outside system:masters land in
global-default) and --request-timeout 4s (so a queued request is rejected after 1 s).
"""

import base64
import collections
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster  # noqa: E402

FC = "/apis/flowcontrol.apiserver.k8s.io/v1beta3"
DJ = "/apis/batch.company.com/v1/namespaces/{ns}/datajobs"


def counts_for(rows, client):
    out = collections.Counter()
    for r in rows:
        if r["client"] == client:
            out[(r["verb"], r["resource"], r["code"])] += r["count"]
    return dict(out)


class ApiserverSemanticsTest(unittest.TestCase):
    c = None
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(apiserver_args=["--test-delays", "--max-inflight-per-level", "global-default=1",
                                        "--request-timeout", "4s"]).start()
        cls.ssl_ctx = ssl.create_default_context(cafile=cls.c.ca_file)
        cls.admin_ctx = ssl.create_default_context(cafile=cls.c.ca_file)
        cls.admin_ctx.load_cert_chain(cls.c.admin_cert, cls.c.admin_key)
        # UIDs by name, from the served objects (what the agent maps header UIDs with).
        cls.fs_uid = {o["metadata"]["name"]: o["metadata"]["uid"]
                      for o in cls.get_json(FC + "/flowschemas?resourceVersion=0")["items"]}
        cls.pl_uid = {o["metadata"]["name"]: o["metadata"]["uid"]
                      for o in cls.get_json(FC + "/prioritylevelconfigurations?resourceVersion=0")["items"]}

    @classmethod
    def tearDownClass(cls):
        if cls.c:
            cls.c.stop()

    # ---- helpers ----

    @classmethod
    def req(cls, method, path, body=None, token=None, ctx=None, headers=None, content_type="application/json"):
        """One HTTP/1.1 request; admin certificate unless a token or another context is given."""
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        r = urllib.request.Request(cls.c.base_url + path, data=data, method=method)
        if token:
            r.add_header("Authorization", "Bearer " + token)
        if data is not None:
            r.add_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            r.add_header(k, v)
        if ctx is None:
            ctx = cls.ssl_ctx if token else cls.admin_ctx
        try:
            with urllib.request.urlopen(r, context=ctx, timeout=30) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    @classmethod
    def get_json(cls, path, **kw):
        status, _, body = cls.req("GET", path, **kw)
        assert status == 200, (path, status, body)
        return json.loads(body)

    def token(self, ns, sa):
        with open(self.c.mint_token(ns, sa)) as f:
            return f.read().strip()

    def cert_ctx(self, cn, orgs):
        cert, key = self.c.client_cert(cn, orgs)
        ctx = ssl.create_default_context(cafile=self.c.ca_file)
        ctx.load_cert_chain(cert, key)
        return ctx, cert, key

    def curl(self, *args, cert=None, timeout=30):
        argv = ["curl", "-sS", "--cacert", self.c.ca_file]
        if cert:
            argv += ["--cert", cert[0], "--key", cert[1]]
        return subprocess.run(argv + list(args), capture_output=True, text=True, timeout=timeout)

    def assert_pf(self, headers, flowschema, level):
        self.assertEqual(headers["X-Kubernetes-PF-FlowSchema-UID"], self.fs_uid[flowschema])
        self.assertEqual(headers["X-Kubernetes-PF-PriorityLevel-UID"], self.pl_uid[level])

    def ensure_ns(self, ns):
        status, _, _ = self.req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self.assertIn(status, (201, 409))

    # ---- 1. client certificates ----

    def test_admin_cert_kubectl_is_exempt(self):
        r = self.c.kubectl("get", "ns", "-o", "name", kubeconfig=self.c.admin_kubeconfig)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("namespace/kube-system", r.stdout.split())
        # The same certificate over HTTP/2 with curl: the exempt FlowSchema and level.
        r = self.curl("-i", "--http2", self.c.base_url + "/api/v1/namespaces/default/configmaps",
                      cert=(self.c.admin_cert, self.c.admin_key))
        head = r.stdout.lower()
        self.assertIn("http/2 200", head)
        self.assertIn("x-kubernetes-pf-flowschema-uid: " + self.fs_uid["exempt"], head)
        self.assertIn("x-kubernetes-pf-prioritylevel-uid: " + self.pl_uid["exempt"], head)
        got = counts_for(self.c.server_counts(), "kubernetes-admin")
        self.assertGreaterEqual(got.get(("LIST", "namespaces", "200"), 0), 1)
        self.assertGreaterEqual(got.get(("LIST", "configmaps", "200"), 0), 1)

    def test_cert_groups_from_every_o(self):
        # Several O values: each is a group; system:masters in second place still means exempt.
        ctx, _, _ = self.cert_ctx("carol", ["dev", "system:masters"])
        status, h, _ = self.req("GET", "/api/v1/namespaces/default/pods", ctx=ctx)
        self.assertEqual(status, 200)
        self.assert_pf(h, "exempt", "exempt")
        # An ordinary user: global-default. Nodes: system-node-high for leases, system-nodes else.
        ctx, _, _ = self.cert_ctx("dave", ["dev"])
        status, h, _ = self.req("GET", "/version", ctx=ctx)
        self.assertEqual(status, 200)
        self.assert_pf(h, "global-default", "global-default")
        ctx, _, _ = self.cert_ctx("system:node:n1", ["system:nodes"])
        status, h, _ = self.req("GET", "/api/v1/namespaces/default/configmaps", ctx=ctx)
        self.assertEqual(status, 200)
        self.assert_pf(h, "system-nodes", "system")
        status, h, _ = self.req("GET", "/healthz", ctx=ctx)
        self.assert_pf(h, "probes", "exempt")
        ctx, _, _ = self.cert_ctx("system:kube-controller-manager", [])
        status, h, _ = self.req("GET", "/api/v1/pods", ctx=ctx)
        self.assert_pf(h, "kube-controller-manager", "workload-high")
        # kube-system service accounts: workload-high; others: workload-low.
        status, h, _ = self.req("GET", "/api/v1/pods", token=self.token("kube-system", "replicaset-controller"))
        self.assert_pf(h, "kube-system-service-accounts", "workload-high")
        counts = self.c.server_counts()
        self.assertEqual(counts_for(counts, "carol"), {("LIST", "pods", "200"): 1})
        self.assertEqual(counts_for(counts, "dave"), {("GET", "", "200"): 1})

    def test_untrusted_or_cnless_cert(self):
        # A certificate from another CA authenticates nobody: 401 without a token, and a valid
        # bearer token still authenticates (the union authenticator moves on).
        d = self.c._path("pki")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "rogue.key",
                        "-out", "rogue.crt", "-days", "1", "-subj", "/O=system:masters/CN=mallory",
                        "-addext", "extendedKeyUsage=clientAuth"], cwd=d, check=True, capture_output=True)
        rogue = (os.path.join(d, "rogue.crt"), os.path.join(d, "rogue.key"))
        r = self.curl("-o", "/dev/null", "-w", "%{http_code}", self.c.base_url + "/api/v1/pods", cert=rogue)
        self.assertEqual(r.stdout, "401")
        tok = self.token("default", "with-rogue-cert")
        r = self.curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer " + tok,
                      self.c.base_url + "/api/v1/pods", cert=rogue)
        self.assertEqual(r.stdout, "200")
        self.assertEqual(counts_for(self.c.server_counts(), "system:serviceaccount:default:with-rogue-cert"),
                         {("LIST", "pods", "200"): 1})
        self.assertEqual(counts_for(self.c.server_counts(), "mallory"), {})
        # A valid certificate beats a token (x509 is first in the union).
        tok = self.token("default", "loser")
        r = self.curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer " + tok,
                      self.c.base_url + "/api/v1/pods", cert=self.c.client_cert("winner", ["dev"]))
        self.assertEqual(r.stdout, "200")
        self.assertEqual(counts_for(self.c.server_counts(), "winner"), {("LIST", "pods", "200"): 1})
        self.assertEqual(counts_for(self.c.server_counts(), "system:serviceaccount:default:loser"), {})

    # ---- 2. APF objects and classification ----

    def test_apf_objects(self):
        self.assertEqual(set(self.pl_uid), {"exempt", "catch-all", "system", "node-high", "leader-election",
                                            "workload-high", "workload-low", "global-default"})
        self.assertEqual(set(self.fs_uid), {
            "exempt", "probes", "system-leader-election", "endpoint-controller", "workload-leader-election",
            "system-node-high", "system-nodes", "kube-controller-manager", "kube-scheduler",
            "kube-system-service-accounts", "service-accounts", "global-default", "catch-all"})
        fs = self.get_json(FC + "/flowschemas/service-accounts")
        self.assertEqual(fs["kind"], "FlowSchema")
        self.assertEqual(fs["spec"]["priorityLevelConfiguration"], {"name": "workload-low"})
        self.assertEqual(fs["spec"]["matchingPrecedence"], 9000)
        self.assertEqual(fs["spec"]["distinguisherMethod"], {"type": "ByUser"})
        self.assertEqual(fs["spec"]["rules"][0]["subjects"], [{"kind": "Group", "group": {"name": "system:serviceaccounts"}}])
        pl = self.get_json(FC + "/prioritylevelconfigurations/exempt")
        self.assertEqual(pl["spec"]["type"], "Exempt")
        pl = self.get_json(FC + "/prioritylevelconfigurations/catch-all")
        self.assertEqual(pl["spec"]["limited"]["limitResponse"], {"type": "Reject"})
        # Same UIDs from an rv="" (etcd) read, from kubectl, and in the debug view.
        self.assertEqual(self.get_json(FC + "/flowschemas/exempt")["metadata"]["uid"], self.fs_uid["exempt"])
        r = self.c.kubectl("get", "prioritylevelconfigurations", "-o",
                           "custom-columns=NAME:.metadata.name,UID:.metadata.uid", "--no-headers",
                           kubeconfig=self.c.admin_kubeconfig)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(dict(line.split() for line in r.stdout.splitlines()), self.pl_uid)
        apf = self.c.server_apf()
        self.assertEqual({k: v["uid"] for k, v in apf["flowSchemas"].items()}, self.fs_uid)
        self.assertEqual(apf["priorityLevels"]["global-default"]["limit"], 1)
        self.assertEqual(apf["priorityLevels"]["workload-low"]["limit"], 245)  # ceil(600*100/245)
        # Read-only here.
        status, _, _ = self.req("DELETE", FC + "/flowschemas/exempt")
        self.assertEqual(status, 405)

    def test_python_client_service_account_is_workload_low(self):
        import kubernetes
        token = self.token("monitoring", "py-sa")
        cfg = kubernetes.client.Configuration()
        cfg.host = self.c.base_url
        cfg.ssl_ca_cert = self.c.ca_file
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        with kubernetes.client.ApiClient(cfg) as api:
            _, status, headers = kubernetes.client.CoreV1Api(api).list_namespaced_config_map_with_http_info("default")
            api.rest_client.pool_manager.clear()
        self.assertEqual(status, 200)
        self.assertEqual(headers["X-Kubernetes-PF-FlowSchema-UID"], self.fs_uid["service-accounts"])
        self.assertEqual(headers["X-Kubernetes-PF-PriorityLevel-UID"], self.pl_uid["workload-low"])

    # ---- 3. 429 under a concurrency limit ----

    def test_429_retry_after_when_level_is_full(self):
        cert = self.c.client_cert("erin", ["dev"])  # global-default, limit 1
        url = self.c.base_url + "/api/v1/namespaces/default/configmaps"
        out = {}

        def slow():
            out["slow"] = self.curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "X-Stormwatch-Test-Delay: 3s",
                                    url, cert=cert)

        t = threading.Thread(target=slow)
        t.start()
        try:
            deadline = time.time() + 5  # until the slow request holds the level's only seat
            while self.c.server_apf()["priorityLevels"]["global-default"]["executing"] < 1 and time.time() < deadline:
                time.sleep(0.02)
            # A second request waits in its queue for a quarter of --request-timeout (1 s), then 429.
            t0 = time.time()
            r = self.curl("-i", "--http2", url, cert=cert)
            waited = time.time() - t0
            head, _, body = r.stdout.replace("\r\n", "\n").partition("\n\n")
            self.assertRegex(head, r"^HTTP/2 429")
            hl = head.lower()
            self.assertIn("retry-after: 1\n", hl + "\n")
            self.assertIn("content-type: text/plain; charset=utf-8", hl)
            self.assertIn("x-kubernetes-pf-flowschema-uid: " + self.fs_uid["global-default"], hl)
            self.assertIn("x-kubernetes-pf-prioritylevel-uid: " + self.pl_uid["global-default"], hl)
            self.assertEqual(body, "Too many requests, please try again later.\n")
            self.assertGreater(waited, 0.9)
            # Exempt requests are never limited, service accounts are on another level.
            status, h, _ = self.req("GET", "/api/v1/namespaces/default/configmaps")
            self.assertEqual(status, 200)
            status, h, _ = self.req("GET", "/api/v1/namespaces/default/configmaps", token=self.token("default", "busy-sa"))
            self.assertEqual(status, 200)
        finally:
            t.join(timeout=20)
        self.assertEqual(out["slow"].stdout, "200")
        # A request that queues for less than the wait limit is served when the seat frees.
        t = threading.Thread(target=lambda: out.update(short=self.curl(
            "-o", "/dev/null", "-w", "%{http_code}", "-H", "X-Stormwatch-Test-Delay: 300ms", url, cert=cert)))
        t.start()
        time.sleep(0.1)
        r = self.curl("-o", "/dev/null", "-w", "%{http_code}", url, cert=cert)
        t.join(timeout=20)
        self.assertEqual((out["short"].stdout, r.stdout), ("200", "200"))
        # An established watch does not hold a seat (APF only covers its initialisation).
        watch = subprocess.Popen(["curl", "-sS", "-N", "--cacert", self.c.ca_file, "--cert", cert[0], "--key", cert[1],
                                  url + "?watch=true&timeoutSeconds=2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            time.sleep(0.5)
            r = self.curl("-o", "/dev/null", "-w", "%{http_code}", url, cert=cert)
            self.assertEqual(r.stdout, "200")
            watch.wait(timeout=15)
        finally:
            if watch.poll() is None:
                watch.kill()
                watch.wait()
        self.assertEqual(counts_for(self.c.server_counts(), "erin"),
                         {("LIST", "configmaps", "200"): 4, ("LIST", "configmaps", "429"): 1,
                          ("WATCH", "configmaps", "200"): 1})
        self.assertEqual(self.c.server_apf()["priorityLevels"]["global-default"]["rejected"], 1)

    # ---- 4. LIST semantics ----

    def test_pagination_kubectl_and_python(self):
        ns = "pages"
        self.ensure_ns(ns)
        for i in range(5):
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}}
            self.assertEqual(self.req("POST", f"/api/v1/namespaces/{ns}/configmaps", cm)[0], 201)
        # kubectl --chunk-size=2: three requests, limit=2, the last two with continue.
        r = self.c.kubectl("-v=6", "-n", ns, "get", "cm", "--chunk-size=2", "-o", "name", kubeconfig=self.c.admin_kubeconfig)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [f"configmap/cm-{i}" for i in range(5)])
        lists = [line for line in r.stderr.splitlines() if f"/namespaces/{ns}/configmaps?" in line]
        self.assertEqual(len(lists), 3, r.stderr)
        self.assertTrue(all("limit=2" in line for line in lists))
        self.assertEqual(sum("continue=" in line for line in lists), 2)

        # The Python client: limit/_continue, remainingItemCount, a consistent snapshot.
        import kubernetes
        cfg = kubernetes.client.Configuration()
        cfg.host = self.c.base_url
        cfg.ssl_ca_cert = self.c.ca_file
        cfg.api_key = {"authorization": self.token("default", "pager")}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        with kubernetes.client.ApiClient(cfg) as api:
            core = kubernetes.client.CoreV1Api(api)
            page1 = core.list_namespaced_config_map(ns, limit=2)
            self.assertEqual([c.metadata.name for c in page1.items], ["cm-0", "cm-1"])
            self.assertEqual(page1.metadata.remaining_item_count, 3)
            tok = json.loads(base64.urlsafe_b64decode(page1.metadata._continue + "=="))
            self.assertEqual(tok, {"v": "meta.k8s.io/v1", "rv": int(page1.metadata.resource_version), "start": "cm-1\x00"})
            # Written after page 1: not in the continued list (it reads at page 1's revision).
            self.assertEqual(self.req("POST", f"/api/v1/namespaces/{ns}/configmaps",
                                      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-9"}})[0], 201)
            page2 = core.list_namespaced_config_map(ns, limit=2, _continue=page1.metadata._continue)
            page3 = core.list_namespaced_config_map(ns, limit=2, _continue=page2.metadata._continue)
            api.rest_client.pool_manager.clear()
        self.assertEqual([c.metadata.name for c in page2.items], ["cm-2", "cm-3"])
        self.assertEqual(page2.metadata.remaining_item_count, 1)
        self.assertEqual([c.metadata.name for c in page3.items], ["cm-4"])
        self.assertIsNone(page3.metadata._continue)
        self.assertEqual({page1.metadata.resource_version, page2.metadata.resource_version,
                          page3.metadata.resource_version}, {page1.metadata.resource_version})
        self.assertEqual(counts_for(self.c.server_counts(), "system:serviceaccount:default:pager"),
                         {("LIST", "configmaps", "200"): 3})
        # A broken token: 400.
        status, _, body = self.req("GET", f"/api/v1/namespaces/{ns}/configmaps?limit=2&continue=bm90LWpzb24")
        self.assertEqual(status, 400, body)
        self.assertIn("invalid continue token", json.loads(body)["message"])

    def test_resource_version_semantics(self):
        ns = "rvtest"
        self.ensure_ns(ns)
        path = f"/api/v1/namespaces/{ns}/configmaps"
        for name in ("a", "b", "c"):
            self.assertEqual(self.req("POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})[0], 201)
        before = self.c.server_storage()
        consistent = self.get_json(path)  # rv="": etcd at the current revision
        rv = int(consistent["metadata"]["resourceVersion"])
        cached = self.get_json(path + "?resourceVersion=0&limit=1")  # cache; limit ignored
        self.assertEqual([o["metadata"]["name"] for o in cached["items"]], ["a", "b", "c"])
        self.assertNotIn("continue", cached["metadata"])
        self.assertGreaterEqual(int(cached["metadata"]["resourceVersion"]), 1)
        fresh = self.get_json(path + f"?resourceVersion={rv}")  # not older than rv: from the cache
        self.assertGreaterEqual(int(fresh["metadata"]["resourceVersion"]), rv)
        paged = self.get_json(path + "?limit=1")  # etcd, paginated
        self.assertEqual(len(paged["items"]), 1)
        self.assertEqual(paged["metadata"]["remainingItemCount"], 2)
        self.get_json(path + "/a?resourceVersion=0")  # GET from the cache
        after = self.c.server_storage()
        self.assertEqual(after["etcdList"] - before["etcdList"], 2)
        self.assertEqual(after["cacheList"] - before["cacheList"], 2)
        self.assertEqual(after["cacheGet"] - before["cacheGet"], 1)

        # Exact reads the past; NotOlderThan a future revision is a 504.
        self.assertEqual(self.req("POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}})[0], 201)
        past = self.get_json(path + f"?resourceVersion={rv}&resourceVersionMatch=Exact")
        self.assertEqual([o["metadata"]["name"] for o in past["items"]], ["a", "b", "c"])
        self.assertEqual(past["metadata"]["resourceVersion"], str(rv))
        status, h, body = self.req("GET", path + f"?resourceVersion={rv + 1000}&resourceVersionMatch=NotOlderThan")
        self.assertEqual(status, 504, body)
        st = json.loads(body)
        self.assertEqual((st["reason"], st["details"]["retryAfterSeconds"]), ("Timeout", 1))
        self.assertTrue(st["message"].startswith(f"Too large resource version: {rv + 1000}, current: "))
        self.assertEqual(h["Retry-After"], "1")

        # resourceVersionMatch validation: 422 Invalid on ListOptions.
        cases = {
            "resourceVersionMatch=Exact":
                'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided',
            "resourceVersion=0&resourceVersionMatch=Exact":
                'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
            "resourceVersion=5&resourceVersionMatch=Newest":
                'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""',
        }
        for query, msg in cases.items():
            status, _, body = self.req("GET", path + "?" + query)
            self.assertEqual(status, 422, query)
            st = json.loads(body)
            self.assertEqual((st["reason"], st["message"]), ("Invalid", msg))
            self.assertEqual((st["details"]["group"], st["details"]["kind"]), ("meta.k8s.io", "ListOptions"))

    # ---- 5. finalizers ----

    def test_finalizers_and_deletion_timestamp(self):
        token = self.token("default", "finalizer-owner")
        base = DJ.format(ns="default")
        dj = {"apiVersion": "batch.company.com/v1", "kind": "DataJob",
              "metadata": {"name": "fin", "finalizers": ["batch.company.com/cleanup"]}, "spec": {"image": "a"}}
        status, _, body = self.req("POST", base, dj, token=token)
        self.assertEqual(status, 201, body)
        rv = json.loads(body)["metadata"]["resourceVersion"]
        watch = subprocess.Popen(
            ["curl", "-sS", "-N", "--cacert", self.c.ca_file, "-H", f"Authorization: Bearer {token}",
             f"{self.c.base_url}{base}?watch=true&resourceVersion={rv}&timeoutSeconds=4"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.3)
            # kubectl delete --wait=false: 200 with the object, still there, deletionTimestamp set.
            kc = self.c.kubeconfig(self.c.mint_token("default", "finalizer-owner"))
            r = self.c.kubectl("delete", "dj", "fin", "--wait=false", kubeconfig=kc)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = self.get_json(base + "/fin", token=token)
            self.assertTrue(got["metadata"]["deletionTimestamp"])
            self.assertEqual(got["metadata"]["deletionGracePeriodSeconds"], 0)
            self.assertEqual(got["metadata"]["generation"], 2)
            status, _, body = self.req("DELETE", base + "/fin", token=token)  # again: unchanged, 200
            self.assertEqual((status, json.loads(body)["metadata"]["resourceVersion"]),
                             (200, got["metadata"]["resourceVersion"]))
            # No new finalizers on an object being deleted.
            status, _, body = self.req("PATCH", base + "/fin", {"metadata": {"finalizers": ["batch.company.com/cleanup", "x.io/more"]}},
                                       token=token, content_type="application/merge-patch+json")
            self.assertEqual(status, 422, body)
            self.assertEqual(json.loads(body)["message"],
                             'DataJob.batch.company.com "fin" is invalid: metadata.finalizers: Forbidden: no new finalizers '
                             'can be added if the object is being deleted, found new finalizers []string{"x.io/more"}')
            # Removing the last finalizer deletes it.
            status, _, body = self.req("PATCH", base + "/fin", {"metadata": {"finalizers": None}}, token=token,
                                       content_type="application/merge-patch+json")
            self.assertEqual(status, 200, body)
            self.assertEqual(self.req("GET", base + "/fin", token=token)[0], 404)
            # Without finalizers: deleted at once.
            dj["metadata"] = {"name": "nofin"}
            self.assertEqual(self.req("POST", base, dj, token=token)[0], 201)
            status, _, body = self.req("DELETE", base + "/nofin", token=token)
            self.assertEqual(status, 200)
            self.assertEqual(self.req("GET", base + "/nofin", token=token)[0], 404)
            out, _ = watch.communicate(timeout=15)
        finally:
            if watch.poll() is None:
                watch.kill()
                watch.wait()
        events = [(e["type"], e["object"]["metadata"]["name"], bool(e["object"]["metadata"].get("deletionTimestamp")))
                  for e in map(json.loads, out.splitlines())]
        self.assertEqual(events, [("MODIFIED", "fin", True), ("DELETED", "fin", True),
                                  ("ADDED", "nofin", False), ("DELETED", "nofin", False)])


if __name__ == "__main__":
    unittest.main()
