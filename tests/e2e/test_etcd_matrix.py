"""End to end, as root: the etcd servers control planes run, attached and counted exactly.

For Debian's stripped etcd builds (bookworm 3.4.23 on Go 1.19, trixie 3.5.16 on Go 1.24, forky
3.5.30 on Go 1.26 with cgo), with client TLS and client-certificate authentication as kubeadm
runs etcd, and the test API server in front of it:
  - the agent attaches to etcd by --pid, its layout derived from the binary's type data, and
    knows it is etcd by its code: the binary runs under the name "db-server" here, and its
    gRPC requests still go to stormwatch_etcd_requests_total, never to the API server's series;
  - it is attached at go-grpc-prometheus's interceptor (stack "grpc"): 2 probe hits per unary
    call, as many entries as returns;
  - per unary gRPC method and code, the agent's stormwatch_etcd_requests_total delta equals
    etcd's own grpc_server_handled_total delta over the same traffic (kubectl creates, reads,
    lists, updates and deletes through the API server, and errors: a Range at a future
    revision is OutOfRange), exactly, and every call of the API server is credited to its
    etcd client certificate (CN=kube-apiserver-etcd-client);
  - the keys are decoded to resources: one Txn per configmap write (11) and namespace create
    (1), exactly;
  - a client talking to etcd directly (etcdctl with its own certificate, CN=etcd-debug-user)
    is named, and what its Ranges returned is exact: keys and key + value bytes as etcdctl's
    own JSON output counts them, for a prefix read, a paginated read and a keys-only read; a
    read over etcd's plaintext port (gRPC's own HTTP/2 server) is counted the same, client
    "unknown" (no certificate);
  - messages on open streams are seen one by one: 3 lease keep-alives of the direct client, by
    its certificate, equal etcd's grpc_server_msg_received_total{grpc_method="LeaseKeepAlive"},
    and the watch creates and cancels (etcdctl's, the API server's) equal its Watch messages.
"""
import base64
import json
import os
import subprocess
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


APISERVER_CN = "kube-apiserver-etcd-client"
DEBUG_CN = "etcd-debug-user"


def etcd_unary_counts(text):
    """etcd's grpc_server_handled_total for unary calls: {("/service/Method", code): count}."""
    counts = {}
    for name, labels, value in parse_metrics(text):
        if name == "grpc_server_handled_total" and labels.get("grpc_type") == "unary" and value:
            key = ("/%s/%s" % (labels["grpc_service"], labels["grpc_method"]), labels["grpc_code"])
            counts[key] = counts.get(key, 0) + int(value)
    return counts


def agent_etcd_series(agent):
    """stormwatch_etcd_requests_total and the Range keys/bytes, by their labels."""
    calls, keys, bytes_ = {}, {}, {}
    for name, labels, value in agent.metrics():
        if name == "stormwatch_etcd_requests_total" and value:
            calls[(labels["method"], labels["code"], labels["client"], labels["resource"])] = int(value)
        elif name == "stormwatch_etcd_range_keys_total" and value:
            keys[(labels["client"], labels["resource"])] = int(value)
        elif name == "stormwatch_etcd_range_bytes_total" and value:
            bytes_[(labels["client"], labels["resource"])] = int(value)
    return calls, keys, bytes_


