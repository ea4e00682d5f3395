"""End to end, as root: the agent's fault matrix, each fault with its figure counted.

With real etcd, the stripped test API server (--test-delays: requests carrying
X-Stormwatch-Test-Delay are slow), real clients (Python's http.client over HTTP/1.1, curl over
HTTP/2) and the real agent, attached by name to the API server and to etcd:

  ring buffer overflow  not here: e2e_ring_buffer (tests/e2e/test_ring_buffer.py) floods the
                        agent's own ring buffer with tests/ring_flood while the agent is
                        SIGSTOPped; every request that finds no room is counted as
                        stormwatch_capture_lost_total{cause="ring_buffer_full"}, the agent stays
                        healthy and counts the next 15k requests/s without loss.
  a. target stopped     the API server SIGSTOPped for 3 s with requests in flight (a slow HTTP/2
                        GET, the HTTP/1.1 loop's next request), then SIGCONT: /healthz and
                        /readyz stay 200, the uprobes stay, and after the resume the agent counts
                        exactly what the server handled; no capture loss of any cause.
  b. target killed      the API server SIGKILLed with 6 HTTP/2 and 3 HTTP/1.1 slow requests in
                        flight: exactly 6 request_without_response and 3
                        http1_request_without_response, and one grpc_return_without_call per etcd
                        stream of the server's that etcd ends (begun before the agent attached:
                        etcd's grpc_server_handled_total says how many), nothing else lost; 0
                        uprobes left for its PID and none of its entries in the agent's BPF maps
                        (http1_reads, http1_last_direction); healthy and ready; re-attached to the
                        restarted server, exact counts again.
  c. memory limit       the agent in a memory cgroup whose limit is its working set plus
                        headroom, with limits.max_clients 50 and 300 distinct clients: not
                        OOM-killed (oom_kill 0), /metrics served, stormwatch_client_series at
                        50 and the rest folded (stormwatch_series_folded_total), every request
                        counted.
  d. unreadable /proc   the agent runs in its own mount namespace where a second API server's
                        /proc/PID/stat is an empty file: it logs `not attaching to NAME pid N:
                        cannot read /proc/N/stat`, counts
                        stormwatch_target_attach_failures_total{reason="proc_unreadable"} once,
                        reports it on /readyz, and keeps capturing the first API server exactly.
  e. SIGTERM / SIGINT   under load with 2 targets attached the agent exits within 1 s with code 0,
                        and none of its BPF programs, links, maps or uprobes remains in the
                        kernel (its fdinfo IDs against bpftool prog/link/map/perf show); the
                        same with a second SIGTERM 20 ms later (exit code 0), and with a SIGKILL
                        20 ms later (killed mid-stop: the kernel releases the rest). SIGKILL
                        alone: e2e_lifecycle's test_agent_restart.

    cd tests/e2e && STORMWATCH_BUILD_DIR=BUILD STORMWATCH_GO_OUT=BUILD/go /usr/bin/python3 -m unittest -v test_faults
"""
import http.client
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import Agent, require_bpf_privileges  # noqa: E402
from cluster import Cluster  # noqa: E402
from counts import count_map, delta  # noqa: E402
from test_lifecycle import (ENTRY_PROBES, RequestLoop, TargetWatch, agent_uprobes, bpf_objects,  # noqa: E402
                            bpftool_json, perf_event_fds, server_requests, uprobes_left_on)

MAX_EXIT_S = 1.0  # SIGTERM/SIGINT to process exit
CURL = "/usr/bin/curl"


def kernel_objects():
    """Every BPF program, link and map ID in the kernel, and the uprobes (bpftool perf show)."""
    return {"prog_id": {p["id"] for p in bpftool_json("prog", "show")},
            "link_id": {l["id"] for l in bpftool_json("link", "show")},
            "map_id": {m["id"] for m in bpftool_json("map", "show")},
            "perf": bpftool_json("perf", "show")}


def uprobes_by_target(agent_pid):
    """{target pid: uprobes agent_pid holds on it} (test_lifecycle.agent_uprobes)."""
    return agent_uprobes(agent_pid)[0]


