"""End to end, as root: the capture matrix of issue 3, items 1 and 2.

For each Go toolchain of the matrix (the test API server built, stripped, by Go 1.19, 1.21, 1.22
and 1.23: CMake's test-apiserver-go1.NN) and each HTTP/2 server stack (--http2-stack=xnet:
golang.org/x/net/http2; std: net/http's bundled copy), with real etcd and the real agent
attached by --pid:
  - the agent attaches to the binary with both stacks (status="attached", stack="x/net,std");
  - the server reports the expected ResponseWriter type for HTTP/2 (proof of which stack served);
  - stormwatch_requests_total equals, per client/verb/group/version/resource/subresource/scope/
    code, exactly what the server handled meanwhile (/debug/counts), with zero capture losses,
    and each probe fired exactly once per request.
Plus the refusal of an unproven Go version: the go1.21 build with its .go.buildinfo version
patched to go1.18.10 is not attached; the agent says which target, which versions and why, in
one log line and in target_info{status="refused"} and attach_failures_total{reason="unproven_version"}.

The proven table these runs prove is agent/capture/go_offsets.cc's.
"""
import json
import os
import shutil
import struct
import sys
import tempfile
import time
import urllib.parse
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import Agent, require_bpf_privileges  # noqa: E402
from counts import count_map, delta  # noqa: E402
from cluster import Cluster, default_go_out  # noqa: E402

GO_MATRIX = ["1.19", "1.21", "1.22", "1.23"]
STACKS = {
    # --http2-stack value: the Go type of the HTTP/2 ResponseWriter the handler gets
    "xnet": "*http2.responseWriter",
    "std": "*http.http2responseWriter",
}
OPERATOR_NS, OPERATOR_SA = "datajobs-system", "datajob-operator"
OPERATOR = "system:serviceaccount:%s:%s" % (OPERATOR_NS, OPERATOR_SA)
WORK_NS = "etl"
DATAJOB = """apiVersion: batch.company.com/v1
kind: DataJob
metadata:
  name: %s
  namespace: etl
spec:
  schedule: "0 2 * * *"
  image: registry.example/etl:1.0
"""


def apiserver_build(version):
    return os.path.join(default_go_out(), "test-apiserver-go" + version)


def patch_buildinfo_go_version(src, dst, old, new):
    """Copies the Go binary src to dst with the Go version in its .go.buildinfo section changed
    from old to new (same length, so the section's length-prefixed string stays valid). Only
    .go.buildinfo is touched: that is where the agent (and `go version -m`) reads it."""
    assert len(old) == len(new), (old, new)
    with open(src, "rb") as f:
        data = bytearray(f.read())
    # ELF64 little endian: section headers, then the section name string table.
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(i):
        name, _type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, off, size

    _, stroff, _ = section(shstrndx)
    for i in range(shnum):
        name, off, size = section(i)
        end = data.index(b"\0", stroff + name)
        if bytes(data[stroff + name:end]) == b".go.buildinfo":
            pos = data.find(old.encode(), off, off + size)
            if pos < 0:
                raise AssertionError("%s not in .go.buildinfo of %s" % (old, src))
            data[pos:pos + len(old)] = new.encode()
            with open(dst, "wb") as f:
                f.write(data)
            os.chmod(dst, 0o755)
            return
    raise AssertionError("no .go.buildinfo section in %s" % src)


class CaptureMatrixBase(unittest.TestCase):
    def setUp(self):
        require_bpf_privileges(self)
        self.agent = None
        self.cluster = None

    def tearDown(self):
        if self.agent:
            self.agent.stop()
            if self._failed():
                print("agent stderr:\n" + self.agent.stderr()[-4000:], file=sys.stderr)
        if self.cluster and self._failed():
            print("apiserver log:\n" + self.cluster.log("apiserver.log")[-3000:], file=sys.stderr)

    def _failed(self):
        result = getattr(getattr(self, "_outcome", None), "result", None)
        problems = (getattr(result, "errors", []) or []) + (getattr(result, "failures", []) or [])
        return any(t is self for t, _ in problems)

    def start_cluster(self, binary, args=()):
        self.assertTrue(os.path.exists(binary),
                        "%s missing: build with cmake (the Go toolchain comes from scripts/setup.sh)" % binary)
        self.cluster = Cluster(apiserver_bin=binary, apiserver_args=list(args)).start()
        self.addCleanup(self.cluster.stop)
        return self.cluster

    def start_agent(self):
        self.agent = Agent(self.cluster.tmp, extra_args=["--pid", str(self.cluster.apiserver_pid)]).start()
        return self.agent

    def target_info(self):
        return [l for n, l, v in self.agent.metrics() if n == "stormwatch_target_info" and v == 1]


