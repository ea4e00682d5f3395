"""End to end, as root: the agent as an operated process, without any target to attach to.

/metrics carries stormwatch_build_info (the version `stormwatch --version` prints) and the
standard process_* series, and no exposer_* ones; /debug/clients answers on the debug address
only, /healthz and /readyz on the health address only; --log-format json writes nothing but
JSON lines on stderr; an unsupported kernel (told with the hidden --assume-kernel-release) is
refused before anything listens, with one line and exit code 3.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import AGENT_BINARY, Agent, free_port, require_bpf_privileges  # noqa: E402
from cluster import Cluster  # noqa: E402

NO_TARGET = ["--target", "stormwatch-e2e-no-such-target"]
REFUSAL = ("stormwatch needs Linux >= 5.17 (bpf_loop) with BTF on x86_64; this node has kernel "
           "5.10.0-28-amd64: see README Requirements")


def listening_addresses(port):
    """Local addresses of the TCP sockets listening on `port` (from /proc/net/tcp)."""
    out = []
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            ip_hex, port_hex = fields[1].split(":")
            if int(port_hex, 16) == port and fields[3] == "0A":  # TCP_LISTEN
                ip = bytes.fromhex(ip_hex)[::-1]
                out.append(".".join(str(b) for b in ip))
    return out


class AgentOps(unittest.TestCase):
    def setUp(self):
        require_bpf_privileges(self)
        self.workdir = tempfile.mkdtemp(prefix="stormwatch-ops-")

    def start(self, extra=(), env=None):
        agent = Agent(self.workdir, extra_args=[*NO_TARGET, *extra], env=env)
        self.started_at = time.time()
        agent.start()
        self.addCleanup(agent.stop)
        deadline = time.monotonic() + 20
        while True:
            if agent.proc.poll() is not None:
                self.fail("agent exited (%s): %s" % (agent.proc.returncode, agent.stderr()))
            try:
                agent.metrics()
                return agent
            except OSError:
                if time.monotonic() > deadline:
                    self.fail("no /metrics in 20 s: %s" % agent.stderr())
                time.sleep(0.1)

    def test_build_info_and_process_series(self):
        version = subprocess.run([AGENT_BINARY, "--version"], capture_output=True, text=True,
                                 check=True).stdout.split()
        self.assertEqual(version[0], "stormwatch")
        agent = self.start()
        series = agent.metrics()
        info = [l for n, l, v in series if n == "stormwatch_build_info" and v == 1]
        self.assertEqual(len(info), 1, info)
        self.assertEqual(sorted(info[0]), ["commit", "kernel", "libbpf", "version"])
        for key, value in info[0].items():
            self.assertNotEqual(value, "", key)
        self.assertEqual(info[0]["version"], version[1])
        self.assertEqual(info[0]["kernel"], os.uname().release)
        self.assertRegex(info[0]["libbpf"], r"^\d+\.\d+$")
        print("\nbuild info: %s" % info[0], file=sys.stderr)

        values = {n: v for n, l, v in series if n.startswith("process_")}
        self.assertEqual(sorted(values), ["process_cpu_seconds_total", "process_max_fds",
                                          "process_open_fds", "process_resident_memory_bytes",
                                          "process_start_time_seconds",
                                          "process_virtual_memory_bytes"])
        # The agent's own process: started when we started it, its fds as /proc counts them.
        self.assertLess(abs(values["process_start_time_seconds"] - self.started_at), 1.0)
        # Its count, not ours: within the few it opens and closes all the time (the scrape's own
        # socket, /proc scans for targets); the unit tests check +1 per file exactly.
        open_fds = len(os.listdir("/proc/%d/fd" % agent.proc.pid))
        self.assertLessEqual(abs(values["process_open_fds"] - open_fds), 10, (values, open_fds))
        with open("/proc/%d/status" % agent.proc.pid) as f:
            rss_kb = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
        self.assertLess(abs(values["process_resident_memory_bytes"] - rss_kb * 1024),
                        0.2 * rss_kb * 1024)
        self.assertGreater(values["process_virtual_memory_bytes"],
                           values["process_resident_memory_bytes"])
        self.assertGreater(values["process_max_fds"], values["process_open_fds"])
        # prometheus-cpp's Exposer series are gone with the Exposer.
        self.assertEqual([n for n, _, _ in series if "exposer" in n], [])
        # Bound to loopback as asked (the chart puts it behind kube-rbac-proxy this way).
        self.assertEqual(listening_addresses(agent.metrics_port), ["127.0.0.1"])

    def test_heap_pages_reported_at_start(self):
        """As deployed (GLIBC_TUNABLES from the chart) the start log says the heap is on huge
        pages; without it, it says what to set. Which one depends on this kernel's THP mode."""
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read().split("[")[1].split("]")[0]

        def heap_lines(agent):
            self.assertEqual(agent.stop(), 0)
            return [l for l in agent.stderr().splitlines() if "heap on" in l]

        deployed = heap_lines(self.start())
        bare = heap_lines(self.start(env={"GLIBC_TUNABLES": None}))
        self.assertEqual(len(deployed), 1, deployed)
        self.assertEqual(len(bare), 1, bare)
        if mode == "madvise":
            self.assertIn("[info] heap on transparent huge pages (THP mode madvise, glibc.malloc.hugetlb set)",
                          deployed[0])
            self.assertIn("[warning] heap on 4 KiB pages (THP mode madvise): set GLIBC_TUNABLES=glibc.malloc.hugetlb=1",
                          bare[0])
        elif mode == "always":
            self.assertIn("heap on transparent huge pages (THP mode always", deployed[0])
            self.assertIn("heap on transparent huge pages (THP mode always)", bare[0])
        else:
            self.assertIn("transparent huge pages are off on this node", deployed[0])
        print("\nTHP mode %s: %s | %s" % (mode, deployed[0], bare[0]), file=sys.stderr)

    def test_debug_endpoints_only_on_the_debug_address(self):
        agent = self.start()
        self.assertEqual(agent.health("/debug/clients")[0], 404)
        status, body = agent.debug("/debug/clients")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body), [])
        self.assertEqual(agent.debug("/healthz")[0], 404)
        self.assertEqual(agent.debug("/readyz")[0], 404)
        self.assertEqual(agent.health("/healthz")[0], 200)
        self.assertIn(agent.health("/readyz")[0], (200, 503))
        self.assertEqual(listening_addresses(agent.debug_port), ["127.0.0.1"])

    def test_debug_and_health_on_one_address(self):
        port = free_port()
        agent = self.start(["--health-address", "127.0.0.1:%d" % port,
                            "--debug-address", "127.0.0.1:%d" % port])
        self.assertEqual(agent.health("/debug/clients", port=port)[0], 200)
        self.assertEqual(agent.health("/healthz", port=port)[0], 200)

    def test_debug_address_disabled(self):
        agent = self.start(["--debug-address="])
        self.assertEqual(listening_addresses(agent.debug_port), [])
        self.assertEqual(agent.health("/debug/clients")[0], 404)

    def test_json_logs_every_line_parses(self):
        agent = self.start(["--log-format", "json", "--log-level", "debug"])
        time.sleep(2)
        self.assertEqual(agent.stop(), 0)
        lines = agent.stderr().splitlines()
        self.assertGreater(len(lines), 3, lines)
        for line in lines:
            doc = json.loads(line)
            self.assertEqual(sorted(doc), ["level", "logger", "msg", "time"], line)
            self.assertRegex(doc["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertIn(doc["level"], ("trace", "debug", "info", "warning", "error", "critical"))
        msgs = [json.loads(l)["msg"] for l in lines]
        self.assertTrue(any(m.startswith("stopping:") for m in msgs), msgs)
        print("\n%d JSON log lines, e.g. %s" % (len(lines), lines[0]), file=sys.stderr)

    def refused(self, extra):
        metrics_port = free_port()
        start = time.monotonic()
        proc = subprocess.run([AGENT_BINARY, *NO_TARGET, "--metrics-address",
                               "127.0.0.1:%d" % metrics_port, "--health-address", "",
                               "--debug-address", "", "--assume-kernel-release",
                               "5.10.0-28-amd64", *extra],
                              capture_output=True, text=True, timeout=30)
        return proc, time.monotonic() - start

    def test_unsupported_kernel_is_refused_with_one_line(self):
        proc, took = self.refused([])
        self.assertEqual(proc.returncode, 3, proc.stderr)
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertTrue(lines[0].endswith(REFUSAL), lines)
        self.assertIn("critical", lines[0])
        self.assertEqual(proc.stdout, "")
        self.assertLess(took, 5)

        proc, _ = self.refused(["--log-format", "json"])
        self.assertEqual(proc.returncode, 3, proc.stderr)
        doc = json.loads(proc.stderr)
        self.assertEqual((doc["level"], doc["msg"]), ("critical", REFUSAL))


class ExemptClientCounter(unittest.TestCase):
    """stormwatch_exempt_client_requests_total counts a system:masters client's requests, one by
    one, as the server served them (it replaced a per-second gauge)."""

    def setUp(self):
        require_bpf_privileges(self)
        self.cluster = Cluster().start()
        self.addCleanup(self.cluster.stop)

    def exempt_counts(self, agent, client):
        return {l["reason"]: v for n, l, v in agent.metrics()
                if n == "stormwatch_exempt_client_requests_total" and l["client"] == client}

    def served(self, client):
        return sum(r["count"] for r in self.cluster.server_counts() if r["client"] == client)

    def test_counts_every_request_of_a_masters_client(self):
        c = self.cluster
        agent = Agent(c.tmp, extra_args=["--pid", str(c.apiserver_pid)]).start()
        self.addCleanup(agent.stop)
        agent.wait_attached(1)
        time.sleep(0.5)
        cert, key = c.client_cert("ci-deployer", ["system:masters"])
        kubeconfig = c.kubeconfig_cert(cert, key)
        for rounds in (3, 5):
            for _ in range(rounds):
                r = c.kubectl("get", "configmaps", "-A", kubeconfig=kubeconfig)
                self.assertEqual(r.returncode, 0, r.stderr)
            want = self.served("ci-deployer")
            deadline = time.monotonic() + 10
            while (self.exempt_counts(agent, "ci-deployer").get("system_masters") != want
                   and time.monotonic() < deadline):
                time.sleep(0.2)
            got = self.exempt_counts(agent, "ci-deployer")
            print("\nafter %d more kubectl runs: served %d, exempt counter %s" % (rounds, want, got),
                  file=sys.stderr)
            self.assertEqual(got.get("system_masters"), want)
            # Served at the exempt level too when the agent knows the level's name: the same count.
            self.assertIn(got.get("priority_level_exempt", want), (want,))


if __name__ == "__main__":
    unittest.main()
