"""End to end, as root: the fault matrix of test_faults on the real upstream API server.

k8s.io/apiextensions-apiserver 0.36.4 (Kubernetes 1.36's k8s.io/apiserver, x/net HTTP/2, built
stripped with Go 1.26) on forky's etcd 3.5.30, started as e2e_real_apiserver starts it, both
attached by name. The real server has no test hook that holds a request, so the requests in
flight are what keeps them open on any cluster: watches (HTTP/2 and HTTP/1.1, curl), and
requests sent while the server is stopped. Counts are compared with the server's own
apiserver_request_total per (verb, group, version, resource, subresource, scope, code).

  a. target stopped   SIGSTOP for 3 s with an HTTP/1.1 request loop and an HTTP/2 GET in flight,
                      then SIGCONT: healthy and ready throughout, uprobes kept, every request
                      the server counted counted exactly, no capture loss.
  b. target killed    SIGKILL with 3 HTTP/2 and 2 HTTP/1.1 watches open: exactly 3
                      request_without_response, 2 http1_request_without_response and one
                      grpc_return_without_call per etcd stream of the server's that etcd ends;
                      no uprobe and no BPF map entry left for its PID; the server started again
                      (a new PID, a new binary copy at the same path): re-attached, exact counts.
  c. memory limit    the agent in a memory cgroup of its working set + 16 MiB under 300 new
                      service accounts with limits.max_clients 50: no OOM kill, the totals
                      exact, clients beyond 50 folded into "other".
  d. /proc unreadable etcd's /proc/PID/stat empty in the agent's mount namespace: etcd refused
                      (proc_unreadable), counted once, /readyz 503 until etcd exits, the API
                      server captured exactly meanwhile.
  e. SIGTERM          under load on both targets: exit 0 within 1 s, no program, link, map or
                      uprobe left.

    cd tests/e2e && STORMWATCH_BUILD_DIR=BUILD STORMWATCH_GO_OUT=BUILD/go /usr/bin/python3 -m unittest -v test_faults_real
"""
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_faults  # noqa: E402  (the module, so its own cases are not collected here)
from agent import require_bpf_privileges  # noqa: E402
from cluster import Cluster, default_go_out  # noqa: E402
from test_lifecycle import RequestLoop  # noqa: E402
from test_real_apiserver import COLLECTION, ETCD_3_5, GROUP, RESOURCE, VERSION, create_datajobs, server_counts  # noqa: E402

CURL = test_faults.CURL
LOAD_CLIENT = "system:serviceaccount:load:"  # test c's clients
LOAD_REQUESTS_PER_CLIENT = 2


def delta(after, before):
    d = {k: v - before.get(k, 0) for k, v in after.items()}
    return {k: v for k, v in d.items() if v}


def by_labels(agent_counts):
    """stormwatch_requests_total of resource requests by apiserver_request_total's labels."""
    out = {}
    for key, v in agent_counts.items():
        if key[4]:
            out[key[1:]] = out.get(key[1:], 0) + v
    return out


