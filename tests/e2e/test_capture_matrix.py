"""End to end, as root: the capture matrix.

For each Go toolchain of the matrix (the test API server built, stripped, by Go 1.19, 1.21-1.23
with bookworm's x/net 0.7.0, Go 1.24 with trixie's x/net 0.27, Go 1.26 with forky's 0.61 and Go
1.27 with sid's 0.62: CMake's test-apiserver-go1.NN) and each way of serving HTTP/2
(--http2-stack=xnet: http2.ConfigureServer; std: net/http's own), with real etcd and the real
agent attached by --pid, its layout derived from the binary's type data:
  - the agent attaches (status="attached"), naming the stacks it found: "x/net,std" up to Go 1.26;
    from Go 1.27 x/net >= 0.62 hands ConfigureServer to net/http/internal/http2, so both
    settings are served by that one stack ("std-internal");
  - the server reports the expected ResponseWriter type for HTTP/2 (proof of which stack served);
  - stormwatch_requests_total equals, per client/verb/group/version/resource/subresource/scope/
    code, exactly what the server handled meanwhile (/debug/counts), over HTTP/2 (kubectl, the
    operator on client-go) and HTTP/1.1 (curl on one keep-alive connection), with zero capture
    losses, and each HTTP/2 probe fired exactly once per HTTP/2 request.
Plus the refusal of a binary whose type data lacks a field the probes need (the go1.21 build
with the name `wroteBytes` patched out of its type descriptors): not attached; the agent names
the type and the field in one log line, in target_info{status="refused",missing=...} and in
attach_failures_total{reason="missing_field"}.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import Agent, require_bpf_privileges  # noqa: E402
from counts import count_map, delta  # noqa: E402
from cluster import Cluster, default_go_out  # noqa: E402

GO_MATRIX = [v for v in os.environ.get("STORMWATCH_GO_VERSIONS", "1.19,1.21,1.22,1.23,1.24,1.26,1.27").split(",") if v]
STACKS = ["xnet", "std"]  # --http2-stack values


def go_minor(go):
    return int(go.split(".")[1])


def expected_writer(go, stack):
    """The Go type of the HTTP/2 ResponseWriter the handler gets."""
    if go_minor(go) >= 27:
        return "http.http2ResponseWriter"  # net/http's wrapper of net/http/internal/http2's
    return "*http2.responseWriter" if stack == "xnet" else "*http.http2responseWriter"


def expected_stacks(go):
    return "std-internal" if go_minor(go) >= 27 else "x/net,std"


def curl(cluster, token_file, paths, proto="--http1.1", headers=()):
    """Requests with curl, all on one connection (keep-alive, or HTTP/2 streams)."""
    with open(token_file) as f:
        token = f.read().strip()
    argv = ["curl", "-sS", proto, "--cacert", cluster.ca_file,
            "-w", "%{http_code}\\n", "-H", "Authorization: Bearer " + token]
    for h in headers:
        argv += ["-H", h]
    for p in paths:
        argv += [cluster.base_url + p, "-o", "/dev/null"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError("curl: %s" % r.stderr)
    return r.stdout.split()
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
        self.assertEqual(info[0]["stack"], expected_stacks(go), info)
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
        # HTTP/1.1: net/http's own server, probed at (*connReader).Read and the writer.
        codes = curl(c, operator_token, ["/api/v1/namespaces", "/api/v1/namespaces/%s/configmaps" % WORK_NS,
                                               "/apis/batch.company.com/v1/namespaces/%s/datajobs" % WORK_NS,
                                               "/api/v1/namespaces/%s/configmaps/missing" % WORK_NS] * 3)
        self.assertEqual(codes, ["200", "200", "200", "404"] * 3)
        # HTTP/2 responses whose header maps outgrow one group or bucket (8 entries): 12 and 40
        # more headers, so the BPF map walk follows Swiss tables' groups or buckets' chains.
        for extra in (12, 40):
            codes = curl(c, operator_token, ["/api/v1/namespaces/%s/configmaps" % WORK_NS] * 3, proto="--http2",
                         headers=["X-Stormwatch-Test-Response-Headers: %d" % extra])
            self.assertEqual(codes, ["200"] * 3)

        server = delta(count_map(c.server_counts()), before)
        self.assertEqual({k[0] for k in server}, {"HTTP/2.0", "HTTP/1.1"})
        self.assertEqual(sum(v for k, v in server.items() if k[0] == "HTTP/1.1"), 12)
        self.assertEqual(c.server_writers().get("HTTP/2.0"), expected_writer(go, stack),
                         "the %s stack did not serve HTTP/2" % stack)
        expected = {}
        for k, v in server.items():
            expected[k[1:]] = expected.get(k[1:], 0) + v
        h2_total = sum(v for k, v in server.items() if k[0] == "HTTP/2.0")
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
        # Every response carried its APF UIDs in the handler's header map (the test server sets
        # them on every authenticated request): all found, whatever the map's size and kind.
        self.assertEqual(agent.metric_value("stormwatch_apf_requests_total"), total)
        # Every request carried its connection's ends, read in BPF at this Go release and stack.
        server_port = urllib.parse.urlsplit(c.base_url).port
        want = {}
        for key, n in expected.items():
            want[key[0]] = want.get(key[0], 0) + n
        want = {client: (n, [("127.0.0.1", n, "127.0.0.1:%d" % server_port)]) for client, n in want.items()}
        deadline = time.monotonic() + 3
        while True:
            clients = json.loads(agent.debug("/debug/clients")[1])
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
            if all(v == h2_total for v in hits.values()):
                break
            time.sleep(0.2)
        self.assertEqual(hits, {p: h2_total for p in hits_before})
        print("\ngo%s %s: attached (%s), exact match over %d series, %d requests (%d operator PUTs), "
              "writer %s, %.1f s" % (go, stack, info[0]["go_version"], len(expected), total, puts,
                                     expected_writer(go, stack), time.monotonic() - t0), file=sys.stderr)


def _make_cell(go, stack):
    def test(self):
        self.run_cell(go, stack)
    test.__doc__ = "Go %s, %s HTTP/2 stack: attached, exact counts" % (go, stack)
    return test


for _go in GO_MATRIX:
    for _stack in STACKS:
        setattr(CaptureMatrix, "test_go%s_%s" % (_go.replace(".", "_"), _stack), _make_cell(_go, _stack))


class MissingFieldRefused(CaptureMatrixBase):
    def test_binary_without_a_needed_field_is_refused(self):
        """The type data is the layout's only source: a binary whose responseWriterState has no
        field named wroteBytes (its name patched to wroteBytez in the descriptors' name data, as
        a future Go or x/net could rename it) is refused, and the refusal names type and field."""
        src = apiserver_build("1.21")
        self.assertTrue(os.path.exists(src), src)
        tmp = tempfile.mkdtemp(prefix="stormwatch-missing-field-")
        self.addCleanup(shutil.rmtree, tmp, True)
        patched = os.path.join(tmp, "kube-apiserver")
        with open(src, "rb") as f:
            blob = bytearray(f.read())
        # internal/abi.Name: flag byte (0: unexported, no tag), varint length 10, the bytes.
        name = b"\x00\x0awroteBytes"
        self.assertEqual(blob.count(name), 1, "the field name is not stored once")
        at = blob.index(name)
        blob[at:at + len(name)] = b"\x00\x0awroteBytez"
        with open(patched, "wb") as f:
            f.write(blob)
        os.chmod(patched, 0o755)

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
        self.assertEqual(info[0]["reason"], "missing_field", info)
        self.assertEqual(info[0]["missing"], "golang.org/x/net/http2.responseWriterState.wroteBytes", info)
        self.assertTrue(info[0]["go_version"].startswith("go1.21."), info)
        self.assertEqual(info[0]["pid"], str(c.apiserver_pid))
        self.assertEqual(agent.metric_value("stormwatch_targets_attached"), 0)
        self.assertEqual(agent.metric_value("stormwatch_target_attach_failures_total",
                                            target="kube-apiserver", reason="missing_field"), 1)
        # Not ready, saying why: a rollout onto a control plane it cannot capture stops.
        status, body = agent.health("/readyz")
        self.assertEqual(status, 503, body)
        self.assertIn("kube-apiserver pid %d not attached (missing_field)" % c.apiserver_pid, body)
        self.assertIn("responseWriterState has no field wroteBytes", body)
        # Traffic is not captured: no probe is attached.
        kc = c.kubeconfig(c.mint_token("default", "ops-engineer"))
        self.assertEqual(c.kubectl("get", "pods", kubeconfig=kc).returncode, 0)
        time.sleep(1.2)
        self.assertEqual(agent.metric_value("stormwatch_probe_hits_total"), 0)
        self.assertEqual(agent.request_counts(), {})
        # One log line: which target, which type and field.
        lines = [l for l in agent.stderr().splitlines() if "not attaching" in l]
        self.assertEqual(len(lines), 1, agent.stderr())
        line = lines[0]
        for needle in ("kube-apiserver", "pid %d" % c.apiserver_pid,
                       "golang.org/x/net/http2.responseWriterState has no field wroteBytes"):
            self.assertIn(needle, line)
        print("\nrefused: %s" % line, file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
