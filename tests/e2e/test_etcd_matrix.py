"""End to end, as root: the etcd servers control planes run, attached and counted exactly.

For Debian's stripped etcd builds (bookworm 3.4.23 on Go 1.19, trixie 3.5.16 on Go 1.24, forky
3.5.30 on Go 1.26 with cgo), with client TLS and client-certificate authentication as kubeadm
runs etcd, and the test API server in front of it:
  - the agent attaches to etcd by --pid, its layout derived from the binary's type data, and
    knows it is etcd by its code: the binary runs under the name "db-server" here, and its
    gRPC requests still go to stormwatch_etcd_requests_total, never to the API server's series;
  - per unary gRPC method, the agent's stormwatch_etcd_requests_total delta equals etcd's own
    grpc_server_handled_total delta over the same traffic (kubectl creates, reads, lists,
    updates and deletes through the API server), exactly; the test's scrapes of etcd's /metrics
    are seen as non-gRPC requests ("other").
"""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import Agent, parse_metrics, require_bpf_privileges  # noqa: E402
from cluster import Cluster  # noqa: E402

DEBIAN_DIR = os.environ.get("STORMWATCH_DEBIAN_DIR",
                            os.path.join(os.environ.get("STORMWATCH_BUILD_DIR", "build"), "debian"))
ETCD_BUILDS = {
    "bookworm_3_4": ("/usr/bin/etcd", "go1.19"),
    "trixie_3_5_16": (os.path.join(DEBIAN_DIR, "trixie/root/usr/bin/etcd"), "go1.24"),
    "forky_3_5_30": (os.path.join(DEBIAN_DIR, "forky/root/usr/bin/etcd"), "go1.26"),
}


def etcd_unary_counts(text):
    """etcd's grpc_server_handled_total for unary calls: {"/service/Method": count}, and the codes."""
    counts, codes = {}, set()
    for name, labels, value in parse_metrics(text):
        if name == "grpc_server_handled_total" and labels.get("grpc_type") == "unary" and value:
            key = "/%s/%s" % (labels["grpc_service"], labels["grpc_method"])
            counts[key] = counts.get(key, 0) + int(value)
            codes.add(labels["grpc_code"])
    return counts, codes


def agent_etcd_counts(agent):
    counts = {}
    for name, labels, value in agent.metrics():
        if name == "stormwatch_etcd_requests_total" and value:
            counts[labels["method"]] = counts.get(labels["method"], 0) + int(value)
    return counts


def delta(after, before):
    out = {k: v - before.get(k, 0) for k, v in after.items()}
    return {k: v for k, v in out.items() if v}


class EtcdMatrix(unittest.TestCase):
    def run_cell(self, cell):
        require_bpf_privileges(self)
        etcd_bin, go = ETCD_BUILDS[cell]
        self.assertTrue(os.path.exists(etcd_bin), "%s missing: scripts/setup.sh fetches it" % etcd_bin)
        c = Cluster(etcd_bin=etcd_bin, etcd_name="db-server").start()
        self.addCleanup(c.stop)
        kubeconfig = c.kubeconfig(c.mint_token("default", "etcd-matrix"))
        agent = Agent(c.tmp, extra_args=["--pid", "%d,%d" % (c.apiserver_pid, c.etcd.pid)]).start()
        self.addCleanup(agent.stop)
        agent.wait_attached(2)
        info = {l["pid"]: l for n, l, v in agent.metrics() if n == "stormwatch_target_info" and v == 1}
        etcd_info = info[str(c.etcd.pid)]
        self.assertEqual(etcd_info["status"], "attached", etcd_info)
        self.assertEqual(etcd_info["role"], "etcd", etcd_info)
        self.assertEqual(etcd_info["target"], "db-server", etcd_info)
        self.assertTrue(etcd_info["go_version"].startswith(go + "."), etcd_info)
        self.assertEqual(info[str(c.apiserver_pid)]["role"], "apiserver")

        def snapshot():
            """etcd's counts and the agent's, back to back, once both stand still."""
            last = None
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                theirs, codes = etcd_unary_counts(c.etcd_metrics())
                ours = agent_etcd_counts(agent)
                now = (theirs, ours)
                if now == last:
                    return theirs, ours, codes
                last = now
                time.sleep(0.5)
            return last[0], last[1], codes

        time.sleep(1)
        etcd_before, agent_before, _ = snapshot()
        commands = [("create", "namespace", "etcd-matrix")]
        for i in range(5):
            commands += [("create", "configmap", "cm-%d" % i, "-n", "etcd-matrix", "--from-literal=k=v%d" % i),
                         ("get", "configmap", "cm-%d" % i, "-n", "etcd-matrix"),
                         ("label", "--overwrite", "configmap", "cm-%d" % i, "-n", "etcd-matrix", "round=%d" % i)]
        commands += [("get", "configmaps", "-n", "etcd-matrix"), ("get", "namespaces"),
                     ("delete", "configmap", "cm-0", "-n", "etcd-matrix")]
        for cmd in commands:
            r = c.kubectl(*cmd, kubeconfig=kubeconfig)
            self.assertEqual(r.returncode, 0, "%s: %s" % (cmd, r.stderr))
        etcd_after, agent_after, codes = snapshot()
        theirs = delta(etcd_after, etcd_before)
        ours = delta(agent_after, agent_before)
        self.assertEqual(codes, {"OK"})
        # 1 namespace + 5 creates + 5 label updates + 1 delete: one Txn each.
        self.assertEqual(theirs.get("/etcdserverpb.KV/Txn", 0), 12, theirs)
        self.assertGreaterEqual(theirs.get("/etcdserverpb.KV/Range", 0), 7, theirs)
        # The test's own scrapes of etcd's /metrics (HTTP/1.1 on the client port) are counted
        # too, as "other": everything else is gRPC, method for method.
        self.assertGreater(ours.pop("other", 0), 0)
        self.assertEqual(ours, theirs)
        # None of it went into the API server's series, whatever etcd's file is called.
        api_clients = {k[0] for k in agent.request_counts()}
        self.assertNotIn("system:anonymous", api_clients)
        print("\n%s (%s): attached as etcd, exact per-method counts: %s" % (cell, etcd_info["go_version"], theirs),
              file=sys.stderr)


def _make_cell(cell):
    def test(self):
        self.run_cell(cell)
    test.__doc__ = "etcd %s: attached, per-method counts equal grpc_server_handled_total" % cell
    return test


for _cell in ETCD_BUILDS:
    setattr(EtcdMatrix, "test_" + _cell, _make_cell(_cell))


if __name__ == "__main__":
    unittest.main(verbosity=2)
