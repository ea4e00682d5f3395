"""End to end, as root: one reproduction per incident of STORMS.md against the test API server
(TLS, real etcd) with real clients, caught by the real agent; and three minutes of healthy
traffic that must raise nothing.

Each storm scenario starts its own cluster and agent, starts the storm's client, measures
the delay from the storm's onset to the alert line and prints it, asserts who the alert names
(user or service account and pod, user agent), the group/resource, that the alert resolves
once the storm stops, and that no other storm fired. Detector thresholds are STORMS.md's
defaults except where a scenario says why.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import AGENT_BINARY, Agent, require_bpf_privileges  # noqa: E402
from cluster import Cluster  # noqa: E402
from counts import count_map, delta  # noqa: E402

HUMAN_NS, HUMAN_SA = "default", "ops-engineer"
HUMAN = "system:serviceaccount:%s:%s" % (HUMAN_NS, HUMAN_SA)
DATAJOBS = ("batch.company.com", "datajobs")
# Margin over a detector's sustain window for the alert line to appear: the 1 s buckets, the
# detector tick and the alert write, on a busy 2-core machine.
ALERT_MARGIN_S = 6.0
RESOLVE_MARGIN_S = 15.0


def service_account(ns, name):
    return "system:serviceaccount:%s:%s" % (ns, name)


def kube_list(items):
    """A kubectl-creatable List of objects."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


