"""The agent's APF fetcher (agent/kube/apf_fetcher.cc) against the real test API server and
etcd: it names every FlowSchema / PriorityLevelConfiguration UID the server returns in
X-Kubernetes-PF-*-UID response headers, reading the lists with a bound service-account token and
the cluster CA, from the watch cache (resourceVersion=0), after falling back from flowcontrol v1
(not served by 1.28) to v1beta3. No BPF, no privileges.

    cd /work/main && STORMWATCH_BUILD_DIR=/tmp/build /usr/bin/python3 -m unittest -v tests/e2e/test_apf_names.py

The C++ side is the gtest ApfFetcherLive.DISABLED_NamesEveryUidTheServerReturns in the unit_tests binary
($STORMWATCH_BUILD_DIR/tests/unit_tests), given the cluster and the expected names in the JSON
file named by STORMWATCH_APF_LIVE.
"""

import collections
import json
import os
import ssl
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster  # noqa: E402

FC = "flowcontrol.apiserver.k8s.io"
AGENT_USER = "system:serviceaccount:monitoring:stormwatch"


def unit_tests_binary():
    build = os.environ.get("STORMWATCH_BUILD_DIR", "/work/main/build")
    return os.path.join(build, "tests", "unit_tests")


class ApfNamesTest(unittest.TestCase):
    c = None
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(unit_tests_binary()):
            raise unittest.SkipTest(f"missing {unit_tests_binary()} (cmake --build BUILD --target unit_tests)")
        cls.c = Cluster().start()

    @classmethod
    def tearDownClass(cls):
        if cls.c:
            cls.c.stop()

    def pf_headers(self, path, token=None, cert=None):
        """GET path; returns the response's (FlowSchema UID, PriorityLevel UID)."""
        ctx = ssl.create_default_context(cafile=self.c.ca_file)
        if cert:
            ctx.load_cert_chain(*cert)
        req = urllib.request.Request(self.c.base_url + path)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
                headers = r.headers
        except urllib.error.HTTPError as e:  # APF classifies before routing: 404s carry them too
            headers = e.headers
        return headers["X-Kubernetes-PF-FlowSchema-UID"], headers["X-Kubernetes-PF-PriorityLevel-UID"]

    def token(self, ns, sa):
        with open(self.c.mint_token(ns, sa)) as f:
            return f.read().strip()

    def test_fetcher_names_every_uid_in_response_headers(self):
        # The oracle: the server's own UID per name (/debug/apf), 8 levels and 13 schemas.
        apf = self.c.server_apf()
        pl_names = {v["uid"]: name for name, v in apf["priorityLevels"].items()}
        fs_names = {v["uid"]: name for name, v in apf["flowSchemas"].items()}
        self.assertEqual(len(pl_names), 8)
        self.assertEqual(len(fs_names), 13)

        # Requests that land in different schemas and levels, and what the headers must name.
        configmaps = "/api/v1/namespaces/default/configmaps"
        cases = [
            ("admin certificate (system:masters)", configmaps, {"cert": (self.c.admin_cert, self.c.admin_key)},
             "exempt", "exempt"),
            ("service account", configmaps, {"token": self.token("default", "app")},
             "service-accounts", "workload-low"),
            ("kube-system service account", configmaps, {"token": self.token("kube-system", "replicaset-controller")},
             "kube-system-service-accounts", "workload-high"),
            ("kube-system lease", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler",
             {"token": self.token("kube-system", "leader")}, "system-leader-election", "leader-election"),
            ("probe", "/healthz", {"token": self.token("default", "prober")}, "probes", "exempt"),
            ("user certificate", configmaps, {"cert": self.c.client_cert("jane", ["dev"])},
             "global-default", "global-default"),
            ("node", "/api/v1/nodes/node-1", {"cert": self.c.client_cert("system:node:node-1", ["system:nodes"])},
             "system-node-high", "node-high"),
            ("scheduler", configmaps, {"cert": self.c.client_cert("system:kube-scheduler")},
             "kube-scheduler", "workload-high"),
        ]
        seen_pl, seen_fs = set(), set()
        for what, path, creds, flow_schema, level in cases:
            fs_uid, pl_uid = self.pf_headers(path, **creds)
            with self.subTest(what):
                self.assertEqual(fs_names.get(fs_uid), flow_schema)
                self.assertEqual(pl_names.get(pl_uid), level)
            seen_fs.add(fs_uid)
            seen_pl.add(pl_uid)
        self.assertEqual(len(seen_fs), 8)
        self.assertEqual(len(seen_pl), 6)  # every level but system and catch-all

        # The fetcher, with the agent's own token: it must name all of them (and every other UID
        # the server holds: catch-all is in no header, as everyone authenticated is matched first).
        spec_path = os.path.join(self.c.tmp, "apf_live.json")
        token_file = self.c.mint_token("monitoring", "stormwatch")
        with open(spec_path, "w") as f:
            json.dump({"url": self.c.base_url, "token_file": token_file, "ca_file": self.c.ca_file,
                       "priority_levels": pl_names, "flow_schemas": fs_names}, f)
        before = self.c.server_storage()
        r = subprocess.run([unit_tests_binary(), "--gtest_filter=ApfFetcherLive.*", "--gtest_also_run_disabled_tests"],
                           env=dict(os.environ, STORMWATCH_APF_LIVE=spec_path),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout[-4000:] + r.stderr[-4000:])
        self.assertIn("[  PASSED  ] 1 test.", r.stdout)
        self.assertNotIn("SKIPPED", r.stdout)
        with open(token_file) as f:
            self.assertNotIn(f.read().strip(), r.stdout + r.stderr)

        # What the fetcher asked: two fetches (at start, then after the unknown-UID nudge); v1 is
        # tried once and remembered as not served; every LIST at resourceVersion=0 from the cache.
        got = collections.Counter()
        for row in self.c.server_counts():
            if row["client"] == AGENT_USER:
                got[(row["verb"], row["group"], row["version"], row["resource"], row["code"])] += row["count"]
        self.assertEqual(dict(got), {
            ("LIST", FC, "v1", "prioritylevelconfigurations", "404"): 1,
            ("LIST", FC, "v1beta3", "prioritylevelconfigurations", "200"): 2,
            ("LIST", FC, "v1beta3", "flowschemas", "200"): 2,
        })
        after = self.c.server_storage()
        self.assertEqual(after["cacheList"] - before["cacheList"], 4)
        self.assertEqual(after["etcdList"] - before["etcdList"], 0)


if __name__ == "__main__":
    unittest.main()