def by_method_code(calls):
    out = {}
    for (method, code, client, resource), n in calls.items():
        out[(method, code)] = out.get((method, code), 0) + n
    return out


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

        self.assertEqual(etcd_info["stack"], "grpc", etcd_info)

        def snapshot():
            """etcd's counts and the agent's, back to back, once both stand still."""
            last = None
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                now = (etcd_unary_counts(c.etcd_metrics()), agent_etcd_series(agent))
                if now == last:
                    return now
                last = now
                time.sleep(0.5)
            return last

        time.sleep(1)
        etcd_before, (calls_before, keys_before, bytes_before) = snapshot()
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

        # Someone with etcd credentials of their own, reading etcd directly.
        cert, key = c.client_cert(DEBUG_CN)
        prefix = "/registry/configmaps/etcd-matrix/"
        expected_keys = expected_bytes = 0
        for args in (["get", "--prefix", prefix, "-w", "json"],
                     ["get", "--prefix", prefix, "--limit", "2", "-w", "json"],
                     ["get", "--prefix", prefix, "--keys-only", "-w", "json"]):
            r = c.etcdctl(*args, cert=cert, key=key)
            self.assertEqual(r.returncode, 0, r.stderr)
            kvs = json.loads(r.stdout).get("kvs", [])
            expected_keys += len(kvs)
            expected_bytes += sum(len(base64.b64decode(kv["key"])) + len(base64.b64decode(kv.get("value", "")))
                                  for kv in kvs)
        self.assertEqual(expected_keys, 4 + 2 + 4)
        r = c.etcdctl("get", prefix + "cm-1", "--rev", "999999", cert=cert, key=key)
        self.assertNotEqual(r.returncode, 0, "a Range at a future revision fails")
        # Over plaintext: gRPC's own HTTP/2 server, the same interceptor; no certificate.
        r = c.etcdctl("get", "--prefix", prefix, "--keys-only", plaintext=True)
        self.assertEqual(r.returncode, 0, r.stderr)

        etcd_after, (calls_after, keys_after, bytes_after) = snapshot()
        theirs = delta(etcd_after, etcd_before)
        calls = delta(calls_after, calls_before)
        # Method for method and code for code, exactly as etcd counts its own calls.
        self.assertEqual(by_method_code(calls), theirs)
        self.assertIn(("/etcdserverpb.KV/Range", "OutOfRange"), theirs)
        # 1 namespace + 5 creates + 5 label updates + 1 delete: one Txn each, by resource.
        txn = {k[3]: n for k, n in calls.items() if k[0] == "/etcdserverpb.KV/Txn"}
        self.assertEqual(txn, {"configmaps": 11, "namespaces": 1}, calls)
        # Who: the API server's client certificate, and the direct client by its own.
        clients = {k[2] for k in calls}
        self.assertEqual(clients, {APISERVER_CN, DEBUG_CN, "unknown"}, calls)
        self.assertEqual({(k[0], k[1], k[3]): n for k, n in calls.items() if k[2] == "unknown"},
                         {("/etcdserverpb.KV/Range", "OK", "configmaps"): 1}, calls)
        debug = {(k[0], k[1], k[3]): n for k, n in calls.items() if k[2] == DEBUG_CN}
        self.assertEqual(debug, {("/etcdserverpb.KV/Range", "OK", "configmaps"): 3,
                                 ("/etcdserverpb.KV/Range", "OutOfRange", "configmaps"): 1}, debug)
        # What the direct client's Ranges returned, key for key and byte for byte.
        debug_keys = delta(keys_after, keys_before).get((DEBUG_CN, "configmaps"), 0)
        debug_bytes = delta(bytes_after, bytes_before).get((DEBUG_CN, "configmaps"), 0)
        self.assertEqual(debug_keys, expected_keys)
        self.assertEqual(debug_bytes, expected_bytes)
        self.assertEqual(delta(keys_after, keys_before).get(("unknown", "configmaps"), 0), 4)
        # The API server's LIST of the namespace's configmaps read 5 of them from etcd at least.
        self.assertGreaterEqual(delta(keys_after, keys_before).get((APISERVER_CN, "configmaps"), 0), 5)
        # Messages on open streams, as etcd counts what it received on them.
        def stream_counts():
            last = None
            for _ in range(20):
                theirs = {}
                for name, labels, value in parse_metrics(c.etcd_metrics()):
                    if name == "grpc_server_msg_received_total" and labels.get("grpc_service") in (
                            "etcdserverpb.Watch", "etcdserverpb.Lease") and labels.get("grpc_method") in ("Watch", "LeaseKeepAlive"):
                        theirs[labels["grpc_method"]] = int(value)
                ours = {}
                for name, labels, value in agent.metrics():
                    if name == "stormwatch_etcd_stream_messages_total":
                        ours[(labels["message"], labels["resource"], labels["client"])] = int(value)
                if (theirs, ours) == last:
                    return last
                last = (theirs, ours)
                time.sleep(0.5)
            return last

        streams_before = stream_counts()
        r = c.etcdctl("lease", "grant", "60", cert=cert, key=key)
        self.assertEqual(r.returncode, 0, r.stderr)
        lease = r.stdout.split()[1]  # "lease 694d7a1b2c3d4e5f granted with TTL(60s)"
        for _ in range(3):
            r = c.etcdctl("lease", "keep-alive", "--once", lease, cert=cert, key=key)
            self.assertEqual(r.returncode, 0, r.stderr)
        watch = subprocess.Popen(["etcdctl", "--endpoints", c.etcd_url, "--cacert", c.ca_file, "--cert", cert,
                                  "--key", key, "watch", "--prefix", prefix],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "ETCDCTL_API": "3"})
        time.sleep(1.5)
        r = c.kubectl("label", "--overwrite", "configmap", "cm-1", "-n", "etcd-matrix", "round=watched",
                      kubeconfig=kubeconfig)
        self.assertEqual(r.returncode, 0, r.stderr)
        time.sleep(1)
        watch.terminate()
        out, _ = watch.communicate(timeout=10)
        self.assertIn("round", out)  # the watch saw the label change
        (theirs_after, ours_after), (theirs_before, ours_before) = stream_counts(), streams_before
        their_streams = delta(theirs_after, theirs_before)
        our_streams = delta(ours_after, ours_before)
        self.assertEqual(their_streams.get("LeaseKeepAlive"), 3, their_streams)
        self.assertEqual({k: n for k, n in our_streams.items() if k[0] == "lease_keepalive"},
                         {("lease_keepalive", "", DEBUG_CN): 3}, our_streams)
        # Every Watch message etcd received was a create or a cancel the agent saw.
        self.assertEqual(sum(n for k, n in our_streams.items() if k[0].startswith("watch_")),
                         their_streams.get("Watch", 0), (our_streams, their_streams))
        # etcdctl's watch, named by the client of the gRPC stream whose handler made it (a stream
        # opened before the agent, such as the API server's, stays "unknown").
        self.assertEqual(our_streams.get(("watch_create", "configmaps", DEBUG_CN)), 1, our_streams)
        # The streams themselves, counted when they close, are named by the client's certificate
        # (read from the context behind the ServerStream, wrapped by etcd or not).
        _, (calls_end, _, _) = snapshot()
        streams = {(k[0], k[2]): n for k, n in delta(calls_end, calls_after).items()
                   if k[0] in ("/etcdserverpb.Lease/LeaseKeepAlive", "/etcdserverpb.Watch/Watch")}
        self.assertEqual(streams, {("/etcdserverpb.Lease/LeaseKeepAlive", DEBUG_CN): 3,
                                   ("/etcdserverpb.Watch/Watch", DEBUG_CN): 1}, streams)

        hits = {l["probe"]: int(v) for n, l, v in agent.metrics() if n == "stormwatch_probe_hits_total"}
        self.assertEqual(hits.get("grpc_unary_enter"), hits.get("grpc_unary_return"), hits)
        self.assertEqual(hits.get("http2_process_headers", 0), hits.get("http2_handler_done", 0), hits)
        # None of it went into the API server's series, whatever etcd's file is called.
        api_clients = {k[0] for k in agent.request_counts()}
        self.assertNotIn("system:anonymous", api_clients)
        self.assertNotIn(DEBUG_CN, api_clients)
        print("\n%s (%s): attached at the gRPC interceptor; exact per-method/code counts %s; "
              "direct client's Ranges: %d keys, %d bytes; stream messages %s = etcd's %s"
              % (cell, etcd_info["go_version"], by_method_code(calls), debug_keys, debug_bytes,
                 our_streams, their_streams),
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
