#!/usr/bin/python3
"""Overhead of the stormwatch agent on an HTTP/2 API server: throughput, latency, agent CPU and BPF time per request.

    sudo STORMWATCH_BUILD_DIR=build STORMWATCH_GO_OUT=build/go \\
        /usr/bin/python3 scripts/bench_overhead.py [--server apiext|test] [--quick]

One throw-away cluster (a real etcd and an API server, tests/e2e/cluster.py) is driven by h2load
over HTTP/2 with the cheapest common request, a GET of one object with a bearer token:

  apiext  (default) the real upstream API server, k8s.io/apiextensions-apiserver 0.36
          (Kubernetes 1.36's k8s.io/apiserver: its filter chain, delegated authentication and
          authorization with their caches, APF, apiserver_request_total; stripped, Go 1.26),
          on etcd 3.5: GET of one custom object of a CRD, as a service account;
  test    the project's own Go test API server (--go 1.NN picks a toolchain's build): GET of one
          configmap.

Rounds WITHOUT (A) and WITH (B) the agent attached (--pid of the server) alternate in the same
run, A B A B A B, so slow drift of the machine (page cache, etcd compaction, noisy neighbours)
hits both sides alike. Two modes:

  saturation  enough clients x streams to keep the server busy: throughput, p50 and p99;
  fixed       15,000 req/s offered if the server sustains that without the agent, else the
              highest rate among a few tried below its saturation throughput.

Per mode it prints throughput, p50 and p99 without/with the agent and their ratios, server CPU per
request without/with, the agent's own CPU per request, BPF time per request and per program run
(the kernel's own accounting, kernel.bpf_stats_enabled=1, bpftool's run_time_ns/run_cnt), probe
hits per HTTP/2 request, capture losses by cause, and the requests the agent did not count (the
server's own count -- apiserver_request_total from its /metrics, or the test server's
/debug/counts -- minus the stormwatch_requests_total delta). It is a measurement, not a test: it
exits 0 when targets are missed and non-zero only on errors. --json FILE also writes the figures.

Needs root (uprobes). Python 3 standard library only.
"""

import argparse
import datetime
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from cluster import Cluster, default_go_out  # noqa: E402
from agent import Agent, AGENT_BINARY, BUILD_DIR, parse_metrics  # noqa: E402

H2LOAD = "/usr/bin/h2load"
BPFTOOL = "/usr/sbin/bpftool"
BPF_STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
CLK_TCK = os.sysconf("SC_CLK_TCK")
FIXED_TARGET_RPS = 15000
DEBIAN_DIR = os.environ.get("STORMWATCH_DEBIAN_DIR", os.path.join(BUILD_DIR, "debian"))
# The etcd the real API server runs on in the e2e tests (test_real_apiserver.py): 3.5 from forky.
ETCD_3_5 = os.path.join(DEBIAN_DIR, "forky/root/usr/bin/etcd")

# Targets of the overhead benchmark (docs/benchmark.md).
MIN_SAT_RATIO = 0.97       # throughput with/without at saturation
MAX_P99_INCREASE = 0.10    # p99 increase (both modes)

# Saturation load: 16 connections x 16 streams = 256 requests in flight, well past what 2 cores
# serve, without so many connections that h2load itself (one thread) becomes the bottleneck.
SAT_CLIENTS, SAT_STREAMS = 16, 16
# Fixed load: h2load's --rps is per connection, so the offered rate is clients x rps.
FIXED_CLIENTS, FIXED_STREAMS = 30, 16
# Fixed rates tried below saturation, as fractions of the agent-less saturation throughput.
FIXED_FRACTIONS = (0.6, 0.5, 0.4)
# APF would otherwise queue and reject at 256+ requests in flight: that measures APF, not us.
# (APF still runs: every request is classified and holds a seat of its priority level.)
APF_ARGS = ["--max-requests-inflight", "20000", "--max-mutating-requests-inflight", "10000"]
H2_PROBES = ("http2_process_headers", "http2_handler_done")
# Process names of the bench's server and etcd: not kube-apiserver / etcd, which agents started
# without --pid (another engineer's test, a node's own agent) look for and would attach to,
# taxing both sides of the comparison. Ours attaches by --pid.
NAMES = {"apiserver_name": "sw-bench-apiserver", "etcd_name": "sw-bench-etcd"}