def bpf_entries_of(agent_pid, target_pid):
    """Entries the agent's BPF programs keep per HTTP/1.1 call or connection of target_pid (the
    http1_reads and http1_last_direction maps, keyed by tgid first)."""
    ids = bpf_objects(agent_pid)["map_id"]
    n = 0
    for m in bpftool_json("map", "show"):
        if m["id"] not in ids or m.get("name") not in ("http1_reads", "http1_last_dire"):
            continue
        for e in bpftool_json("map", "dump", "id", str(m["id"])):
            key = e.get("formatted", {}).get("key")
            tgid = key["tgid"] if key else int.from_bytes(bytes(int(b, 16) for b in e["key"][:4]), "little")
            n += tgid == target_pid
    return n


def lost(agent):
    """stormwatch_capture_lost_total as {cause: count}."""
    out = {}
    for n, l, v in agent.metrics():
        if n == "stormwatch_capture_lost_total":
            out[l["cause"]] = out.get(l["cause"], 0) + int(v)
    return out


def lost_delta(after, before):
    return {c: n - before.get(c, 0) for c, n in after.items() if n != before.get(c, 0)}


class FaultMatrix(unittest.TestCase):
    """The cluster, the agent and the helpers every fault case uses; the cases are in the
    subclasses (FaultsEndToEnd here, on the test API server; test_faults_real on the real one)."""
    maxDiff = None

    def setUp(self):
        require_bpf_privileges(self)
        self.name = "kube-apiserver-faults-%d" % os.getpid()
        self.etcd_name = "etcd-faults-%d" % os.getpid()
        self.cluster = Cluster(apiserver_name=self.name, etcd_name=self.etcd_name,
                               apiserver_args=["--test-delays"]).start()
        self.addCleanup(self.cluster.stop)
        self.token = self.cluster.mint_token("default", "faults-reader")
        self.kubeconfig = self.cluster.kubeconfig(self.token)
        with open(self.token) as f:
            self.bearer = f.read().strip()
        self.curls = []
        self.addCleanup(self._stop_curls)

    def _stop_curls(self):
        for p in self.curls:
            if p.poll() is None:
                p.kill()
            p.wait()

    # ---- helpers ----

    def start_agent(self, extra=(), wrap=None, targets=None):
        """The agent attached by name (the API server and etcd unless targets); wrap: argv
        prefix that execs the agent (its PID stays the agent's)."""
        targets = targets or [self.name, self.etcd_name]
        agent = Agent(self.cluster.tmp, extra_args=["--target", ",".join(targets), *extra])
        if wrap:
            agent.args = [*wrap, *agent.args]
        agent.start()
        self.addCleanup(agent.stop)
        watch = TargetWatch(agent)
        self.addCleanup(watch.stop)
        return agent, watch

    def etcd_pid(self):
        return self.cluster.etcd.pid

    def wait_uprobes(self, agent, expected, timeout=5):
        deadline = time.monotonic() + timeout
        while True:
            got, perf = agent_uprobes(agent.proc.pid)
            if got == expected and perf_event_fds(agent.proc.pid) == perf:
                return got
            if time.monotonic() > deadline:
                self.assertEqual(got, expected, "uprobes per target pid")
                self.assertEqual(perf_event_fds(agent.proc.pid), perf, "perf_event fds")
            time.sleep(0.05)

    def attached_probes(self, agent, watch, pids):
        """Waits until every pid is attached; {pid: uprobes}."""
        for pid in pids:
            watch.wait_attached(pid, timeout=30)
        deadline = time.monotonic() + 5
        while True:
            probes = uprobes_by_target(agent.proc.pid)
            if set(probes) == set(pids):
                break
            self.assertLess(time.monotonic(), deadline, "uprobes: %s" % probes)
            time.sleep(0.05)
        self.assertGreater(probes[self.cluster.apiserver_pid], ENTRY_PROBES)
        return self.wait_uprobes(agent, probes)

    def assert_healthy(self, agent, ready=True):
        self.assertIsNone(agent.proc.poll(), agent.stderr()[-3000:])
        self.assertEqual(agent.health("/healthz")[0], 200)
        if ready is not None:
            deadline = time.monotonic() + 3
            while (agent.health("/readyz")[0] == 200) != ready and time.monotonic() < deadline:
                time.sleep(0.05)
            status, body = agent.health("/readyz")
            self.assertEqual(status == 200, ready, body)
            return body
        return None

    def snapshot(self, agent, server):
        return agent.settled_request_counts(), count_map(server.counts())

    def assert_counts_exact(self, agent, snapshot, server):
        agent_before, server_before = snapshot
        expected = server_requests(delta(count_map(server.counts()), server_before))
        deadline = time.monotonic() + 10
        while delta(agent.request_counts(), agent_before) != expected and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(delta(agent.request_counts(), agent_before), expected)
        self.assertGreater(len(expected), 0)
        return sum(expected.values())

    def assert_counts_exact_folded(self, agent, snapshot, server):
        """As assert_counts_exact, with clients beyond limits.max_clients folded into "other":
        the totals per verb, resource and code exact, no client over its own count. Returns (requests, clients with their own series among them)."""
        agent_before, server_before = snapshot
        expected = server_requests(delta(count_map(server.counts()), server_before))

        def by_shape(counts):
            out = {}
            for key, n in counts.items():
                out[key[1:]] = out.get(key[1:], 0) + n
            return out
        deadline = time.monotonic() + 10
        while True:
            got = delta(agent.request_counts(), agent_before)
            if by_shape(got) == by_shape(expected) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(by_shape(got), by_shape(expected))
        # A client with its own series: never more than the server handled for it (less when it
        # took an idle client's place part-way, the rest being in "other").
        own = {k: n for k, n in got.items() if k[0] != "other"}
        self.assertEqual({k: n for k, n in own.items() if n > expected.get(k, 0)}, {})
        return sum(expected.values()), len({k[0] for k in own})

    def wait_lost(self, agent, before, expected, timeout=5):
        """Capture losses since before become exactly expected (published once a second), and
        stay so for one more second."""
        deadline = time.monotonic() + timeout
        while lost_delta(lost(agent), before) != expected and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.2)
        self.assertEqual(lost_delta(lost(agent), before), expected)

    def slow_curl(self, http, delay, path="/api/v1/namespaces/default/configmaps"):
        """A real curl request (--http2 or --http1.1) the server holds for `delay`."""
        p = subprocess.Popen([CURL, "-sS", http, "--cacert", self.cluster.ca_file, "-o", "/dev/null",
                              "-w", "%{http_code}", "-H", "Authorization: Bearer " + self.bearer,
                              "-H", "X-Stormwatch-Test-Delay: " + delay, self.cluster.base_url + path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.curls.append(p)
        return p

    def probe_hits(self, agent):
        return {l["probe"]: int(v) for n, l, v in agent.metrics() if n == "stormwatch_probe_hits_total"}

    def wait_hits(self, agent, before, probe, n, timeout=10):
        deadline = time.monotonic() + timeout
        while self.probe_hits(agent).get(probe, 0) - before.get(probe, 0) < n:
            self.assertLess(time.monotonic(), deadline, "%s hits: %s" % (probe, self.probe_hits(agent)))
            time.sleep(0.1)

    def kubectl_traffic(self):
        for args in (("get", "configmaps"), ("get", "pods", "-A")):
            r = self.cluster.kubectl(*args, kubeconfig=self.kubeconfig)
            self.assertEqual(r.returncode, 0, "%s: %s" % (args, r.stderr))

    def request_loop(self):
        return RequestLoop(self.cluster.base_url, self.cluster.ca_file, self.token)

    def wait_loop(self, loop, n, timeout=20):
        target = loop.sent + n
        deadline = time.monotonic() + timeout
        while loop.sent < target and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertGreaterEqual(loop.sent, target, "request loop stalled: %s" % loop.errors[-3:])

    def etcd_streams_handled(self):
        """etcd's own count of finished stream calls (grpc_server_handled_total, streams)."""
        n = 0
        for line in self.cluster.etcd_metrics().splitlines():
            if line.startswith("grpc_server_handled_total{") and '_stream"' in line:
                n += int(float(line.rsplit(" ", 1)[1]))
        return n

    def kill_target_in_flight(self, agent, watch, etcd_probes, hits, lost_before, h2, h1):
        """SIGKILLs the API server once the agent has seen h2 HTTP/2 and h1 HTTP/1.1 requests of
        self.curls begin; checks they fail, that its target and uprobes go (etcd's stay), that
        none of its BPF map entries is left, and that exactly the requests in flight and its etcd
        streams are counted as lost. Returns the figures."""
        c = self.cluster
        # Every request seen by the agent (its headers probe hit) before the kill.
        self.wait_hits(agent, hits, "http2_process_headers", h2)
        self.wait_hits(agent, hits, "http1_read_return", h1)
        time.sleep(1.2)
        streams_before = self.etcd_streams_handled()
        old_pid = c.apiserver_pid
        bpf_state = bpf_entries_of(agent.proc.pid, old_pid)
        self.assertGreater(bpf_state, 0, "HTTP/1.1 calls in flight, kept in BPF maps")
        os.kill(old_pid, signal.SIGKILL)
        c.apiserver.wait(timeout=10)
        killed = time.monotonic()
        for p in self.curls:
            p.wait(timeout=10)
            self.assertNotEqual(p.returncode, 0, "a request of the killed server completed")
        gone = watch.wait_gone(old_pid) - killed
        self.wait_uprobes(agent, {self.etcd_pid(): etcd_probes})
        detached = time.monotonic() - killed
        deadline = time.monotonic() + 5
        while bpf_entries_of(agent.proc.pid, old_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(bpf_entries_of(agent.proc.pid, old_pid), 0, "BPF map entries of the killed server")
        # The server's etcd streams (its Watch stream) began before the agent attached: etcd
        # ends them now, returns whose calls were never seen, each counted.
        deadline = time.monotonic() + 5
        while self.etcd_streams_handled() == streams_before and time.monotonic() < deadline:
            time.sleep(0.1)
        streams_ended = self.etcd_streams_handled() - streams_before
        self.assertGreater(streams_ended, 0)
        self.wait_lost(agent, lost_before, {"request_without_response": h2,
                                            "http1_request_without_response": h1,
                                            "grpc_return_without_call": streams_ended})
        self.assert_healthy(agent)
        return {"pid": old_pid, "gone_s": gone, "detached_s": detached, "bpf_entries": bpf_state,
                "streams_ended": streams_ended}

    # ---- c. memory limit ----

    def memory_cgroup(self):
        """A fresh memory cgroup: (directory, limit file, v2?) -- cgroup v2 when the memory
        controller is there, else v1's memory hierarchy."""
        name = "stormwatch-faults-%d" % os.getpid()
        for root, v2 in (("/sys/fs/cgroup", True), ("/sys/fs/cgroup/unified", True), ("/sys/fs/cgroup/memory", False)):
            controllers = os.path.join(root, "cgroup.controllers")
            if v2 and not (os.path.exists(controllers) and "memory" in self.cg_read(root, "cgroup.controllers").split()):
                continue
            if not v2 and not os.path.exists(os.path.join(root, "memory.limit_in_bytes")):
                continue
            path = os.path.join(root, name)
            os.mkdir(path)
            self.addCleanup(self._remove_cgroup, path)
            return path, v2
        self.skipTest("no memory cgroup controller")

    @staticmethod
    def _remove_cgroup(path):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.rmdir(path)
                return
            except OSError:
                time.sleep(0.1)

    @staticmethod
    def cg_read(path, name):
        with open(os.path.join(path, name)) as f:
            return f.read()

    def cg_figures(self, path, v2):
        if v2:
            events = dict(l.split() for l in self.cg_read(path, "memory.events").splitlines())
            return {"current": int(self.cg_read(path, "memory.current")),
                    "peak": int(self.cg_read(path, "memory.peak")) if os.path.exists(os.path.join(path, "memory.peak")) else 0,
                    "oom_kill": int(events.get("oom_kill", 0)), "max_events": int(events.get("max", 0))}
        oom = dict(l.split() for l in self.cg_read(path, "memory.oom_control").splitlines())
        return {"current": int(self.cg_read(path, "memory.usage_in_bytes")),
                "peak": int(self.cg_read(path, "memory.max_usage_in_bytes")),
                "oom_kill": int(oom.get("oom_kill", 0)), "max_events": int(self.cg_read(path, "memory.failcnt"))}

    def memory_limit_case(self, path, server):
        """c. The agent in a memory cgroup limited to its working set + 16 MiB, under 300 new
        clients (each its own HTTP/1.1 connection, 2 GETs of path) with limits.max_clients 50:
        no OOM kill, usage within the limit, the totals exact with the clients beyond 50 folded
        into "other"."""
        c = self.cluster
        cg, v2 = self.memory_cgroup()
        limit_file = "memory.max" if v2 else "memory.limit_in_bytes"
        max_clients, clients, per_client = 50, 300, 2
        config = os.path.join(c.tmp, "faults-limits.yaml")
        with open(config, "w") as f:
            f.write("limits:\n  max_clients: %d\n" % max_clients)
        # The limit: the agent's working set once attached, plus headroom for what the bounded
        # state may grow by (measured below: the peak under load must stay within it).
        wrap = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cg]
        agent, watch = self.start_agent(extra=["--config", config], wrap=wrap)
        self.attached_probes(agent, watch, [c.apiserver_pid, self.etcd_pid()])
        time.sleep(2)
        base = self.cg_figures(cg, v2)["current"]
        limit = base + (16 << 20)
        with open(os.path.join(cg, limit_file), "w") as f:
            f.write(str(limit))
        snapshot = self.snapshot(agent, server)
        # 300 distinct service accounts, each on its own HTTP/1.1 connection.
        tokens = [c.mint_token("load", "sa-%03d" % i) for i in range(clients)]
        ctx = ssl.create_default_context(cafile=c.ca_file)
        port = int(c.base_url.rsplit(":", 1)[1])
        errors = []

        def run(chunk):
            for tok in chunk:
                with open(tok) as f:
                    auth = {"Authorization": "Bearer " + f.read().strip()}
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
                try:
                    for _ in range(per_client):
                        conn.request("GET", path, headers=auth)
                        conn.getresponse().read()
                except (OSError, http.client.HTTPException) as e:
                    errors.append(repr(e))
                finally:
                    conn.close()
        threads = [threading.Thread(target=run, args=(tokens[i::4],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        counted, own = self.assert_counts_exact_folded(agent, snapshot, server)
        self.assertGreaterEqual(counted, clients * per_client)
        self.assertLessEqual(own, max_clients)
        series = {l["metric"]: int(v) for n, l, v in agent.metrics() if n == "stormwatch_client_series"}
        folded = {l["metric"]: int(v) for n, l, v in agent.metrics() if n == "stormwatch_series_folded_total"}
        self.assertEqual(series.get("stormwatch_requests_total"), max_clients, series)
        self.assertGreater(folded.get("stormwatch_requests_total", 0), 0, folded)
        self.assert_healthy(agent)
        figures = self.cg_figures(cg, v2)
        self.assertEqual(figures["oom_kill"], 0, figures)
        self.assertLessEqual(figures["current"], limit)
        rss = int(agent.metric_value("process_resident_memory_bytes"))
        print("\nc. memory cgroup (%s) limit %.1f MiB = working set %.1f MiB + 16 MiB; under %d clients x %d "
              "requests with limits.max_clients %d: usage %.1f MiB, peak %.1f MiB, RSS %.1f MiB, "
              "limit hits %d, oom_kill %d; %d requests exact; client series %d, folded %d"
              % ("v2" if v2 else "v1", limit / 2**20, base / 2**20, clients, per_client, max_clients,
                 figures["current"] / 2**20, figures["peak"] / 2**20, rss / 2**20, figures["max_events"],
                 figures["oom_kill"], counted, series.get("stormwatch_requests_total"),
                 folded.get("stormwatch_requests_total", 0)), file=sys.stderr)

    # ---- d. unreadable /proc entry ----

    def unreadable_proc_case(self, hidden_pid, hidden_name, targets, server, stop_hidden):
        """d. hidden_pid's /proc/PID/stat empty in the agent's own mount namespace: refused
        (proc_unreadable), logged, counted once, /readyz 503 naming it, while the cluster's API
        server is captured exactly; stop_hidden() ends it (returning time.monotonic() then) and
        the agent is ready again."""
        c = self.cluster
        empty = os.path.join(c.tmp, "empty-stat")
        open(empty, "w").close()
        # The agent's own mount namespace: there hidden_pid's /proc/PID/stat is empty.
        wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$0" "/proc/$1/stat" && shift && exec "$@"', empty, str(hidden_pid)]
        agent, watch = self.start_agent(wrap=wrap, targets=targets)
        probes = self.attached_probes(agent, watch, [c.apiserver_pid])
        deadline = time.monotonic() + 10
        while agent.metric_value("stormwatch_target_attach_failures_total", reason="proc_unreadable") < 1:
            self.assertLess(time.monotonic(), deadline, agent.stderr()[-3000:])
            time.sleep(0.1)
        log = [l for l in agent.stderr().splitlines() if "pid %d" % hidden_pid in l]
        self.assertTrue(any("not attaching to %s pid %d" % (hidden_name, hidden_pid) in l and
                            "/proc/%d/stat" % hidden_pid in l for l in log), log)
        info = [l for n, l, v in agent.metrics() if n == "stormwatch_target_info" and v == 1 and l["pid"] == str(hidden_pid)]
        self.assertEqual([(l["status"], l["reason"]) for l in info], [("refused", "proc_unreadable")])
        body = self.assert_healthy(agent, ready=False)
        self.assertIn("pid %d not attached (proc_unreadable)" % hidden_pid, body)
        # Still capturing the API server, exactly; the failure counted once, not per rescan.
        snapshot = self.snapshot(agent, server)
        self.kubectl_traffic()
        counted = self.assert_counts_exact(agent, snapshot, server)
        self.assertEqual(uprobes_by_target(agent.proc.pid), probes)
        time.sleep(2)
        self.assertEqual(agent.metric_value("stormwatch_target_attach_failures_total", reason="proc_unreadable"), 1)
        # It goes away: the agent is ready again.
        exited = stop_hidden()
        while any(n == "stormwatch_target_info" and v == 1 and l["pid"] == str(hidden_pid)
                  for n, l, v in agent.metrics()):
            self.assertLess(time.monotonic() - exited, 5, "refused target still listed")
            time.sleep(0.05)
        self.assert_healthy(agent, ready=True)
        print("\nd. /proc/%d/stat (%s) unreadable in the agent's mount namespace: refused (proc_unreadable), "
              "counted once, logged %d line(s), /readyz 503 until it exited; the API server's %d requests "
              "exact" % (hidden_pid, hidden_name, len(log), counted), file=sys.stderr)

    # ---- e. SIGTERM / SIGINT ----

    def stop_under_load(self, sig, then=None):
        c = self.cluster
        before = kernel_objects()
        agent, watch = self.start_agent(extra=["--log-level", "debug"])
        probes = self.attached_probes(agent, watch, [c.apiserver_pid, self.etcd_pid()])
        loop = self.request_loop().start()
        self.addCleanup(loop.stop)
        self.wait_loop(loop, 50)
        pid = agent.proc.pid
        objects = bpf_objects(pid)
        self.assertTrue(objects["link_id"], "BPF links for the uprobes")
        watch.stop()
        sent = time.monotonic()
        os.kill(pid, sig)
        if then:  # a second signal while it stops
            time.sleep(0.02)
            try:
                os.kill(pid, then)
            except ProcessLookupError:
                pass
        code = agent.proc.wait(timeout=10)
        exit_s = time.monotonic() - sent
        loop.stop()
        agent.stop()
        # The kernel frees maps (and a killed process's programs) a moment after the exit.
        deadline = time.monotonic() + 5
        while True:
            after = kernel_objects()
            left = {k: after[k] & objects[k] for k in ("prog_id", "link_id", "map_id")}
            if not any(left.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        released_s = time.monotonic() - sent
        uprobes = ([e for e in after["perf"] if e["pid"] == pid] + uprobes_left_on(c.apiserver_pid) +
                   uprobes_left_on(self.etcd_pid()))
        self.assertIn(code, (0, -then) if then == signal.SIGKILL else (0,), agent.stderr()[-3000:])
        self.assertEqual(left, {"prog_id": set(), "link_id": set(), "map_id": set()})
        self.assertEqual(uprobes, [])
        new = {k: len(after[k] - before[k]) for k in ("prog_id", "link_id", "map_id")}
        print("\ne. %s%s with %d uprobes on 2 targets under a client loop: exit %d after %.3f s; %d programs, "
              "%d links, %d maps released %.2f s after the signal; kernel objects not there before: %s "
              "(other processes')"
              % (signal.Signals(sig).name, " then %s 20 ms later" % signal.Signals(then).name if then else "",
                 sum(probes.values()), code, exit_s, len(objects["prog_id"]),
                 len(objects["link_id"]), len(objects["map_id"]), released_s, new), file=sys.stderr)
        self.assertLess(exit_s, MAX_EXIT_S, "\n".join(l for l in agent.stderr().splitlines()[-40:] if "libbpf" not in l))
        return exit_s


class FaultsEndToEnd(FaultMatrix):
    # ---- a. target stopped ----

    def test_a_target_stopped_and_resumed(self):
        c = self.cluster
        agent, watch = self.start_agent()
        probes = self.attached_probes(agent, watch, [c.apiserver_pid, self.etcd_pid()])
        loop = self.request_loop().start()
        self.addCleanup(loop.stop)
        self.wait_loop(loop, 50)
        loop.pause()
        snapshot = self.snapshot(agent, c.main_apiserver)
        lost_before = lost(agent)
        loop.resume()
        slow = self.slow_curl("--http2", "500ms")
        time.sleep(0.2)
        sent = loop.sent
        os.kill(c.apiserver_pid, signal.SIGSTOP)
        try:
            time.sleep(3)
            # Stopped, the server answers nothing; the agent is healthy, ready, still attached.
            self.assertIsNone(slow.poll(), "the slow request finished while its server was stopped")
            self.assertLessEqual(loop.sent - sent, 1, "the loop's request waits for the stopped server")
            self.assert_healthy(agent)
            self.assertEqual(uprobes_by_target(agent.proc.pid), probes)
        finally:
            os.kill(c.apiserver_pid, signal.SIGCONT)
        out, err = slow.communicate(timeout=10)
        self.assertEqual((slow.returncode, out), (0, "200"), err)
        self.wait_loop(loop, 50)
        self.kubectl_traffic()
        loop.pause()
        counted = self.assert_counts_exact(agent, snapshot, c.main_apiserver)
        self.wait_lost(agent, lost_before, {})
        self.assert_healthy(agent)
        self.assertEqual(uprobes_by_target(agent.proc.pid), probes)
        loop.stop()
        self.assertEqual(loop.errors, [])
        print("\na. target SIGSTOPped %.1f s with 2 requests in flight: %d requests exact after SIGCONT, "
              "0 lost, healthy and ready throughout, %s uprobes kept"
              % (3.0, counted, probes), file=sys.stderr)

    # ---- b. target killed mid-request ----

    def test_b_target_killed_mid_request(self):
        c = self.cluster
        agent, watch = self.start_agent()
        probes = self.attached_probes(agent, watch, [c.apiserver_pid, self.etcd_pid()])
        etcd_probes = probes[self.etcd_pid()]
        self.kubectl_traffic()
        agent.settled_request_counts()
        lost_before = lost(agent)
        hits = self.probe_hits(agent)
        h2, h1 = 6, 3
        for _ in range(h2):
            self.slow_curl("--http2", "30s")
        for _ in range(h1):
            self.slow_curl("--http1.1", "30s")
        killed = self.kill_target_in_flight(agent, watch, etcd_probes, hits, lost_before, h2, h1)
        # Restarted: re-attached with the same probes, exact counts.
        server = c.start_main_apiserver()
        watch.wait_attached(server.pid)
        self.wait_uprobes(agent, {server.pid: probes[killed["pid"]], self.etcd_pid(): etcd_probes})
        snapshot = self.snapshot(agent, server)
        self.kubectl_traffic()
        counted = self.assert_counts_exact(agent, snapshot, server)
        self.assert_healthy(agent)
        print("\nb. target SIGKILLed with %d HTTP/2 + %d HTTP/1.1 requests in flight: lost "
              "request_without_response %d, http1_request_without_response %d, grpc_return_without_call "
              "%d (its etcd streams, begun before the agent); target_info gone %.2f s and its %d uprobes "
              "%.2f s after the kill, its %d BPF map entries removed; re-attached, %d requests exact"
              % (h2, h1, h2, h1, killed["streams_ended"], killed["gone_s"], probes[killed["pid"]],
                 killed["detached_s"], killed["bpf_entries"], counted),
              file=sys.stderr)

    # ---- c. memory limit ----

    def test_c_memory_limit(self):
        self.memory_limit_case("/api/v1/namespaces/load/configmaps", self.cluster.main_apiserver)

    # ---- d. unreadable /proc entry ----

    def test_d_unreadable_proc_entry(self):
        c = self.cluster
        hidden = c.start_apiserver(c.apiserver_binary())  # a second test API server, hidden
        self.unreadable_proc_case(hidden.pid, self.name, [self.name], c.main_apiserver,
                                  lambda: c.stop_apiserver(hidden))

    # ---- e. SIGTERM / SIGINT ----

    def test_e_sigterm_exits_within_1s(self):
        self.stop_under_load(signal.SIGTERM)

    def test_e_sigint_exits_within_1s(self):
        self.stop_under_load(signal.SIGINT)

    def test_e_second_sigterm_changes_nothing(self):
        self.stop_under_load(signal.SIGTERM, then=signal.SIGTERM)

    def test_e_sigkill_while_stopping_leaves_nothing(self):
        self.stop_under_load(signal.SIGTERM, then=signal.SIGKILL)


if __name__ == "__main__":
    unittest.main(verbosity=2)
