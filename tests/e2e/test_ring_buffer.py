"""End to end, as root: the agent's ring buffer at 15,000 requests/s, and overloaded.

2 cores cannot serve 15k real requests/s, so tests/ring_flood writes them: a
BPF_PROG_TYPE_SYSCALL program (run with bpf_prog_test_run_opts, bpf_loop inside) that puts
captured HTTP/2 requests -- the sw_h2_request + sw_h2_response events bpf/gohttp.bpf.c sends for
an anonymous `kubectl get configmap cm-NNNNN` -- into the real agent's own `events` ring buffer
and counts what finds no room in the agent's own `drops` map (both found among the agent's file
descriptors and reused by fd), paced from user space. The agent is the real binary, attached to
nothing else, draining and decoding the ring as it does the uprobes' events.

What must hold, exactly, in the agent's own /metrics:
  * at 15k requests/s for 12 s: every request counted in stormwatch_requests_total (and its
    duration histogram and APF family), 0 ring_buffer_full, no other capture loss;
  * with the agent stopped (SIGSTOP) while 15k/s keep coming: the ring fills to its byte
    capacity, then every request that finds no room is counted: offered = delivered +
    ring_buffer_full / 2 (ring_flood gives up a request's two events together, one drop each);
    after SIGCONT the agent is healthy and counts the next 15k/s without loss;
  * unpaced (as fast as ring_flood goes): the same identity, whatever the agent keeps up with.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import BUILD_DIR, Agent, require_bpf_privileges  # noqa: E402

RING_FLOOD = os.environ.get("STORMWATCH_RING_FLOOD", os.path.join(BUILD_DIR, "tests", "ring_flood"))
RATE = 15000
RING_BYTES = 16 << 20  # the agent's default --ring-buffer-bytes
# stormwatch_requests_total's labels for ring_flood's requests, as apiserver_request_total
# would count `kubectl get configmap cm-NNNNN` without credentials.
KEY = ("system:anonymous", "GET", "", "v1", "configmaps", "", "resource", "200")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def ring_record_bytes(event_bytes):
    """Bytes one event takes in a BPF ring buffer: an 8-byte header, rounded up to 8."""
    return (event_bytes + 8 + 7) // 8 * 8


class RingBufferEndToEnd(unittest.TestCase):
    def setUp(self):
        require_bpf_privileges(self)
        self.assertTrue(os.access(RING_FLOOD, os.X_OK), "ring_flood not built: %s" % RING_FLOOD)
        self.tmp = tempfile.mkdtemp(prefix="stormwatch-ring-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # Attached to nothing: ring_flood is the only writer of the ring.
        self.agent = Agent(self.tmp, extra_args=["--target", "stormwatch-ring-test-none"]).start()
        self.addCleanup(self.agent.stop)
        # Never leave a stopped agent behind a failed assertion.
        self.addCleanup(self._continue_agent)
        deadline = time.monotonic() + 20
        while True:  # ready: BPF loaded, the ring buffer there to be found
            if self.agent.proc.poll() is not None:
                self.fail("agent exited: %s" % self.agent.stderr())
            try:
                if self.agent.health("/readyz")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.fail("agent not ready in 20 s: %s" % self.agent.stderr())
            time.sleep(0.1)
        self.seq = 0

    def _continue_agent(self):
        if self.agent.proc and self.agent.proc.poll() is None:
            os.kill(self.agent.proc.pid, signal.SIGCONT)

    # --- the generator and the agent's figures ---

    def flood(self, rate, seconds):
        r = subprocess.run([RING_FLOOD, "--agent-pid", str(self.agent.proc.pid), "--rate", str(rate),
                            "--seconds", str(seconds), "--first-seq", str(self.seq)],
                           capture_output=True, text=True, timeout=seconds + 60)
        self.assertEqual(r.returncode, 0, "ring_flood failed: %s" % r.stderr)
        out = json.loads(r.stdout)
        self.seq += out["offered"]
        # The generator's own books: every request either went into the ring or was counted.
        self.assertEqual(out["submitted"] + out["dropped"], out["offered"], out)
        self.assertEqual(out["ring_buffer_full_counted"], 2 * out["dropped"], out)
        self.assertEqual(out["ring_bytes"], RING_BYTES, out)
        return out

    def figures(self):
        """The agent's counters for ring_flood's requests."""
        f = {"requests": {}, "lost": {}, "apf": 0, "durations": 0}
        for name, labels, value in self.agent.metrics():
            if name == "stormwatch_requests_total":
                key = tuple(labels.get(k, "") for k in ("client", "verb", "group", "version",
                                                        "resource", "subresource", "scope", "code"))
                f["requests"][key] = f["requests"].get(key, 0) + int(value)
            elif name == "stormwatch_capture_lost_total":
                f["lost"][labels["cause"]] = f["lost"].get(labels["cause"], 0) + int(value)
            elif name == "stormwatch_apf_requests_total":
                f["apf"] += int(value)
            elif name == "stormwatch_request_duration_seconds_count":
                f["durations"] += int(value)
        f["delivered"] = f["requests"].get(KEY, 0)
        f["ring_buffer_full"] = f["lost"].get("ring_buffer_full", 0)
        return f

    def settle(self, delivered, ring_buffer_full, timeout=20):
        """Waits until the agent counts `delivered` requests and `ring_buffer_full` drops, then one
        more publishing second, and returns its figures (which must still be those)."""
        deadline = time.monotonic() + timeout
        while True:
            f = self.figures()
            if f["delivered"] >= delivered and f["ring_buffer_full"] >= ring_buffer_full:
                break
            if time.monotonic() > deadline:
                self.fail("agent counted %d requests, %d ring_buffer_full; expected %d, %d"
                          % (f["delivered"], f["ring_buffer_full"], delivered, ring_buffer_full))
            time.sleep(0.1)
        time.sleep(1.2)  # losses are published once a second: one more, nothing must move
        f = self.figures()
        self.assertEqual(f["delivered"], delivered)
        self.assertEqual(f["ring_buffer_full"], ring_buffer_full)
        return f

    def assert_only(self, f, delivered, ring_buffer_full):
        """Exactly ring_flood's requests, and no loss but ring_buffer_full."""
        self.assertEqual(f["requests"], {KEY: delivered} if delivered else {})
        self.assertEqual(f["apf"], delivered)       # every response carries its APF UIDs
        self.assertEqual(f["durations"], delivered)  # one latency each
        self.assertEqual({c: n for c, n in f["lost"].items() if n},
                         {"ring_buffer_full": ring_buffer_full} if ring_buffer_full else {})

    def assert_healthy(self):
        self.assertIsNone(self.agent.proc.poll(), self.agent.stderr())
        deadline = time.monotonic() + 5
        while self.agent.health("/healthz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.agent.health("/healthz")[0], 200)

    def agent_cpu_s(self):
        with open("/proc/%d/stat" % self.agent.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime

    def stop_agent(self):
        os.kill(self.agent.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        task_dir = "/proc/%d/task" % self.agent.proc.pid
        while True:  # every thread stopped: nothing drains the ring any more
            states = []
            for t in os.listdir(task_dir):
                with open(os.path.join(task_dir, t, "stat")) as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            if all(s == "T" for s in states):
                return
            self.assertLess(time.monotonic(), deadline, "agent not stopped: %s" % states)
            time.sleep(0.01)

    def report(self, phase, flood, delivered, drops, cpu_s=None):
        line = ("\n%s: offered %d requests in %.2f s (%.0f/s); delivered %d; dropped %d "
                "(ring_buffer_full %d)" % (phase, flood["offered"], flood["seconds"],
                                           flood["offered_per_second"], delivered,
                                           flood["offered"] - delivered, drops))
        if cpu_s is not None:
            line += "; agent CPU %.2f s = %.1f%% of a core, %.2f us/request" % (
                cpu_s, 100 * cpu_s / flood["seconds"], 1e6 * cpu_s / max(delivered, 1))
        line += "; generator CPU %.2f s user + %.2f s sys" % (flood["cpu_user_s"], flood["cpu_sys_s"])
        print(line, file=sys.stderr)

    # --- the tests ---

    def test_15k_requests_per_second_nothing_dropped(self):
        seconds = 12
        cpu_before = self.agent_cpu_s()
        flood = self.flood(RATE, seconds)
        # Offered as asked: RATE per second for `seconds`, not a burst at the end.
        self.assertEqual(flood["offered"], RATE * seconds)
        self.assertLess(flood["seconds"], seconds + 0.5)
        self.assertEqual(flood["dropped"], 0, flood)
        f = self.settle(RATE * seconds, 0)
        cpu_s = self.agent_cpu_s() - cpu_before  # with settle's idle second (a tick: ~nothing)
        self.report("15k/s", flood, f["delivered"], f["ring_buffer_full"], cpu_s)
        self.assert_only(f, RATE * seconds, 0)
        self.assert_healthy()

    def test_overload_drops_are_counted_and_the_agent_recovers(self):
        # 1. The agent stopped for 4 s while 15k/s keep coming: 60,000 requests, more than
        #    16 MiB holds. The ring fills to its last whole request, and every later one is lost
        #    and counted.
        self.stop_agent()
        try:
            stopped = self.flood(RATE, 4)
        finally:
            os.kill(self.agent.proc.pid, signal.SIGCONT)
        pair = (ring_record_bytes(stopped["request_event_bytes"]) +
                ring_record_bytes(stopped["response_event_bytes"]))
        # The kernel keeps the producer at most size - 1 bytes ahead of the consumer.
        self.assertEqual(stopped["submitted"], (RING_BYTES - 1) // pair, stopped)
        self.assertGreater(stopped["dropped"], 0)
        f = self.settle(stopped["submitted"], 2 * stopped["dropped"])
        self.assertEqual(stopped["offered"], f["delivered"] + f["ring_buffer_full"] // 2)
        self.report("agent stopped", stopped, f["delivered"], f["ring_buffer_full"])
        self.assert_only(f, stopped["submitted"], 2 * stopped["dropped"])
        self.assert_healthy()

        # 2. Running again: 15k/s for 3 s, all counted, no new drop.
        cpu_before = self.agent_cpu_s()
        after = self.flood(RATE, 3)
        self.assertEqual(after["dropped"], 0, after)
        delivered = stopped["submitted"] + after["offered"]
        f = self.settle(delivered, 2 * stopped["dropped"])
        self.report("15k/s after SIGCONT", after, after["offered"], 0, self.agent_cpu_s() - cpu_before)
        self.assert_only(f, delivered, 2 * stopped["dropped"])

        # 3. Unpaced: as fast as ring_flood writes, whatever the agent drains; drops counted.
        cpu_before = self.agent_cpu_s()
        unpaced = self.flood(0, 3)
        drops = 2 * (stopped["dropped"] + unpaced["dropped"])
        f = self.settle(delivered + unpaced["submitted"], drops)
        self.assertEqual(stopped["offered"] + after["offered"] + unpaced["offered"],
                         f["delivered"] + f["ring_buffer_full"] // 2)
        self.report("unpaced", unpaced, unpaced["submitted"], 2 * unpaced["dropped"],
                    self.agent_cpu_s() - cpu_before)
        self.assert_only(f, delivered + unpaced["submitted"], drops)
        self.assert_healthy()


if __name__ == "__main__":
    unittest.main()