# The real server's object: a namespaced custom resource (as in tests/e2e/test_real_apiserver.py).
GROUP, VERSION, RESOURCE, NS, NAME = "bench.stormwatch.test", "v1", "widgets", "bench", "w1"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{RESOURCE}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"plural": RESOURCE, "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
             "versions": [{"name": VERSION, "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}
OBJECT = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": NAME, "namespace": NS},
          "spec": {"size": 3, "image": "widget:1.0"}}


def cpu_times(pid):
    """(utime, stime) of a whole process (all threads), in seconds. Uprobe traps and the BPF
    programs run in the traced thread's context, so they show up in the *server's* stime."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name may contain spaces: fields start after the last ')'.
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK  # fields 14 and 15 of stat(5)


def cpu_seconds(pid):
    return sum(cpu_times(pid))


def bpf_prog_stats():
    """{prog id: {name, ns, cnt}} of every loaded BPF program (bpftool; the kernel only
    accumulates run_time_ns/run_cnt while kernel.bpf_stats_enabled is 1)."""
    out = subprocess.run([BPFTOOL, "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {p["id"]: {"name": p.get("name", "?"), "ns": p.get("run_time_ns", 0), "cnt": p.get("run_cnt", 0)}
            for p in json.loads(out)}


def bpf_uprobes():
    """Every BPF program attached to a uprobe, from `bpftool perf`: [(holder pid, prog id, file)]."""
    out = subprocess.run([BPFTOOL, "-j", "perf"], capture_output=True, text=True, check=True).stdout
    return [(e.get("pid"), e.get("prog_id"), e.get("filename", "")) for e in json.loads(out or "[]")
            if e.get("fd_type") in ("uprobe", "uretprobe")]


def bpf_links(pid):
    """{link id: prog id} of the BPF links process `pid` holds (its fds' fdinfo)."""
    links = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return links
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue
        if "link_id" in info and "prog_id" in info:
            links[int(info["link_id"])] = int(info["prog_id"])
    return links


def uprobe_multi_links():
    """Every uprobe_multi link (Linux 6.6+: one per program and target): [(link id, target pid, uprobes)]."""
    out = subprocess.run([BPFTOOL, "-j", "link", "show"], capture_output=True, text=True, check=True).stdout
    return [(l["id"], l.get("pid"), l.get("func_cnt", 0)) for l in json.loads(out or "[]")
            if l.get("type") == "uprobe_multi"]


def agent_programs(agent_pid):
    """The programs the agent attached: through perf events (one per uprobe, kernels before 6.6)
    or through its uprobe_multi links (6.6+)."""
    return ({prog for holder, prog, _ in bpf_uprobes() if holder == agent_pid} |
            set(bpf_links(agent_pid).values()))


def foreign_probes(server_pid, agent_pid=None):
    """Uprobes on the server held by another process than our agent (another engineer's agent
    attaching by name, a tracer): they would be charged to both sides of the comparison."""
    paths = {f"/proc/{server_pid}/exe", os.path.realpath(f"/proc/{server_pid}/exe")}
    mine = set(bpf_links(agent_pid)) if agent_pid else set()
    return (sum(1 for pid, _, f in bpf_uprobes() if f in paths and pid != agent_pid) +
            sum(n for link, pid, n in uprobe_multi_links() if pid == server_pid and link not in mine))


def machine_load():
    """'load 1.23 0.98 0.80, 2 CPUs': the machine's load averages (1, 5, 15 min)."""
    return "load average %.2f %.2f %.2f, %d CPUs" % (*os.getloadavg(), os.cpu_count())


def percentiles_ms(log_file, qs=(0.5, 0.99)):
    """Percentiles of per-request latency from h2load's --log-file (start us, status, duration us)."""
    durs = []
    with open(log_file) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3:
                durs.append(int(parts[2]))
    if not durs:
        return [float("nan")] * len(qs)
    durs.sort()
    return [durs[min(len(durs) - 1, int(q * len(durs)))] / 1000.0 for q in qs]


def parse_h2load(out):
    """The figures we need from h2load's summary."""
    res = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("finished in"):
            # "finished in 10.00s, 1234.50 req/s, 1.2MB/s"
            parts = line.split(",")
            res["secs"] = float(parts[0].split()[-1].rstrip("s"))
        elif line.startswith("requests:"):
            # "requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout"
            for item in line[len("requests:"):].split(","):
                n, what = item.split()
                res[what] = int(n)
        elif line.startswith("status codes:"):
            for item in line[len("status codes:"):].split(","):
                n, what = item.split()
                res["s" + what] = int(n)
    if "done" not in res or "secs" not in res:
        raise RuntimeError("cannot parse h2load output:\n" + out)
    return res


def delta(after, before):
    keys = set(after) | set(before)
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys if after.get(k, 0) != before.get(k, 0)}


# ---- the servers under test ----

class Server:
    """One throw-away cluster (tests/e2e/cluster.py) in self.c, started by the subclass."""

    def stop(self):
        if self.c:
            self.c.stop()

    def pid(self):
        return self.c.apiserver_pid


class TestServer(Server):
    """The project's test API server (tests/apiserver): GET of one configmap. Its request count is
    its /debug/counts (a listener it does not count), compared as a total with the agent's."""

    def __init__(self, args):
        self.go = args.go
        self.c = None

    def start(self):
        binary = os.path.join(default_go_out(), "test-apiserver-go" + self.go) if self.go else None
        self.label = os.path.basename(binary or "test-apiserver") + " (tests/apiserver)"
        self.c = Cluster(apiserver_bin=binary, apiserver_args=APF_ARGS, **NAMES).start()
        token_file = self.c.mint_token("default", "bench-client")
        with open(token_file) as f:
            self.token = f.read().strip()
        r = self.c.kubectl("create", "configmap", "bench", "--from-literal=k=v", kubeconfig=self.c.admin_kubeconfig)
        if r.returncode != 0:
            raise RuntimeError("kubectl create configmap failed: " + r.stderr)
        self.url = self.c.base_url + "/api/v1/namespaces/default/configmaps/bench"
        self.request = "GET /api/v1/namespaces/default/configmaps/bench (bearer token, service account)"

    def counts(self):
        return {"all": sum(row["count"] for row in self.c.server_counts())}

    @staticmethod
    def agent_counts(metrics):
        return {"all": sum(v for n, _, v in metrics if n == "stormwatch_requests_total")}


class ApiextServer(Server):
    """The real upstream API server (k8s.io/apiextensions-apiserver 0.36) on etcd 3.5: GET of one
    custom object. Its request count is its own apiserver_request_total (resource requests, per
    verb, group, version, resource, subresource, scope and code), read from its /metrics with the
    admin certificate (over HTTP/1.1: the agent's HTTP/2 figures leave those reads out)."""

    KEY = ("verb", "group", "version", "resource", "subresource", "scope", "code")

    def __init__(self, args):
        self.audit = args.audit
        self.c = None

    def start(self):
        binary = os.path.join(default_go_out(), "apiextensions-apiserver")
        for path in (binary, ETCD_3_5):
            if not os.path.exists(path):
                raise RuntimeError(f"missing {path} (the build makes it; set STORMWATCH_GO_OUT / STORMWATCH_DEBIAN_DIR)")
        self.label = "apiextensions-apiserver 0.36 (Kubernetes 1.36 k8s.io/apiserver), etcd 3.5" + \
            (", Metadata audit log" if self.audit else ", no audit log")
        self.c = Cluster(server="apiextensions", etcd_bin=ETCD_3_5, audit=self.audit, apiserver_args=APF_ARGS,
                         **NAMES).start()
        crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        self.api("POST", crd_path, CRD)
        deadline = time.monotonic() + 30
        while True:
            crd = self.api("GET", crd_path + "/" + CRD["metadata"]["name"])
            if any(c["type"] == "Established" and c["status"] == "True"
                   for c in crd.get("status", {}).get("conditions", [])):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the CRD never became Established")
            time.sleep(0.2)
        collection = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{RESOURCE}"
        deadline = time.monotonic() + 30
        while True:  # the CRD's handler may 404 for a moment after Established
            try:
                self.api("POST", collection, OBJECT)
                break
            except urllib.error.HTTPError as e:
                if e.code != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        token_file = self.c.mint_token("bench", "widget-reader")
        with open(token_file) as f:
            self.token = f.read().strip()
        self.url = self.c.base_url + collection + "/" + NAME
        self.request = f"GET {collection}/{NAME} (bearer token of a service account: delegated TokenReview and " \
                       "SubjectAccessReview, cached 10 s by the server; APF catch-all level)"

    def api(self, method, path, body=None):
        """A request as the admin (client certificate, system:masters); JSON in and out."""
        ctx = ssl.create_default_context(cafile=self.c.ca_file)
        ctx.load_cert_chain(self.c.admin_cert, self.c.admin_key)
        req = urllib.request.Request(self.c.base_url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return json.load(r)

    def counts(self):
        out = {}
        for name, l, v in parse_metrics(self.c.apiserver_metrics()):
            if name == "apiserver_request_total" and l.get("resource") and v:
                k = tuple(l.get(x, "") for x in self.KEY)
                out[k] = out.get(k, 0) + int(v)
        return out

    @classmethod
    def agent_counts(cls, metrics):
        out = {}
        for name, l, v in metrics:
            if name == "stormwatch_requests_total" and l.get("resource") and v:
                k = tuple(l.get(x, "") for x in cls.KEY)
                out[k] = out.get(k, 0) + int(v)
        return out


# ---- the measurement ----

class Bench:
    def __init__(self, server, workdir, secs, bpf_stats):
        self.srv = server
        self.bpf_stats = bpf_stats
        self.workdir = workdir
        self.secs = secs
        self.n = 0
        self.target_info = None

    def h2load(self, clients, streams, secs=None, rps=None, requests=None):
        """h2load for secs seconds (-D), or for a number of requests (-n): then every request
        completes, where -D closes its connections with requests still in flight (the server
        finishes them for a client that is gone: that measures client cancellation, not load)."""
        self.n += 1
        log = os.path.join(self.workdir, f"h2load-{self.n}.log")
        # One h2load thread: on 2 cores, more threads only steal CPU from the server and etcd.
        argv = [H2LOAD, "-t", "1", "-c", str(clients), "-m", str(streams),
                "-H", "authorization: Bearer " + self.srv.token, "--log-file", log, self.srv.url]
        argv[1:1] = ["-n", str(requests)] if requests else ["-D", str(secs)]
        if rps:
            argv[1:1] = ["--rps", str(rps)]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=(secs or self.secs) * 5 + 60)
        if p.returncode != 0:
            raise RuntimeError(f"h2load failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        res = parse_h2load(p.stdout)
        res["p50_ms"], res["p99_ms"] = percentiles_ms(log)
        res["rate"] = res["done"] / res["secs"]
        os.unlink(log)  # per-request logs are large; we keep only the percentiles
        return res

    @staticmethod
    def agent_counters(metrics):
        """Cumulative probe hits per probe and capture losses per cause."""
        hits, lost = {}, {}
        for name, labels, v in metrics:
            if name == "stormwatch_probe_hits_total":
                hits[labels.get("probe", "?")] = hits.get(labels.get("probe", "?"), 0) + v
            elif name == "stormwatch_capture_lost_total":
                lost[labels.get("cause", "?")] = lost.get(labels.get("cause", "?"), 0) + v
        return hits, lost

    def round(self, with_agent, clients, streams, requests, rps=None):
        agent = Agent(self.workdir, extra_args=["--pid", str(self.srv.pid())]) if with_agent else None
        try:
            return self._round(agent, clients, streams, requests, rps)
        finally:
            if agent and agent.proc and agent.proc.poll() is None:
                agent.stop()  # after an error: never leave an agent attached behind us

    def _round(self, agent, clients, streams, requests, rps):
        """One measured window. CPU is read right around h2load plus a short settle (both sides
        alike), so the agent's start-up (symbol lookup, attach) is not charged to the requests,
        while the requests in flight at the end, and the agent draining its ring buffer, are.
        The server's and the agent's counts are read outside the CPU window."""
        pid = self.srv.pid()
        foreign = foreign_probes(pid)
        if agent:
            agent.start()
            agent.wait_attached(timeout=60)
            time.sleep(1.0)  # let attach-time work finish before the window opens
            m0 = agent.metrics()
            if self.target_info is None:
                self.target_info = next((l for n, l, v in m0 if n == "stormwatch_target_info" and v == 1), {})
            # The agent's programs: those its process attached, not any other's.
            mine = agent_programs(agent.proc.pid)
            foreign = foreign_probes(pid, agent.proc.pid)
            if self.bpf_stats:
                p0 = bpf_prog_stats()
            a0 = cpu_times(agent.proc.pid)
        n0 = self.srv.counts()
        s0 = cpu_times(pid)
        res = self.h2load(clients, streams, self.secs, rps, requests=requests)
        time.sleep(1.5)  # in-flight requests finish; the agent catches up with its ring buffer
        s1 = cpu_times(pid)
        foreign = max(foreign, foreign_probes(pid, agent.proc.pid if agent else None))
        res["server_cpu"], res["server_sys"] = sum(s1) - sum(s0), s1[1] - s0[1]
        if agent:
            a1 = cpu_times(agent.proc.pid)
            res["agent_user"], res["agent_sys"] = a1[0] - a0[0], a1[1] - a0[1]
            if self.bpf_stats:
                p1 = bpf_prog_stats()
                # Time inside the BPF programs only; the rest of a hit's cost is the uprobe trap
                # and the uprobe bookkeeping around it.
                res["progs"] = {}
                for i in mine:
                    if i in p1 and i in p0:
                        cnt, ns = p1[i]["cnt"] - p0[i]["cnt"], p1[i]["ns"] - p0[i]["ns"]
                        name = p1[i]["name"]
                        c, t = res["progs"].get(name, (0, 0))
                        res["progs"][name] = (c + cnt, t + ns)
        theirs = delta(self.srv.counts(), n0)
        res["handled"] = sum(theirs.values())
        if agent:
            h0, l0 = self.agent_counters(m0)
            ours0 = self.srv.agent_counts(m0)
            for attempt in range(8):  # the agent's and the server's counts, once they agree or stand still
                m1 = agent.metrics()
                ours = delta(self.srv.agent_counts(m1), ours0)
                if ours == theirs or attempt == 7:
                    break
                time.sleep(0.5)
                theirs = delta(self.srv.counts(), n0)
                res["handled"] = sum(theirs.values())
            h1, l1 = self.agent_counters(m1)
            res["hits"] = {k: v - h0.get(k, 0) for k, v in h1.items() if v - h0.get(k, 0)}
            res["counted"] = sum(ours.values())
            differing = {k: (theirs.get(k, 0), ours.get(k, 0)) for k in set(ours) | set(theirs)
                         if ours.get(k, 0) != theirs.get(k, 0)}
            res["series_differing"] = len(differing)
            for k, (t, o) in sorted(differing.items())[:8]:
                print(f"      series {'/'.join(map(str, k)) if isinstance(k, tuple) else k}: "
                      f"server {t}, agent {o}", flush=True)
            res["lost"] = {k: v - l0.get(k, 0) for k, v in l1.items() if v - l0.get(k, 0)}
            rc = agent.stop()
            if rc not in (0, None):
                raise RuntimeError(f"agent exited with {rc}:\n{agent.stderr()[-3000:]}")
        tag = "B (agent)" if agent else "A (no agent)"
        extra = ""
        if agent:
            h2 = sum(res["hits"].get(p, 0) for p in H2_PROBES)
            extra = (f", hits/req {h2 / max(1, res['handled']):.3f}, agent counted "
                     f"{int(res['counted'])} of {res['handled']} the server counted, agent CPU "
                     f"{(res['agent_user'] + res['agent_sys']) / max(1, res['handled']) * 1e6:.1f} us/req")
        non2xx = res.get("s3xx", 0) + res.get("s4xx", 0) + res.get("s5xx", 0)
        res["non2xx"] = non2xx
        res["foreign_probes"] = foreign
        if foreign:
            extra += f", WARNING: {foreign} uprobes of another process on the server"
        print(f"    {tag:13s} {res['rate']:8.0f} req/s  p50 {res['p50_ms']:7.2f} ms  p99 {res['p99_ms']:7.2f} ms  "
              f"server {res['server_cpu'] / max(1, res['handled']) * 1e6:5.0f} us/req  "
              f"non-2xx {non2xx}  failed {res.get('failed', 0)}{extra}", flush=True)
        return res

    def alternate(self, rounds, clients, streams, requests, rps=None):
        a, b = [], []
        for _ in range(rounds):
            a.append(self.round(False, clients, streams, requests, rps))
            b.append(self.round(True, clients, streams, requests, rps))
        return a, b


def summarize(mode, a, b, offered=None):
    """Aggregates A and B rounds. Throughput and latency: medians of the rounds, and ratios as the
    median of the pairs' B/A (robust to one noisy pair); CPU, BPF time and hits per request: totals
    over all rounds (ratios of sums)."""
    req_a = sum(r["handled"] for r in a)
    req_b = sum(r["handled"] for r in b)
    hits = {}
    for r in b:
        for k, v in r["hits"].items():
            hits[k] = hits.get(k, 0) + v
    h2_hits = sum(hits.get(p, 0) for p in H2_PROBES)
    hits_per_req = h2_hits / req_b if req_b else float("nan")
    srv_a = sum(r["server_cpu"] for r in a) / req_a  # server CPU s per request
    srv_b = sum(r["server_cpu"] for r in b) / req_b
    sys_a = sum(r["server_sys"] for r in a) / req_a  # of which in the kernel (uprobe traps, BPF, syscalls)
    sys_b = sum(r["server_sys"] for r in b) / req_b
    lost = {}
    for r in b:
        for k, v in r["lost"].items():
            lost[k] = lost.get(k, 0) + v
    progs = {}
    for r in b:
        for name, (cnt, ns) in r.get("progs", {}).items():
            c0, n0 = progs.get(name, (0, 0))
            progs[name] = (c0 + cnt, n0 + ns)
    s = {
        "mode": mode, "offered": offered, "rounds": len(a),
        "requests_a": req_a, "requests_b": req_b,
        "tput_a": statistics.median(r["rate"] for r in a),
        "tput_b": statistics.median(r["rate"] for r in b),
        "pair_ratios": [rb["rate"] / ra["rate"] for ra, rb in zip(a, b)],
        "p50_pair_ratios": [rb["p50_ms"] / ra["p50_ms"] for ra, rb in zip(a, b)],
        "p99_pair_ratios": [rb["p99_ms"] / ra["p99_ms"] for ra, rb in zip(a, b)],
        "p50_a": statistics.median(r["p50_ms"] for r in a),
        "p50_b": statistics.median(r["p50_ms"] for r in b),
        "p99_a": statistics.median(r["p99_ms"] for r in a),
        "p99_b": statistics.median(r["p99_ms"] for r in b),
        "agent_us": sum(r["agent_user"] + r["agent_sys"] for r in b) / req_b * 1e6,
        "agent_user_us": sum(r["agent_user"] for r in b) / req_b * 1e6,
        "agent_sys_us": sum(r["agent_sys"] for r in b) / req_b * 1e6,
        "hits_per_req": hits_per_req,
        "hits": hits,
        "srv_us_a": srv_a * 1e6, "srv_us_b": srv_b * 1e6,
        "srv_sys_us_a": sys_a * 1e6, "srv_sys_us_b": sys_b * 1e6,
        # Extra server CPU per request with the agent, attributed to its probe hits.
        "per_hit_us": (srv_b - srv_a) / hits_per_req * 1e6 if hits_per_req else float("nan"),
        "lost": lost,
        # Requests the server counted that the agent did not (negative would mean the agent
        # over-counted: reported as is, it is as much a bug as a drop).
        "missed": int(sum(r["handled"] - r["counted"] for r in b)),
        "series_differing": sum(r.get("series_differing", 0) for r in b),
        "failed_a": sum(r.get("failed", 0) + r.get("errored", 0) for r in a),
        "failed_b": sum(r.get("failed", 0) + r.get("errored", 0) for r in b),
        "non2xx": sum(r["non2xx"] for r in a + b),
        "foreign_probes": max(r["foreign_probes"] for r in a + b),
        "per_round": [{"side": side, "rate": r["rate"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
                       "server_us": r["server_cpu"] / r["handled"] * 1e6 if r["handled"] else None,
                       "requests": r["handled"]} for ra, rb in zip(a, b) for side, r in (("A", ra), ("B", rb))],
        # {program: [runs per request, ns per run]}, from the kernel's run_cnt / run_time_ns.
        "bpf": {name: [cnt / req_b, ns / cnt if cnt else 0.0] for name, (cnt, ns) in progs.items()},
        "bpf_us_per_req": sum(ns for _, ns in progs.values()) / req_b / 1000 if progs else None,
    }
    # The ratios: medians of the pairs' B/A (a pair's two rounds run back to back, under the
    # same conditions; on a shared machine capacity moves by 20-40% from one pair to the next).
    s["tput_ratio"] = statistics.median(s["pair_ratios"])
    s["p50_ratio"] = statistics.median(s["p50_pair_ratios"])
    s["p99_ratio"] = statistics.median(s["p99_pair_ratios"])
    return s


def print_table(rows):
    """One column per mode, one line per figure (markdown)."""
    def mode_name(s):
        return s["mode"] + (f" @ {s['offered']} req/s" if s["offered"] else "")

    lines = [
        ("throughput, req/s without / with", lambda s: f"{s['tput_a']:.0f} / {s['tput_b']:.0f}"),
        ("**throughput ratio** with / without (each pair)", lambda s: f"**{s['tput_ratio']:.3f}** ("
         + ", ".join(f"{x:.3f}" for x in s["pair_ratios"]) + ")"),
        ("p50 ms without / with", lambda s: f"{s['p50_a']:.2f} / {s['p50_b']:.2f}"),
        ("**p50 ratio** (each pair)", lambda s: f"**{s['p50_ratio']:.3f}** ("
         + ", ".join(f"{x:.2f}" for x in s["p50_pair_ratios"]) + ")"),
        ("p99 ms without / with", lambda s: f"{s['p99_a']:.2f} / {s['p99_b']:.2f}"),
        ("**p99 ratio** (each pair)", lambda s: f"**{s['p99_ratio']:.3f}** ("
         + ", ".join(f"{x:.2f}" for x in s["p99_pair_ratios"]) + ")"),
        ("server CPU us/req without / with", lambda s: f"{s['srv_us_a']:.0f} / {s['srv_us_b']:.0f} "
         f"({s['srv_us_b'] - s['srv_us_a']:+.0f})"),
        ("of which system time, without / with", lambda s: f"{s['srv_sys_us_a']:.0f} / {s['srv_sys_us_b']:.0f} "
         f"({s['srv_sys_us_b'] - s['srv_sys_us_a']:+.0f})"),
        ("agent CPU us/req (user + sys)", lambda s: f"{s['agent_us']:.1f} ({s['agent_user_us']:.1f} + {s['agent_sys_us']:.1f})"),
        ("BPF us/req (kernel run_time_ns)", lambda s: "n/a" if s["bpf_us_per_req"] is None else f"{s['bpf_us_per_req']:.2f}"),
        ("BPF us/run, per program", lambda s: ", ".join(f"{n} {v[1] / 1000:.2f}" for n, v in sorted(s["bpf"].items())
                                                       if v[0] >= 0.01) or "n/a"),
        ("probe hits per HTTP/2 request", lambda s: f"{s['hits_per_req']:.3f}"),
        ("per-hit cost in the server, us", lambda s: f"{s['per_hit_us']:.1f}"),
        ("capture losses", lambda s: ", ".join(f"{k}={int(v)}" for k, v in sorted(s["lost"].items()) if v) or "0"),
        ("requests missed (server - agent)", lambda s: f"{s['missed']} of {s['requests_b']}"
         + (f" ({s['series_differing']} series differ)" if s["series_differing"] else "")),
        ("failed A / B, non-2xx", lambda s: f"{s['failed_a']} / {s['failed_b']}, {s['non2xx']}"),
    ]
    print()
    print("| figure | " + " | ".join(mode_name(s) for s in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for what, f in lines:
        print(f"| {what} | " + " | ".join(f(s) for s in rows) + " |")
    print()


def print_details(rows):
    for s in rows:
        for name, (runs, ns) in sorted(s["bpf"].items()):
            if not runs:
                continue
            print(f"  bpf_stats {s['mode']}: {name}: {runs:.3f} runs/req, {ns / 1000:.2f} us/run, "
                  f"{runs * ns / 1000:.2f} us/req inside the program")
        other = {k: int(v) for k, v in s["hits"].items() if k not in H2_PROBES}
        if other:
            print(f"  other probe hits {s['mode']} (http1_close: every connection's close, HTTP/2 ones too; "
                  f"the rest: the bench's own HTTP/1.1 reads of the server's counts): {other}")


def print_verdicts(rows):
    sat = next((s for s in rows if s["mode"] == "saturation"), None)
    verdicts = []
    if sat:
        verdicts.append((f"throughput ratio >= {MIN_SAT_RATIO} at saturation", sat["tput_ratio"] >= MIN_SAT_RATIO,
                         f"{sat['tput_ratio']:.3f}"))
    for s in rows:
        verdicts.append((f"p99 increase <= {MAX_P99_INCREASE:.0%} ({s['mode']})", s["p99_ratio"] - 1 <= MAX_P99_INCREASE,
                         f"{(s['p99_ratio'] - 1) * 100:+.1f}%"))
    for s in rows:
        verdicts.append((f"2 probe hits per HTTP/2 request ({s['mode']})", f"{s['hits_per_req']:.2f}" == "2.00",
                         f"{s['hits_per_req']:.4f}"))
        drops = int(sum(s["lost"].values()))
        verdicts.append((f"every request counted, no capture loss ({s['mode']})",
                         drops == 0 and s["missed"] == 0 and s["series_differing"] == 0,
                         f"{s['missed']} missed, {drops} lost"))
    for what, ok, fig in verdicts:
        print(f"  target {what}: {'MET' if ok else 'MISSED'} ({fig})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", choices=("apiext", "test"), default="apiext",
                    help="apiext: the real upstream k8s.io/apiextensions-apiserver 0.36 (default); "
                         "test: the project's test API server")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 1 pair per mode, 4 s windows, the fixed rate taken at 60%% of "
                         "saturation without probing (~1 min)")
    ap.add_argument("--rounds", type=int, default=None, help="A/B pairs per mode (default 4, --quick 1)")
    ap.add_argument("--seconds", type=int, default=None, help="about how long a round runs (default 9, --quick 4)")
    ap.add_argument("--modes", default="saturation,fixed", help="comma-separated: saturation, fixed")
    ap.add_argument("--bpf-stats", action=argparse.BooleanOptionalAction, default=True,
                    help="time the agent's BPF programs with the kernel's own accounting (sets "
                         "kernel.bpf_stats_enabled=1 for the run and restores it; default on)")
    ap.add_argument("--audit", action="store_true",
                    help="apiext: run the server with a Metadata-level audit log (tests/e2e's default; "
                         "the benchmark's default is none, as kubeadm's)")
    ap.add_argument("--go", default=None, metavar="1.NN",
                    help="test: the test API server built by this Go toolchain (test-apiserver-go1.NN; default: "
                         "Debian's Go 1.19 build). Go <= 1.20 and >= 1.21 start functions differently, "
                         "which changes what a uprobe costs (docs/benchmark.md)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 4)
    args.seconds = args.seconds or (4 if args.quick else 9)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or set(args.modes) - {"saturation", "fixed"}:
        ap.error("--modes: saturation and/or fixed")
    if args.go and args.server != "test":
        ap.error("--go selects a build of the test API server: use it with --server test")

    if os.geteuid() != 0:
        sys.exit("needs root (uprobes): run with sudo")
    for path in (H2LOAD, AGENT_BINARY, BPFTOOL):
        if not os.path.exists(path):
            sys.exit(f"missing {path} (set STORMWATCH_BUILD_DIR / install nghttp2-client, bpftool)")

    old_bpf_stats = None
    if args.bpf_stats:
        with open(BPF_STATS_SYSCTL) as f:
            old_bpf_stats = f.read().strip()
        with open(BPF_STATS_SYSCTL, "w") as f:
            f.write("1")
    try:
        return run(args)
    finally:
        if old_bpf_stats is not None:
            with open(BPF_STATS_SYSCTL, "w") as f:
                f.write(old_bpf_stats)


def pick_fixed_rate(b, args, sat_a):
    """The fixed rate: 15k if the agent-less server clearly has the headroom; else the highest of
    FIXED_FRACTIONS of its saturation throughput (median of the A rounds) that a 4 s probe without
    the agent sustains (>= 97% of offered, no failures); --quick takes the first without probing.
    Well below saturation, so that latency measures the agent and not queueing near the
    with-agent capacity (on a shared machine capacity moves by 20% between rounds)."""
    sat_rate = statistics.median(r["rate"] for r in sat_a) if sat_a else None
    if sat_rate is None:
        sat_rate = b.h2load(SAT_CLIENTS, SAT_STREAMS, 3)["rate"]
    if args.quick:
        rate = max(FIXED_CLIENTS, int(sat_rate * FIXED_FRACTIONS[0]) // 50 * 50)
        return rate, (f"--quick: {FIXED_FRACTIONS[0]:.0%} of the saturation throughput without the agent "
                      f"({sat_rate:.0f} req/s), not probed")
    candidates = [FIXED_TARGET_RPS] if sat_rate >= FIXED_TARGET_RPS * 1.05 else []
    for frac in FIXED_FRACTIONS:
        rate = int(sat_rate * frac) // 50 * 50
        if rate < FIXED_TARGET_RPS and rate not in candidates:
            candidates.append(rate)
    for rate in candidates:
        per_client = max(1, round(rate / FIXED_CLIENTS))
        probe = b.h2load(FIXED_CLIENTS, FIXED_STREAMS, 4, rps=per_client)
        ok = probe["rate"] >= 0.97 * rate and probe.get("failed", 0) + probe.get("errored", 0) == 0
        print(f"  fixed-rate probe without agent: offered {rate} req/s -> {probe['rate']:.0f} req/s "
              f"({'sustained' if ok else 'not sustained'})", flush=True)
        if ok:
            if rate == FIXED_TARGET_RPS:
                return rate, "15,000 req/s offered (sustained without the agent)"
            return rate, (f"the server does not sustain 15,000 req/s here (saturation {sat_rate:.0f} req/s "
                          f"without the agent); {rate} req/s is the highest of the tried rates "
                          f"({', '.join(map(str, candidates))}) it sustained without the agent")
    return None, "no tried rate was sustained without the agent; fixed mode skipped"


def run(args):
    server = ApiextServer(args) if args.server == "apiext" else TestServer(args)
    started = time.monotonic()
    load_start = machine_load()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, kernel {os.uname().release}, "
          f"{load_start} (shared by h2load, the server, etcd and the agent)", flush=True)
    try:
        server.start()
        with tempfile.TemporaryDirectory(prefix="stormwatch-bench-") as work:
            b = Bench(server, work, args.seconds, args.bpf_stats)
            print(f"server: {server.label}, pid {server.pid()}, ready after {time.monotonic() - started:.0f} s\n"
                  f"request: {server.request}\n"
                  f"{args.rounds} A/B pairs per mode, {args.seconds} s windows", flush=True)

            # Warm-up (not measured): TLS session caches, the server's token and authorization
            # caches, Go heap growth, etcd's page cache. Its rate sizes the saturation rounds:
            # each sends a fixed number of requests, about --seconds' worth, all completed.
            warm = b.h2load(SAT_CLIENTS, SAT_STREAMS, 3 if args.quick else 8)
            sat_n = max(SAT_CLIENTS * SAT_STREAMS, int(warm["rate"] * args.seconds) // 100 * 100)

            rows, sat_a, sat_b, note = [], [], [], ""
            if "saturation" in args.modes:
                print(f"saturation: {SAT_CLIENTS} connections x {SAT_STREAMS} streams, {sat_n} requests per round",
                      flush=True)
                sat_a, sat_b = b.alternate(args.rounds, SAT_CLIENTS, SAT_STREAMS, sat_n)
                rows.append(summarize("saturation", sat_a, sat_b))
            if "fixed" in args.modes:
                fixed, note = pick_fixed_rate(b, args, sat_a)
                if fixed is not None:
                    per_client = max(1, round(fixed / FIXED_CLIENTS))
                    fx_n = FIXED_CLIENTS * per_client * args.seconds
                    print(f"fixed: {FIXED_CLIENTS} connections x {per_client} req/s = "
                          f"{FIXED_CLIENTS * per_client} req/s offered, {fx_n} requests per round", flush=True)
                    fx_a, fx_b = b.alternate(args.rounds, FIXED_CLIENTS, FIXED_STREAMS, fx_n, rps=per_client)
                    rows.append(summarize("fixed", fx_a, fx_b, offered=FIXED_CLIENTS * per_client))
    finally:
        server.stop()

    load_end = machine_load()
    info = b.target_info or {}
    print(f"\nagent on pid {info.get('pid', '?')}: {info.get('target', '?')} {info.get('go_version', '?')}, "
          f"stack {info.get('stack', '?')}, role {info.get('role', '?')}, {info.get('status', '?')}")
    print(f"machine: {load_start} at the start, {load_end} at the end; run took "
          f"{time.monotonic() - started:.0f} s")
    if not rows:
        raise RuntimeError("no mode measured")
    print_table(rows)
    if note:
        print("fixed-rate mode: " + note)
    print_details(rows)
    print_verdicts(rows)
    if any(s["foreign_probes"] for s in rows):
        print("  WARNING: another process had uprobes on the server during the run (both sides paid them)")
    if any(s["non2xx"] for s in rows):
        print("  note: some responses were not 2xx (see per-round lines): APF or errors skew those rounds")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"server": args.server, "label": server.label, "request": server.request,
                       "rounds": args.rounds, "seconds": args.seconds, "bpf_stats": args.bpf_stats,
                       "load_start": load_start, "load_end": load_end, "target_info": info,
                       "fixed_note": note, "duration_s": time.monotonic() - started, "modes": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a measurement error, not a missed target
        print(f"bench_overhead: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