class CaptureMatrix(CaptureMatrixBase):
    """One test per (Go toolchain, HTTP/2 stack); generated below."""

    def run_cell(self, go, stack):
        t0 = time.monotonic()
        c = self.start_cluster(apiserver_build(go), ["--http2-stack", stack])
        operator_token = c.mint_token(OPERATOR_NS, OPERATOR_SA, pod="datajob-operator-6f7c9d5b8-xk2lp")
        human = c.kubeconfig(c.mint_token("default", "ops-engineer"))

        agent = self.start_agent()
        agent.wait_attached(1)
        info = self.target_info()
        self.assertEqual(len(info), 1, info)
        self.assertEqual(info[0]["status"], "attached", info)
        self.assertEqual(info[0]["stack"], "x/net,std", info)
        self.assertTrue(info[0]["go_version"].startswith("go%s." % go), info)
        self.assertEqual((info[0]["xnet_version"], info[0]["grpc_version"]), ("", ""), "a GOPATH build: no module versions")
        self.assertEqual(info[0]["pid"], str(c.apiserver_pid))
        time.sleep(0.3)  # nothing in flight: the baseline is exact
        before = count_map(c.server_counts())
        hits_before = {p: agent.metric_value("stormwatch_probe_hits_total", probe=p)
                       for p in ("http2_process_headers", "http2_handler_done")}

        # A person with kubectl (creates, reads, lists, annotates, a 404) ...
        commands = [
            ("create", "namespace", WORK_NS),
            ("create", "-f", "-", DATAJOB % "nightly-etl"),
            ("create", "-f", "-", DATAJOB % "weekly-report"),
            ("get", "datajobs", "-n", WORK_NS),
            ("get", "datajob", "weekly-report", "-n", WORK_NS, "-o", "json"),
            ("annotate", "--overwrite", "datajob", "weekly-report", "-n", WORK_NS, "owner=data-team"),
            ("get", "pods", "-A"),
            ("get", "datajob", "no-such-job", "-n", WORK_NS),
        ]
        for cmd in commands:
            stdin = None
            if cmd[0] == "create" and cmd[1] == "-f":
                cmd, stdin = cmd[:3], cmd[3]
            r = c.kubectl(*cmd, kubeconfig=human, input=stdin)
            if cmd[-1] != WORK_NS or cmd[1] != "datajob":
                self.assertEqual(r.returncode, 0, "%s: %s" % (cmd, r.stderr))
        # ... and the runaway operator for ~3 s (two workers: concurrent streams on one connection).
        operator = c.run_operator(operator_token, ["nightly-etl", "hourly-sync"], duration=3,
                                  namespace=WORK_NS, extra_args=["--workers", "2"])
        operator.communicate(timeout=30)
        self.assertEqual(operator.returncode, 0, c.log("operator-%d.log" % (len(c.procs) - 1)))

        server = delta(count_map(c.server_counts()), before)
        self.assertEqual({k[0] for k in server}, {"HTTP/2.0"}, "all test traffic is HTTP/2")
        self.assertEqual(c.server_writers().get("HTTP/2.0"), STACKS[stack],
                         "the %s stack did not serve HTTP/2" % stack)
        expected = {k[1:]: v for k, v in server.items()}
        deadline = time.monotonic() + 10
        while agent.request_counts() != expected and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(agent.request_counts(), expected)
        total = sum(expected.values())
        puts = sum(v for k, v in expected.items() if k[0] == OPERATOR and k[1] == "PUT")
        self.assertGreater(puts, 50)
        lost = {l["cause"]: v for n, l, v in agent.metrics()
                if n == "stormwatch_capture_lost_total" and v}
        self.assertEqual(lost, {}, "capture losses reported")
        # Every request carried its connection's ends, read in BPF at this Go release and stack.
        server_port = urllib.parse.urlsplit(c.base_url).port
        want = {}
        for key, n in expected.items():
            want[key[0]] = want.get(key[0], 0) + n
        want = {client: (n, [("127.0.0.1", n, "127.0.0.1:%d" % server_port)]) for client, n in want.items()}
        deadline = time.monotonic() + 3
        while True:
            clients = json.loads(agent.health("/debug/clients")[1])
            ends = {e["client"]: (e["requests"], [(p["ip"], p["requests"], p["last_local"]) for p in e["peers"]])
                    for e in clients if e["client"] in want}
            if ends == want or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(ends, want)
        # Two probe hits per request, one each: no double fire, no other stack firing.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            hits = {p: agent.metric_value("stormwatch_probe_hits_total", probe=p) - hits_before[p]
                    for p in hits_before}
            if all(v == total for v in hits.values()):
                break
            time.sleep(0.2)
        self.assertEqual(hits, {p: total for p in hits_before})
        print("\ngo%s %s: attached (%s), exact match over %d series, %d requests (%d operator PUTs), "
              "writer %s, %.1f s" % (go, stack, info[0]["go_version"], len(expected), total, puts,
                                     STACKS[stack], time.monotonic() - t0), file=sys.stderr)