class StormScenarios(unittest.TestCase):
    maxDiff = None  # count mismatches print in full

    def setUp(self):
        require_bpf_privileges(self)
        self.agent = None
        self.cluster = None

    def tearDown(self):
        if self.agent:
            self.agent.stop()
            if self._outcome_failed():
                print("agent stderr:\n" + self.agent.stderr()[-4000:], file=sys.stderr)
                print("alerts:\n" + "\n".join(json.dumps(a) for a in self.agent.alerts), file=sys.stderr)
            else:
                self.check_replay()

    def check_replay(self):
        """The agent recorded what it saw (--record): replayed offline through the same pipeline
        and detectors, the recording raises the same storms for the same clients and resources."""
        argv = [AGENT_BINARY, "replay", self.record_path, "--no-metrics"]
        if self.config_path:
            argv += ["--config", self.config_path]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        replayed = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]

        def firing(alerts):
            return sorted({(a["storm"], a["client"], a.get("group", ""), a.get("resource", ""))
                           for a in alerts if a["state"] == "firing"})
        self.assertEqual(firing(replayed), firing(self.agent.alerts),
                         "replay of %s: %s" % (self.record_path, r.stderr))
        print("replay of the recording (%d bytes): %s; %s" % (os.path.getsize(self.record_path),
                                                               firing(replayed), r.stderr.strip()),
              file=sys.stderr)

    def _outcome_failed(self):
        result = getattr(self, "_outcome", None)
        errors = getattr(getattr(result, "result", None), "errors", []) or []
        failures = getattr(getattr(result, "result", None), "failures", []) or []
        return any(t is self for t, _ in errors + failures)

    # ---- set-up ----

    def start_cluster(self, apiserver_args=()):
        self.cluster = Cluster(apiserver_args=apiserver_args).start()
        self.addCleanup(self.cluster.stop)
        self.human = self.cluster.kubeconfig(self.cluster.mint_token(HUMAN_NS, HUMAN_SA))
        return self.cluster

    def kubectl(self, *args, input=None):
        r = self.cluster.kubectl(*args, kubeconfig=self.human, input=input, timeout=120)
        self.assertEqual(r.returncode, 0, "kubectl %s: %s" % (" ".join(args), r.stderr))
        return r.stdout

    def start_agent(self, config=None, etcd=False):
        """The agent on this test's API server (and its etcd: etcd=True) only; config: YAML text
        for --config."""
        self.record_path = os.path.join(self.cluster.tmp, "capture.swcap")
        self.config_path = None
        pids = [self.cluster.apiserver_pid] + ([self.cluster.etcd.pid] if etcd else [])
        args = ["--pid", ",".join(map(str, pids)), "--record", self.record_path]
        if config:
            path = os.path.join(self.cluster.tmp, "stormwatch.yaml")
            with open(path, "w") as f:
                f.write(config)
            args += ["--config", path]
            self.config_path = path
        self.agent = Agent(self.cluster.tmp, extra_args=args).start()
        self.agent.wait_attached(len(pids))
        time.sleep(0.5)  # nothing in flight: server counts from here on are the agent's

    # ---- alerts ----

    def wait_firing(self, storm, onset, sustain_s):
        """The first firing line of storm; fails after sustain_s + margin. Prints and returns
        (line, delay since onset)."""
        doc, at = self.agent.wait_alert(
            lambda a: a["storm"] == storm and a["state"] == "firing",
            timeout=max(0.0, onset + sustain_s + ALERT_MARGIN_S - time.monotonic()))
        self.assertIsNotNone(doc, "no %s alert within %.0f s of the onset; alerts: %s"
                             % (storm, sustain_s + ALERT_MARGIN_S, self.agent.alerts))
        delay = at - onset
        print("\n%s alert %.2f s after the storm started (sustain %d s)" % (storm, delay, sustain_s),
              file=sys.stderr)
        return doc, delay

    def wait_resolved(self, firing, stopped, resolve_s):
        """The resolved line matching a firing one; prints the delay since the storm stopped."""
        key = (firing["storm"], firing["client"], firing["group"], firing["resource"])
        doc, at = self.agent.wait_alert(
            lambda a: a["state"] == "resolved" and (a["storm"], a["client"], a["group"], a["resource"]) == key,
            timeout=max(0.0, stopped + resolve_s + RESOLVE_MARGIN_S - time.monotonic()))
        self.assertIsNotNone(doc, "%s never resolved; alerts: %s" % (key, self.agent.alerts))
        print("%s resolved %.2f s after the storm stopped (resolve window %d s)"
              % (firing["storm"], at - stopped, resolve_s), file=sys.stderr)
        return doc

    def assert_service_account(self, alert, ns, name, pod, user_agent_prefix):
        self.assertEqual(alert["client"], service_account(ns, name))
        identity = alert["identity"]
        self.assertEqual(identity["service_account"], {"namespace": ns, "name": name})
        self.assertEqual(identity["pod"], pod)
        self.assertTrue(identity["user_agent"].startswith(user_agent_prefix), identity)

    def assert_only(self, storms, clients):
        """Every alert line so far is one of storms, for one of clients; no other storm counted."""
        self.assertEqual({a["storm"] for a in self.agent.alerts} - set(storms), set(),
                         "other storms fired: %s" % self.agent.alerts)
        self.assertEqual({a["client"] for a in self.agent.alerts} - set(clients), set(),
                         "other clients named: %s" % self.agent.alerts)
        others = {l["storm"]: v for n, l, v in self.agent.metrics()
                  if n == "stormwatch_storms_total" and l.get("storm") not in storms and v}
        self.assertEqual(others, {})
        self.assertEqual(self.agent.metric_value("stormwatch_storm_active"), 0, "a storm is still active")

    @staticmethod
    def stop_client(proc):
        """SIGTERM, then the client's JSON summary (its last stdout line)."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        lines = out.strip().splitlines()
        return json.loads(lines[-1]) if lines else {}

    # ---- STORMS.md §2 (and §3): seed 002's LIST storm from an exempt client ----

    def test_list_storm(self):
        c = self.start_cluster()
        self.kubectl("create", "namespace", "shop")
        self.kubectl("create", "-f", "-", input=kube_list(
            [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-%02d" % i, "namespace": "shop"},
              "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}} for i in range(30)]
            + [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-%02d" % i}} for i in range(10)]))
        # Seed 002's agent ran with cluster-admin rights in system:masters: here a client
        # certificate O=system:masters (the test server gives service-account tokens no
        # extra groups), which APF classifies exempt.
        cert = c.client_cert("inventory-agent", ["system:masters"])
        kubeconfig = c.kubeconfig_cert(*cert)
        # etcd too (STORMS.md §7, the storage side of seed 002): each consistent LIST is one
        # Range of the whole prefix. The pods' ~21 KB a read, ~6 reads/s (3-5 on a loaded
        # machine), are a storm only against a lowered byte threshold (32 KiB/s: every second
        # of the sustain needs 2 reads; 50 MiB/s by default). At 64 KiB/s a second with 3 reads
        # (63 KB) restarted the sustain: the storm never fired while the client ran at 4.6/s.
        self.start_agent(etcd=True, config="detectors:\n  etcd_range_storm:\n    bytes_rate: 32768\n"
                                           "    sustain_s: 10\n    resolve_s: 10\n")

        onset = time.monotonic()
        # 3 replicas, a round every 0.5 s: ~6 LIST/s per resource, each weighing 2 (consistent,
        # unpaginated, cluster scope) against the 5/s threshold; ~12 requests/s in all, under
        # exempt_client's escalation rate (20/s).
        loop = c.run_python_list_loop(kubeconfig, threads=3, interval=0.5, duration=60)
        firing, _ = self.wait_firing("list_storm", onset, sustain_s=15)
        # Both polled resources are named, pods and nodes, within a second or two of each other.
        other, _ = self.agent.wait_alert(
            lambda a: a["storm"] == "list_storm" and a["state"] == "firing" and a["resource"] != firing["resource"],
            timeout=5)
        etcd_storm, _ = self.agent.wait_alert(
            lambda a: a["storm"] == "etcd_range_storm" and a["state"] == "firing", timeout=10)
        stopped = time.monotonic()
        summary = self.stop_client(loop)
        print("python client: %s" % summary, file=sys.stderr)

        # etcd's side: the pods prefix, read by the API server, caused by the client's LISTs.
        self.assertIsNotNone(etcd_storm, "no etcd_range_storm; alerts: %s" % self.agent.alerts)
        ev = etcd_storm["evidence"]
        self.assertEqual((etcd_storm["resource"], ev["key_prefix"], ev["etcd_client"]),
                         ("pods", "/registry/pods/", "kube-apiserver-etcd-client"), etcd_storm)
        self.assertEqual(etcd_storm["client"], "inventory-agent")
        self.assertEqual(ev["correlated_list_clients"][0]["client"], "inventory-agent", ev)
        self.assertIn("pods", ev["correlated_list_clients"][0]["resources"])
        self.assertGreater(ev["bytes_per_second"], 32768)
        print("etcd_range_storm: %s" % etcd_storm["summary"], file=sys.stderr)
        # The list_storm evidence says what each LIST read from etcd.
        pods = firing if firing["resource"] == "pods" else other
        self.assertIn("from etcd", pods["summary"], pods)

        for alert in (firing, other):
            self.assertIsNotNone(alert, "only %s was named; alerts: %s" % (firing["resource"], self.agent.alerts))
            self.assertEqual(alert["client"], "inventory-agent")
            identity = alert["identity"]
            self.assertTrue(identity.get("system_masters"), identity)
            self.assertIn("system:masters", identity["groups"])
            self.assertTrue(identity["user_agent"].startswith("OpenAPI-Generator/"), identity)
            self.assertEqual(alert["group"], "")
        self.assertEqual({firing["resource"], other["resource"]}, {"pods", "nodes"})
        self.assertTrue(firing["fix"])

        for alert in (firing, other):
            self.wait_resolved(alert, stopped, resolve_s=30)
        self.wait_resolved(etcd_storm, stopped, resolve_s=10)
        # The same client may also be reported as exempt (STORMS.md §3, seed 002 on its own).
        self.assert_only({"list_storm", "exempt_client", "etcd_range_storm"}, {"inventory-agent"})

    # ---- STORMS.md §4: seed 004's 409 storm ----

    def test_conflict_storm(self):
        c = self.start_cluster()
        self.kubectl("create", "namespace", "reports")
        ns, sa, pod = "reports", "report-operator", "report-operator-5d8f7c9b4-x2kq9"
        token = c.mint_token(ns, sa, pod=pod)
        self.start_agent()

        onset = time.monotonic()
        # 12 DataJobs x 2 workers x 1.5 writes/s: ~36 status writes/s, two thirds of them 409s
        # (~24/s), while each object sees 3 writes/s, under update_loop's 5/s.
        client = c.run_storm_client("conflict", "--namespace", ns, token_file=token, duration=120)
        firing, _ = self.wait_firing("conflict_storm", onset, sustain_s=30)
        stopped = time.monotonic()
        summary = self.stop_client(client)
        print("conflict client: %s" % summary, file=sys.stderr)
        requests = summary["requests"]
        self.assertGreaterEqual(requests["PUT 409"] / (requests["PUT 409"] + requests["PUT 200"]), 0.5)

        self.assert_service_account(firing, ns, sa, pod, "report-operator/")
        self.assertEqual((firing["group"], firing["resource"]), DATAJOBS)
        self.assertTrue(firing["fix"])
        self.wait_resolved(firing, stopped, resolve_s=30)
        self.assert_only({"conflict_storm"}, {service_account(ns, sa)})

    # ---- STORMS.md §4: 429s from API Priority and Fairness ----

    def test_throttled_client(self):
        # Service accounts land in the workload-low level: one seat there, requests that hold
        # it 200 ms (--test-delays) and a queue wait of 0.5 s (--request-timeout / 4) turn a
        # client's 16 concurrent requests into a steady flow of 429s.
        c = self.start_cluster(apiserver_args=("--test-delays", "--max-inflight-per-level", "workload-low=1",
                                               "--request-timeout", "2s"))
        self.kubectl("create", "namespace", "sync")
        ns, sa, pod = "sync", "batch-sync", "batch-sync-7c9f6d8b5-q4wzt"
        token = c.mint_token(ns, sa, pod=pod)
        self.start_agent()
        before = count_map(c.server_counts())

        onset = time.monotonic()
        client = c.run_storm_client("throttled", "--namespace", ns, token_file=token, duration=120)
        firing, _ = self.wait_firing("throttled_client", onset, sustain_s=10)
        stopped = time.monotonic()
        print("throttled client: %s" % self.stop_client(client), file=sys.stderr)
        rejected = sum(v for k, v in delta(count_map(c.server_counts()), before).items()
                       if k[1] == service_account(ns, sa) and k[-1] == "429")
        self.assertGreater(rejected, 10, "the server did not throttle the client")

        self.assert_service_account(firing, ns, sa, pod, "batch-sync/")
        self.wait_resolved(firing, stopped, resolve_s=30)
        self.assert_only({"throttled_client"}, {service_account(ns, sa)})

    # ---- STORMS.md §5: seed 003's stuck finalizers ----

    def test_stuck_finalizers(self):
        c = self.start_cluster()
        self.kubectl("create", "namespace", "exports")
        ns, sa, pod = "batch-system", "cleanup-controller", "cleanup-controller-6b8d9f7c5-hm2rx"
        self.kubectl("create", "namespace", ns)
        token = c.mint_token(ns, sa, pod=pod)
        # Five minutes (STORMS.md) is a CI run on its own: the scenario uses 10 s for "stuck"
        # and for "silent", both config values; the unit tests pin the defaults.
        self.start_agent(config="detectors:\n  stuck_finalizers:\n    stuck_after_s: 10\n    silent_after_s: 10\n    resolve_s: 10\n")
        pause = os.path.join(c.tmp, "controller-blocked")
        controller = c.run_storm_client("finalizer-controller", "--namespace", "exports", "--objects", "60",
                                        "--pause-file", pause, token_file=token, duration=180)
        next_object = iter(range(60))

        def delete_for(seconds):
            """A person deleting one DataJob a second with kubectl (not waiting for it to go)."""
            start = time.monotonic()
            for second in range(seconds):
                self.kubectl("delete", "datajob", "export-%02d" % next(next_object), "-n", "exports", "--wait=false")
                time.sleep(max(0.0, start + second + 1 - time.monotonic()))

        time.sleep(2)  # its objects exist
        delete_for(12)  # the controller keeps up: every deleted object goes away
        remaining = self.kubectl("get", "datajobs", "-n", "exports", "-o", "name").split()
        self.assertNotIn("datajob.batch.company.com/export-00", remaining)
        self.assertEqual(self.agent.alerts, [])

        open(pause, "w").close()  # the controller blocks on its external call
        onset = time.monotonic()
        done = threading.Event()
        deleter = threading.Thread(target=lambda: (delete_for(25), done.set()), daemon=True)
        deleter.start()
        firing, _ = self.wait_firing("stuck_finalizers", onset, sustain_s=10 + 10)
        deleter.join()
        terminating = self.kubectl("get", "datajobs", "-n", "exports", "-o",
                                   "jsonpath={range .items[?(@.metadata.deletionTimestamp)]}{.metadata.name} {end}").split()
        self.assertGreaterEqual(len(terminating), 10, "objects should be stuck Terminating")

        self.assert_service_account(firing, ns, sa, pod, "cleanup-controller/")
        self.assertEqual((firing["group"], firing["resource"]), DATAJOBS)
        self.assertTrue(firing["fix"])

        os.unlink(pause)  # unblocked: the backlog is finalized
        stopped = time.monotonic()
        self.wait_resolved(firing, stopped, resolve_s=10)
        print("controller: %s" % self.stop_client(controller), file=sys.stderr)
        self.assertEqual(self.kubectl("get", "datajobs", "-n", "exports", "-o",
                                      "jsonpath={.items[?(@.metadata.deletionTimestamp)].metadata.name}"), "")
        self.assert_only({"stuck_finalizers"}, {service_account(ns, sa)})

    # ---- STORMS.md §6: relist churn ----

    def test_relist_churn(self):
        c = self.start_cluster()
        self.kubectl("create", "namespace", "pipelines")
        ns, sa, pod = "monitoring", "flaky-informer", "flaky-informer-84c6d5f9b7-tl7vn"
        token = c.mint_token(ns, sa, pod=pod)
        # A sliding-window rule resolves only once its window has drained below the threshold
        # and then stayed calm for resolve_s (60 + 60 s by default): both shortened for CI time.
        self.start_agent(config="detectors:\n  relist_churn:\n    window_s: 30\n    resolve_s: 10\n")

        onset = time.monotonic()
        # LIST + WATCH?timeoutSeconds=1, then LIST again: ~1 relist/s; the detector wants 6 in
        # its (here 30 s) window, or 0.5 new WATCHes/s over it.
        client = c.run_storm_client("relist", "--namespace", "pipelines", "--watch-timeout", "1",
                                    token_file=token, duration=120)
        firing, _ = self.wait_firing("relist_churn", onset, sustain_s=10)
        stopped = time.monotonic()
        summary = self.stop_client(client)
        print("relist client: %s" % summary, file=sys.stderr)

        self.assert_service_account(firing, ns, sa, pod, "flaky-informer/")
        self.assertEqual((firing["group"], firing["resource"]), DATAJOBS)
        self.wait_resolved(firing, stopped, resolve_s=30 + 10)
        self.assert_only({"relist_churn"}, {service_account(ns, sa)})

    # ---- healthy traffic: nothing fires ----

    def test_healthy_traffic(self):
        c = self.start_cluster()
        self.kubectl("create", "namespace", "apps")
        self.kubectl("create", "-f", "-", input=kube_list(
            [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings-%03d" % i, "namespace": "apps"},
              "data": {"region": "eu-west-1", "replicas": str(i % 5)}} for i in range(600)]
            + [{"apiVersion": "batch.company.com/v1", "kind": "DataJob", "metadata": {"name": "nightly", "namespace": "apps"},
                "spec": {"image": "registry.company.com/etl:1.0", "schedule": "0 2 * * *"}}]))
        nodes = []
        for i in range(20):
            node = "node-%02d" % i
            crt, key = c.client_cert("system:node:" + node, ["system:nodes"])
            nodes += ["--node", "%s=%s:%s" % (node, crt, key)]
        controller_manager = c.client_cert("system:kube-controller-manager")
        collector = c.mint_token("monitoring", "metrics-collector", pod="metrics-collector-5f7b8c9d6-p9x2m")
        self.start_agent()
        before = count_map(c.server_counts())

        duration = 180
        clients = [
            # kubelets: node registration, then a lease renewal every 10 s each.
            c.run_storm_client("kubelets", *nodes, "--interval", "10s", duration=duration),
            # kube-controller-manager: 50 pods, every pod's status written in a burst every 30 s.
            c.run_storm_client("resync", "--namespace", "apps", "--pods", "50", "--interval", "30s",
                               cert=controller_manager, duration=duration),
            # An informer's start: LIST limit=500 + continue (601 configmaps: two pages), one WATCH.
            c.run_storm_client("informer", "--collection", "/api/v1/configmaps", "--collection", "/api/v1/pods",
                               token_file=collector, duration=duration),
        ]
        errors = []
        stop = threading.Event()

        def person():
            """kubectl now and then, and a rollout: a spec change then its status polled."""
            commands = [("get", "pods", "-n", "apps"), ("get", "configmaps", "-n", "apps"),
                        ("get", "datajobs", "-A"), ("get", "nodes")]
            i = 0
            while not stop.wait(7):
                cmds = [commands[i % len(commands)]]
                if i % 3 == 0:
                    cmds = [("patch", "datajob", "nightly", "-n", "apps", "--type", "merge",
                             "-p", '{"spec":{"image":"registry.company.com/etl:1.%d"}}' % i)] + \
                        [("get", "datajob", "nightly", "-n", "apps", "-o", "json")] * 3
                for cmd in cmds:
                    r = c.kubectl(*cmd, kubeconfig=self.human)
                    if r.returncode != 0:
                        errors.append(r.stderr)
                i += 1

        human = threading.Thread(target=person, daemon=True)
        human.start()
        time.sleep(duration)
        stop.set()
        human.join()
        summaries = [self.stop_client(p) for p in clients]
        self.assertEqual(errors, [])
        for p, s in zip(clients, summaries):
            self.assertEqual(p.returncode, 0, s)
            self.assertFalse([k for k in s["requests"] if not k.endswith((" 200", " 201"))], s)

        handled = delta(count_map(c.server_counts()), before)
        renewals = sum(v for k, v in handled.items() if k[2] == "PUT" and k[5] == "leases")
        resync_writes = sum(v for k, v in handled.items() if k[2] == "PUT" and k[5:7] == ("pods", "status"))
        print("\nhealthy traffic: %d requests in %d s (%d lease renewals, %d resync status writes), "
              "alerts: %d" % (sum(handled.values()), duration, renewals, resync_writes, len(self.agent.alerts)),
              file=sys.stderr)
        self.assertGreaterEqual(renewals, 20 * (duration // 10 - 2))  # every node renewed all along
        self.assertGreaterEqual(resync_writes, 50 * (duration // 30 - 1))  # every burst wrote every pod
        # The agent saw exactly this traffic, and flagged none of it. The server counts a request
        # when its handler returns: the informer's WATCHes, ended by its stop, are counted a
        # moment after the client has gone (the agent counted them at their response headers),
        # so the server's side is read again while the two differ.
        def served():
            return {k[1:]: v for k, v in delta(count_map(c.server_counts()), before).items()}
        expected = served()
        deadline = time.monotonic() + 10
        while self.agent.request_counts() != expected and time.monotonic() < deadline:
            time.sleep(0.2)
            expected = served()
        self.assertEqual(self.agent.request_counts(), expected,
                         "capture losses: %s" % self.agent.capture_losses())
        self.assertEqual(self.agent.alerts, [])
        self.assertEqual(self.agent.metric_value("stormwatch_storms_total"), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
