"""End to end, as root: a big target is planned while the ring buffer runs at 15,000 requests/s.

Planning a target reads its whole Go binary (ELF, .gopclntab, the runtime type data, probe
sites). The agent does it on a planner thread, so the main loop keeps draining the ring buffer
every 10 ms while it runs; planned on the main loop, the drain stops for the plan's length.

The target is the largest real Go server of the build, the upstream apiextensions-apiserver,
copied under a name of its own and stopped (SIGSTOP) as soon as it has exec'd: what is planned
and attached is the binary, the process need not serve (nor take a core from the agent). tests/ring_flood writes 15k requests/s
into the agent's own ring buffer meanwhile (see test_ring_buffer.py). The ring is given
RING_BYTES: it holds ~RING_MS of the flood, far more than the agent's drain ever pauses when it
is not planning, and less than this binary's plan: a plan on the main loop overflows it.

What must hold, exactly: the target is attached (stormwatch_target_info, /readyz) while the
flood still runs, having been reported "planning NAME pid N" by /readyz until then; every
request the flood offered is counted, 0 ring_buffer_full; stormwatch_target_planning_seconds
has the one plan.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import Agent, free_port, require_bpf_privileges  # noqa: E402
from cluster import default_go_out  # noqa: E402
import test_ring_buffer as ring  # noqa: E402  (its helpers; its tests are not collected here)

RATE = 15000
FLOOD_S = 8           # the target starts after 1.5 s: detection (<= 1 s) + the plan fit inside
TARGET_AFTER_S = 1.5
RING_BYTES = 1 << 20  # 1 MiB: 1,524 requests of 688 bytes, ~100 ms at 15k/s
NAME = "sw-planning-apiserver"


class PlanningEndToEnd(unittest.TestCase):
    def setUp(self):
        require_bpf_privileges(self)
        self.assertTrue(os.access(ring.RING_FLOOD, os.X_OK), "ring_flood not built: %s" % ring.RING_FLOOD)
        source = os.path.join(default_go_out(), "apiextensions-apiserver")
        self.assertTrue(os.path.isfile(source), "not built: %s (cmake target apiextensions-apiserver)" % source)
        self.tmp = tempfile.mkdtemp(prefix="stormwatch-planning-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.binary = os.path.join(self.tmp, NAME)
        shutil.copy(source, self.binary)
        self.binary_bytes = os.path.getsize(self.binary)
        self.target = None
        self.addCleanup(self._kill_target)
        self.agent = Agent(self.tmp, extra_args=["--target", NAME, "--ring-buffer-bytes", str(RING_BYTES)]).start()
        self.addCleanup(self.agent.stop)
        deadline = time.monotonic() + 20
        while True:  # ready: BPF loaded, no target yet
            self.assertIsNone(self.agent.proc.poll(), self.agent.stderr())
            try:
                if self.agent.health("/readyz")[0] == 200:
                    break
            except OSError:
                pass
            self.assertLess(time.monotonic(), deadline, "agent not ready: %s" % self.agent.stderr())
            time.sleep(0.1)

    def _kill_target(self):
        if self.target and self.target.poll() is None:
            self.target.kill()
            self.target.wait()

    def start_target(self):
        # Arguments it runs with for ~10 s before giving up on its unreachable etcd and
        # delegating server; stopped at once anyway. Popen returns once the child has exec'd (its
        # close-on-exec error pipe closed): the binary is already the process's executable.
        kubeconfig = os.path.join(self.tmp, "nowhere.kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\n"
                    "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                    "users: [{name: u, user: {token: x}}]\n"
                    "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n")
        self.target = subprocess.Popen(
            [self.binary, "--etcd-servers", "http://127.0.0.1:1", "--bind-address", "127.0.0.1",
             "--secure-port", str(free_port()), "--cert-dir", os.path.join(self.tmp, "certs"),
             "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
             "--kubeconfig", kubeconfig, "--authentication-tolerate-lookup-failure"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.kill(self.target.pid, signal.SIGSTOP)
        return self.target.pid

    def target_info(self, pid):
        return [l for n, l, v in self.agent.metrics()
                if n == "stormwatch_target_info" and v == 1 and l["pid"] == str(pid)]

    def figures(self):
        f = {"requests": {}, "lost": {}}
        for name, labels, value in self.agent.metrics():
            if name == "stormwatch_requests_total":
                key = tuple(labels.get(k, "") for k in ("client", "verb", "group", "version",
                                                        "resource", "subresource", "scope", "code"))
                f["requests"][key] = f["requests"].get(key, 0) + int(value)
            elif name == "stormwatch_capture_lost_total" and value:
                f["lost"][labels["cause"]] = f["lost"].get(labels["cause"], 0) + int(value)
        return f

    def test_a_big_target_is_planned_without_stalling_the_drain(self):
        flood = subprocess.Popen([ring.RING_FLOOD, "--agent-pid", str(self.agent.proc.pid),
                                  "--rate", str(RATE), "--seconds", str(FLOOD_S)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(TARGET_AFTER_S)
            started = time.monotonic()
            pid = self.start_target()
            planning_seen = attached_at = None
            polls = 0
            while flood.poll() is None:
                # /readyz every 5 ms (the plan takes ~0.1-0.3 s), /metrics less often.
                status, body = self.agent.health("/readyz")
                if body == "planning %s pid %d\n" % (NAME, pid) and planning_seen is None:
                    self.assertEqual(status, 503)
                    planning_seen = time.monotonic() - started
                polls += 1
                if (status == 200 and planning_seen is not None) or polls % 20 == 0:
                    if self.target_info(pid):
                        attached_at = time.monotonic() - started
                        break
                time.sleep(0.005)
            flood_running_at_attach = flood.poll() is None
            out, err = flood.communicate(timeout=FLOOD_S + 60)
        finally:
            if flood.poll() is None:
                flood.kill()
                flood.wait()
        self.assertEqual(flood.returncode, 0, "ring_flood failed: %s" % err)
        flood_out = json.loads(out)
        self.assertEqual(flood_out["ring_bytes"], RING_BYTES, flood_out)

        # The drain never stopped: every request offered is counted, none dropped.
        offered = flood_out["offered"]
        self.assertEqual(offered, RATE * FLOOD_S)
        deadline = time.monotonic() + 20
        while self.figures()["requests"].get(ring.KEY, 0) < offered - flood_out["dropped"]:
            self.assertLess(time.monotonic(), deadline, self.figures())
            time.sleep(0.1)
        time.sleep(1.2)  # losses are published once a second: one more, nothing must move
        f = self.figures()
        plan_lines = [l for l in self.agent.stderr().splitlines() if "planned %s pid" % NAME in l]
        holds = (RING_BYTES - 1) // (ring.ring_record_bytes(flood_out["request_event_bytes"]) +
                                     ring.ring_record_bytes(flood_out["response_event_bytes"]))
        print("\n%s: %.1f MB; %s; ring holds %d requests (%.0f ms of the flood); flood: offered %d, "
              "delivered %d, dropped %d (ring_buffer_full %d); attached %.2f s after start, "
              "'planning' in /readyz at %s s"
              % (NAME, self.binary_bytes / 1e6, plan_lines[-1].split("] ")[-1] if plan_lines else "no plan line",
                 holds, 1000.0 * holds / RATE, offered, f["requests"].get(ring.KEY, 0), flood_out["dropped"],
                 f["lost"].get("ring_buffer_full", 0), attached_at or -1,
                 "%.2f" % planning_seen if planning_seen is not None else "never"), file=sys.stderr)
        self.assertEqual(flood_out["dropped"], 0, flood_out)
        self.assertEqual(f["requests"], {ring.KEY: offered})
        self.assertEqual(f["lost"], {})

        # Attached while the flood ran, and reported as planning until then.
        self.assertIsNotNone(attached_at, "not attached during the flood: %s" % self.agent.stderr())
        self.assertTrue(flood_running_at_attach)
        info = self.target_info(pid)
        self.assertEqual(len(info), 1, info)
        self.assertEqual((info[0]["target"], info[0]["status"], info[0]["reason"], info[0]["stack"],
                          info[0]["role"]), (NAME, "attached", "", "x/net,std", "apiserver"), info)
        self.assertTrue(info[0]["go_version"].startswith("go1.26."), info)
        self.assertEqual(self.agent.metric_value("stormwatch_targets_attached"), 1)
        self.assertEqual(self.agent.health("/readyz"), (200, "ready\n"))
        self.assertIsNotNone(planning_seen, "/readyz never said it was planning %s" % NAME)

        # One plan, timed by the agent, as the log says.
        self.assertEqual(len(plan_lines), 1, self.agent.stderr())
        self.assertEqual(self.agent.metric_value("stormwatch_target_planning_seconds_count", target=NAME), 1)
        seconds = self.agent.metric_value("stormwatch_target_planning_seconds_sum", target=NAME)
        logged = re.search(r"planned %s pid %d in ([0-9.]+) s" % (NAME, pid), plan_lines[0])
        self.assertIsNotNone(logged, plan_lines[0])
        self.assertAlmostEqual(float(logged.group(1)), seconds, delta=0.0005)
        self.assertGreater(seconds, 0)


if __name__ == "__main__":
    unittest.main()