def _make_cell(go, stack):
    def test(self):
        self.run_cell(go, stack)
    test.__doc__ = "Go %s, %s HTTP/2 stack: attached, exact counts" % (go, stack)
    return test


for _go in GO_MATRIX:
    for _stack in STACKS:
        setattr(CaptureMatrix, "test_go%s_%s" % (_go.replace(".", "_"), _stack), _make_cell(_go, _stack))


class UnprovenVersionRefused(CaptureMatrixBase):
    def test_unproven_go_version_is_refused(self):
        src = apiserver_build("1.21")
        self.assertTrue(os.path.exists(src), src)
        tmp = tempfile.mkdtemp(prefix="stormwatch-unproven-")
        self.addCleanup(shutil.rmtree, tmp, True)
        patched = os.path.join(tmp, "kube-apiserver")
        real_version = None
        with open(src, "rb") as f:
            blob = f.read()
        for v in (b"go1.21.%d" % i for i in range(10, 100)):  # two-digit patch: same length as go1.18.10
            if v in blob:
                real_version = v.decode()
                break
        self.assertIsNotNone(real_version, "the go1.21 build's version has a one-digit patch?")
        patch_buildinfo_go_version(src, patched, real_version, "go1.18.10")

        c = self.start_cluster(patched)
        agent = self.start_agent()
        deadline = time.monotonic() + 15
        info = []
        while time.monotonic() < deadline and not info:
            try:
                info = self.target_info()
            except OSError:
                pass
            time.sleep(0.1)
        self.assertEqual(len(info), 1, "no target_info series: %s" % agent.stderr())
        self.assertEqual(info[0]["status"], "refused", info)
        self.assertEqual(info[0]["go_version"], "go1.18.10", info)
        self.assertEqual(info[0]["pid"], str(c.apiserver_pid))
        self.assertEqual(info[0]["target"], "kube-apiserver")
        self.assertEqual(agent.metric_value("stormwatch_targets_attached"), 0)
        self.assertEqual(agent.metric_value("stormwatch_target_attach_failures_total",
                                            target="kube-apiserver", reason="unproven_version"), 1)
        # Traffic is not captured: no probe is attached.
        kc = c.kubeconfig(c.mint_token("default", "ops-engineer"))
        self.assertEqual(c.kubectl("get", "pods", kubeconfig=kc).returncode, 0)
        time.sleep(1.2)
        self.assertEqual(agent.metric_value("stormwatch_probe_hits_total"), 0)
        self.assertEqual(agent.request_counts(), {})
        # One log line: which target, which versions, why.
        lines = [l for l in agent.stderr().splitlines() if "not attaching" in l]
        self.assertEqual(len(lines), 1, agent.stderr())
        line = lines[0]
        for needle in ("kube-apiserver", "pid %d" % c.apiserver_pid, "go1.18.10", "not proven",
                       "go1.19, go1.21, go1.22, go1.23"):
            self.assertIn(needle, line)
        print("\nrefused: %s" % line, file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