class FaultsOnRealApiServer(test_faults.FaultMatrix):
    def setUp(self):
        require_bpf_privileges(self)
        binary = os.path.join(default_go_out(), "apiextensions-apiserver")
        self.assertTrue(os.path.exists(binary), "%s missing: cmake builds it" % binary)
        self.assertTrue(os.path.exists(ETCD_3_5), "%s missing: scripts/setup.sh fetches it" % ETCD_3_5)
        self.name = "kube-apiserver-realfaults-%d" % os.getpid()
        self.etcd_name = "etcd-realfaults-%d" % os.getpid()
        self.cluster = Cluster(server="apiextensions", etcd_bin=ETCD_3_5, apiserver_name=self.name,
                               etcd_name=self.etcd_name, audit=False).start()
        self.addCleanup(self.cluster.stop)
        self.token = self.cluster.mint_token("default", "faults-reader")
        self.kubeconfig = self.cluster.kubeconfig(self.token)
        with open(self.token) as f:
            self.bearer = f.read().strip()
        self.curls = []
        self.addCleanup(self._stop_curls)
        create_datajobs(self.admin, ["nightly-etl", "hourly-sync"])

    def admin(self, *args, input=None):
        r = self.cluster.kubectl(*args, kubeconfig=self.cluster.admin_kubeconfig, input=input)
        self.assertEqual(r.returncode, 0, "%s: %s" % (args, r.stderr))
        return r.stdout

    # ---- the real server's figures instead of the test server's ----

    def request_loop(self):
        return RequestLoop(self.cluster.base_url, self.cluster.ca_file, self.token,
                           paths=(COLLECTION, COLLECTION + "/nightly-etl", COLLECTION + "/missing"))

    def kubectl_traffic(self):
        # Raw paths: the server serves no /api, which kubectl's discovery wants.
        for args in (("get", "--raw", COLLECTION), ("get", "--raw", "/apis/batch.company.com/v1/datajobs"),
                     ("get", "--raw", COLLECTION + "/hourly-sync")):
            r = self.cluster.kubectl(*args, kubeconfig=self.kubeconfig)
            self.assertEqual(r.returncode, 0, "%s: %s" % (args, r.stderr))

    def snapshot(self, agent, server=None):
        """(the agent's counts, the server's), once both stand still: the server's own
        controllers call it over loopback now and then, and both sides count those too."""
        last = None
        deadline = time.monotonic() + 15
        while True:
            now = (by_labels(agent.request_counts()), server_counts(self.cluster.apiserver_metrics()))
            if now == last or time.monotonic() > deadline:
                return now
            last = now
            time.sleep(0.4)

    def assert_counts_exact(self, agent, snapshot, server=None):
        agent_before, server_before = snapshot
        deadline = time.monotonic() + 15
        while True:
            now_agent, now_server = self.snapshot(agent)
            got, expected = delta(now_agent, agent_before), delta(now_server, server_before)
            if got == expected or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(got, expected)
        self.assertGreater(len(expected), 0)
        return sum(expected.values())

    def watch_curl(self, http):
        """A real curl watch (--http2 or --http1.1) of the datajobs: open until killed."""
        p = subprocess.Popen([CURL, "-sS", http, "--cacert", self.cluster.ca_file, "-o", "/dev/null",
                              "-H", "Authorization: Bearer " + self.bearer,
                              self.cluster.base_url + COLLECTION + "?watch=true&timeoutSeconds=300"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.curls.append(p)
        return p

    def get_curl(self, http):
        p = subprocess.Popen([CURL, "-sS", http, "--cacert", self.cluster.ca_file, "-o", "/dev/null",
                              "-w", "%{http_code}", "-H", "Authorization: Bearer " + self.bearer,
                              self.cluster.base_url + COLLECTION],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.curls.append(p)
        return p

    # ---- a. target stopped ----

    def test_a_target_stopped_and_resumed(self):
        c = self.cluster
        agent, watch = self.start_agent()
        probes = self.attached_probes(agent, watch, [c.apiserver_pid, self.etcd_pid()])
        loop = self.request_loop().start()
        self.addCleanup(loop.stop)
        self.wait_loop(loop, 30)
        loop.pause()
        snapshot = self.snapshot(agent)
        lost_before = test_faults.lost(agent)
        loop.resume()
        time.sleep(0.2)
        os.kill(c.apiserver_pid, signal.SIGSTOP)
        try:
            h2 = self.get_curl("--http2")  # sent to the stopped server: in flight until SIGCONT
            sent = loop.sent
            time.sleep(3)
            self.assertIsNone(h2.poll(), "a request finished while its server was stopped")
            self.assertLessEqual(loop.sent - sent, 1, "the loop's request waits for the stopped server")
            self.assert_healthy(agent)
            self.assertEqual(test_faults.uprobes_by_target(agent.proc.pid), probes)
        finally:
            os.kill(c.apiserver_pid, signal.SIGCONT)
        out, err = h2.communicate(timeout=10)
        self.assertEqual((h2.returncode, out), (0, "200"), err)
        self.wait_loop(loop, 30)
        self.kubectl_traffic()
        loop.pause()
        counted = self.assert_counts_exact(agent, snapshot)
        self.wait_lost(agent, lost_before, {})
        self.assert_healthy(agent)
        self.assertEqual(test_faults.uprobes_by_target(agent.proc.pid), probes)
        loop.stop()
        self.assertEqual(loop.errors, [])
        print("\na. real API server SIGSTOPped 3.0 s with 2 requests in flight: %d requests equal to "
              "apiserver_request_total after SIGCONT, 0 lost, healthy and ready throughout, %s uprobes kept"
              % (counted, probes), file=sys.stderr)

    # ---- b. target killed ----

    def test_b_target_killed_with_watches_open(self):
        c = self.cluster
        agent, watch = self.start_agent()
        probes = self.attached_probes(agent, watch, [c.apiserver_pid, self.etcd_pid()])
        etcd_probes = probes[self.etcd_pid()]
        self.kubectl_traffic()
        agent.settled_request_counts()
        lost_before = test_faults.lost(agent)
        hits = self.probe_hits(agent)
        h2, h1 = 3, 2
        for _ in range(h2):
            self.watch_curl("--http2")
        for _ in range(h1):
            self.watch_curl("--http1.1")
        killed = self.kill_target_in_flight(agent, watch, etcd_probes, hits, lost_before, h2, h1)
        # Started again: re-attached by name with the same probes, exact counts.
        c.restart_apiextensions()
        self.kubeconfig = c.kubeconfig(self.token)  # the new port
        watch.wait_attached(c.apiserver_pid, timeout=30)
        self.wait_uprobes(agent, {c.apiserver_pid: probes[killed["pid"]], self.etcd_pid(): etcd_probes})
        snapshot = self.snapshot(agent)
        self.kubectl_traffic()
        counted = self.assert_counts_exact(agent, snapshot)
        self.assert_healthy(agent)
        print("\nb. real API server SIGKILLed with %d HTTP/2 + %d HTTP/1.1 watches open: lost "
              "request_without_response %d, http1_request_without_response %d, grpc_return_without_call %d; "
              "target_info gone %.2f s after the kill, no uprobe or BPF map entry left; restarted, re-attached, "
              "%d requests equal to apiserver_request_total"
              % (h2, h1, h2, h1, killed["streams_ended"], killed["gone_s"], counted),
              file=sys.stderr)

    # ---- c. memory limit ----

    def test_c_memory_limit(self):
        self.memory_limit_case("/apis/%s/%s/namespaces/load/%s" % (GROUP, VERSION, RESOURCE), None)

    def assert_counts_exact_folded(self, agent, snapshot, server=None):
        """apiserver_request_total has no client label (why stormwatch exists): its totals exact,
        as assert_counts_exact; of the load's clients (system:serviceaccount:load:*, new in this
        test) none with its own series over the requests it sent. Returns (requests, load
        clients with their own series)."""
        counted = self.assert_counts_exact(agent, snapshot)
        own = {}
        for key, n in agent.request_counts().items():
            if key[0].startswith(LOAD_CLIENT):
                own[key[0]] = own.get(key[0], 0) + n
        self.assertEqual({k: n for k, n in own.items() if n > LOAD_REQUESTS_PER_CLIENT}, {})
        return counted, len(own)

    # ---- d. unreadable /proc entry ----

    def test_d_unreadable_proc_entry(self):
        c = self.cluster

        def stop_etcd():
            os.kill(self.etcd_pid(), signal.SIGTERM)
            c.etcd.wait(timeout=10)
            return time.monotonic()
        # etcd hidden, the API server captured; then etcd goes (the server's requests fail from
        # there on; the test ends).
        self.unreadable_proc_case(self.etcd_pid(), self.etcd_name, [self.name, self.etcd_name], None, stop_etcd)

    # ---- e. SIGTERM ----

    def test_e_sigterm_exits_within_1s(self):
        self.stop_under_load(signal.SIGTERM)


if __name__ == "__main__":
    unittest.main(verbosity=2)
