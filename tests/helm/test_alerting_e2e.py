"""End to end, as root: the chart's alert rules in a real Prometheus, scraping the real agent
attached to the test control plane (real etcd + the test API server), routing to a real
Alertmanager whose webhook receiver is a small HTTP server here.

A runaway operator's UPDATE loop must become a firing StormwatchUpdateLoop alert in
Alertmanager (v2 API and webhook) naming the client, and resolve after the loop stops; no other
alert may fire. The dashboard's expressions are also run against this Prometheus, and the
metric names they use checked against the live scrape of the agent.

Everything binds to 127.0.0.1 and lives in a temporary directory; no network. The rules are the
chart's, rendered with its default values except a short `for` (prometheusRule.for=3s: three
scrapes here, as the default 1m is four at the usual 15 s interval). Prometheus scrapes and
evaluates every second; Alertmanager groups with group_wait/group_interval of 1 s.
"""
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import chart  # noqa: E402
import yaml  # noqa: E402
from agent import Agent, free_port, require_bpf_privileges  # noqa: E402
from cluster import Cluster  # noqa: E402

PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
OPERATOR_NS, OPERATOR_SA = "datajobs-system", "datajob-operator"
OPERATOR = "system:serviceaccount:%s:%s" % (OPERATOR_NS, OPERATOR_SA)
LOOP_SECONDS = 10
RULE_FOR = "3s"
RELEASE_NAMESPACE = "stormwatch"  # chart.rule_groups() renders for this namespace
DATAJOB = """apiVersion: batch.company.com/v1
kind: DataJob
metadata:
  name: %s
  namespace: etl
spec:
  schedule: "0 2 * * *"
"""


class Webhook(http.server.ThreadingHTTPServer):
    """Alertmanager's webhook receiver: records every notification with its arrival time."""

    def __init__(self):
        self.notifications = []  # (monotonic time, payload)
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.notifications.append((time.monotonic(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def find(self, status, alertname, client):
        with self.lock:
            for t, n in self.notifications:
                for a in n.get("alerts", []):
                    if (a["status"] == status and a["labels"].get("alertname") == alertname
                            and a["labels"].get("client") == client):
                        return t, a
        return None, None


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def wait_for(what, fn, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = fn()
        except OSError:
            v = None
        if v:
            return v, time.monotonic()
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


class AlertingEndToEnd(unittest.TestCase):
    def setUp(self):
        require_bpf_privileges(self)
        for b in (PROMETHEUS, ALERTMANAGER, chart.HELM):
            if not os.path.exists(b):
                self.fail("missing %s (scripts/setup.sh installs prometheus and prometheus-alertmanager)" % b)
        self.procs = []
        self.cluster = Cluster().start()
        self.addCleanup(self.cluster.stop)
        self.tmp = os.path.join(self.cluster.tmp, "monitoring")
        os.makedirs(self.tmp)
        self.webhook = Webhook()
        self.addCleanup(self.webhook.shutdown)
        self.addCleanup(self.stop_procs)

    def stop_procs(self):
        for p, log in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            log.close()

    def spawn(self, name, argv):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.tmp)
        self.procs.append((p, log))
        return p

    def log(self, name):
        with open(os.path.join(self.tmp, name + ".log")) as f:
            return f.read()[-3000:]

    def start_alertmanager(self):
        self.am_port = free_port()
        cfg = {
            "route": {"receiver": "webhook", "group_by": ["alertname", "client"],
                      "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
            "receivers": [{"name": "webhook", "webhook_configs": [
                {"url": "http://127.0.0.1:%d/" % self.webhook.server_port, "send_resolved": True}]}],
        }
        path = os.path.join(self.tmp, "alertmanager.yml")
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        self.am = "http://127.0.0.1:%d" % self.am_port
        p = self.spawn("alertmanager", [
            ALERTMANAGER, "--config.file", path, "--storage.path", os.path.join(self.tmp, "am-data"),
            "--web.listen-address", "127.0.0.1:%d" % self.am_port,
            "--cluster.listen-address=",  # no HA gossip port
            "--log.level=info"])
        wait_for("alertmanager", lambda: p.poll() is None and get_json(self.am + "/api/v2/status"), 30)

    def start_prometheus(self, metrics_port):
        self.prom_port = free_port()
        rules = os.path.join(self.tmp, "stormwatch-rules.yaml")
        with open(rules, "w") as f:
            # The chart's rules, default values but a `for` of 3 scrapes (RULE_FOR).
            f.write(chart.dump_rules(chart.rule_groups(sets=["prometheusRule.for=" + RULE_FOR])))
        cfg = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [rules],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:%d" % self.am_port]}]}]},
            # job name "stormwatch", as the chart's ServiceMonitor sets it (jobLabel).
            "scrape_configs": [{"job_name": "stormwatch",
                                "static_configs": [{"targets": ["127.0.0.1:%d" % metrics_port],
                                                    "labels": {"node": "master-1"}}]}],
        }
        path = os.path.join(self.tmp, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        self.prom = "http://127.0.0.1:%d" % self.prom_port
        p = self.spawn("prometheus", [
            PROMETHEUS, "--config.file", path, "--storage.tsdb.path", os.path.join(self.tmp, "prom-data"),
            "--web.listen-address", "127.0.0.1:%d" % self.prom_port, "--log.level=info"])

        def scraping():
            if p.poll() is not None:
                raise AssertionError("prometheus exited: " + self.log("prometheus"))
            r = get_json(self.prom + "/api/v1/query?query=" + urllib.parse.quote('up{job="stormwatch"} == 1'))
            return r["data"]["result"]
        wait_for("prometheus scraping the agent", scraping, 30)

    def prom_alerts(self, state=None):
        alerts = get_json(self.prom + "/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if state is None or a["state"] == state]

    def am_alerts(self, alertname, client):
        q = urllib.parse.urlencode({"filter": ['alertname="%s"' % alertname, 'client="%s"' % client]}, doseq=True)
        return get_json(self.am + "/api/v2/alerts?" + q)

    def query(self, expr):
        r = get_json(self.prom + "/api/v1/query?query=" + urllib.parse.quote(expr))
        self.assertEqual(r["status"], "success", expr)
        return r["data"]["result"]

    def test_update_loop_pages_and_resolves(self):
        c = self.cluster
        token = c.mint_token(OPERATOR_NS, OPERATOR_SA, pod="datajob-operator-6f7c9d5b8-xk2lp")
        admin = c.kubeconfig(c.mint_token("default", "ops-engineer"))
        r = c.kubectl("create", "namespace", "etl", kubeconfig=admin)
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("nightly-etl", "hourly-sync"):
            r = c.kubectl("create", "-f", "-", input=DATAJOB % name, kubeconfig=admin)
            self.assertEqual(r.returncode, 0, r.stderr)

        agent = Agent(c.tmp, extra_args=["--pid", str(c.apiserver_pid)]).start()
        self.addCleanup(agent.stop)
        agent.wait_attached(1)
        self.start_alertmanager()
        self.start_prometheus(agent.metrics_port)

        # Healthy: a few seconds of scrapes and evaluations, nothing fires.
        time.sleep(3)
        self.assertEqual(self.prom_alerts("firing"), [])

        t0 = time.monotonic()
        operator = c.run_operator(token, ["nightly-etl", "hourly-sync"], duration=LOOP_SECONDS, namespace="etl")
        self.addCleanup(lambda: operator.poll() is None and operator.kill())

        _, t_agent = agent.wait_alert(lambda a: a["storm"] == "update_loop" and a["state"] == "firing", 20)
        self.assertIsNotNone(t_agent, "the agent raised no update_loop alert: %s" % agent.stderr()[-2000:])

        def prom_firing():
            return [a for a in self.prom_alerts("firing") if a["labels"]["alertname"] == "StormwatchUpdateLoop"]
        (firing,), t_prom = wait_for("Prometheus firing StormwatchUpdateLoop", prom_firing, 20)
        self.assertEqual(firing["labels"]["client"], OPERATOR)
        self.assertEqual((firing["labels"]["group"], firing["labels"]["resource"]), ("batch.company.com", "datajobs"))
        self.assertEqual(firing["labels"]["severity"], "critical")
        self.assertEqual(firing["labels"]["namespace"], "etl")  # the storm objects' (object_namespace)

        am, t_am = wait_for("Alertmanager holding the alert",
                            lambda: [a for a in self.am_alerts("StormwatchUpdateLoop", OPERATOR)
                                     if a["status"]["state"] == "active"], 20)
        self.assertIn(OPERATOR, am[0]["annotations"]["summary"])
        self.assertIn("datajobs", am[0]["annotations"]["summary"])
        self.assertIn("GenerationChangedPredicate", am[0]["annotations"]["description"])
        self.assertTrue(am[0]["annotations"]["runbook_url"].endswith("/update_loop.md"))

        (t_hook, hook), _ = wait_for("webhook firing notification",
                                     lambda: self.webhook.find("firing", "StormwatchUpdateLoop", OPERATOR)[0]
                                     and self.webhook.find("firing", "StormwatchUpdateLoop", OPERATOR), 20)
        self.assertEqual(hook["labels"]["resource"], "datajobs")
        self.assertEqual(hook["labels"]["namespace"], "etl")

        # The dashboard's queries work on real data, on metrics the agent really exports.
        self.check_dashboard(agent)

        out, _ = operator.communicate(timeout=LOOP_SECONDS + 30)
        t_stop = time.monotonic()
        _, t_agent_resolved = agent.wait_alert(
            lambda a: a["storm"] == "update_loop" and a["state"] == "resolved", 30)
        self.assertIsNotNone(t_agent_resolved, "the agent never resolved the storm")
        _, t_prom_resolved = wait_for("Prometheus resolving", lambda: not prom_firing() or None, 20)
        _, t_am_resolved = wait_for("Alertmanager resolving",
                                    lambda: not [a for a in self.am_alerts("StormwatchUpdateLoop", OPERATOR)
                                                 if a["status"]["state"] == "active"] or None, 20)
        (t_hook_resolved, resolved), _ = wait_for(
            "webhook resolved notification",
            lambda: self.webhook.find("resolved", "StormwatchUpdateLoop", OPERATOR)[0]
            and self.webhook.find("resolved", "StormwatchUpdateLoop", OPERATOR), 20)
        self.assertEqual(resolved["labels"]["client"], OPERATOR)

        # Nothing else fired: no storm for anyone else, no agent-health alert.
        names = {a["labels"]["alertname"] for _, n in self.webhook.notifications for a in n["alerts"]}
        self.assertEqual(names, {"StormwatchUpdateLoop"})
        self.assertEqual(self.prom_alerts("firing"), [])
        summary = json.loads(out.strip().splitlines()[-1])
        print("\noperator: %s\nStormwatchUpdateLoop after the loop started: agent %.1f s, Prometheus firing "
              "%.1f s, Alertmanager %.1f s, webhook %.1f s\nafter the loop stopped: agent resolved %.1f s, "
              "Prometheus %.1f s, Alertmanager %.1f s, webhook resolved %.1f s"
              % (summary, t_agent - t0, t_prom - t0, t_am - t0, t_hook - t0, t_agent_resolved - t_stop,
                 t_prom_resolved - t_stop, t_am_resolved - t_stop, t_hook_resolved - t_stop), file=sys.stderr)

    def check_dashboard(self, agent):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % agent.metrics_port, timeout=5) as r:
            text = r.read().decode()
        live = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
        live = {n for n in live if n.startswith("stormwatch_")}
        exported = chart.exported_metrics()
        self.assertTrue(live <= exported, "exported but not in the README's contract: %s" % (live - exported))
        used = set()
        for where, expr in chart.dashboard_exprs():
            self.query(chart.grafana_expr(expr))  # evaluates without error
            used |= chart.families(chart.metric_names(chart.grafana_expr(expr)), exported)
        # The dashboard has a panel for every family the agent registers (test_chart checks it
        # against exporters/*.cc); a family with no series yet is not exposed, and this scenario
        # (one apiserver, no etcd attached, no 429, no LIST, no Alertmanager push) leaves many
        # empty. What it does produce must be exactly what the agent registers, and the
        # families of the request, storm and agent-health panels must be live.
        registered = chart.source_metric_families()
        self.assertEqual(used - registered, set(), "dashboard metrics the agent does not register")
        self.assertEqual(live - registered, set(), "live metrics not found in exporters/*.cc")
        core = {"stormwatch_requests_total", "stormwatch_response_bytes_total", "stormwatch_storm_active",
                "stormwatch_storms_total", "stormwatch_targets_attached", "stormwatch_target_info",
                "stormwatch_probe_hits_total", "stormwatch_capture_lost_total", "stormwatch_client_series"}
        self.assertEqual(core - live, set(), "core dashboard families not seen live")
        print("\ndashboard families without series in this scenario: %s" % sorted(used - live), file=sys.stderr)
        top = self.query(chart.grafana_expr(
            'topk(10, sum by (client) (rate(stormwatch_requests_total{cluster=~"$cluster", node=~"$node"}[$__rate_interval])))'))
        self.assertEqual(max(top, key=lambda s: float(s["value"][1]))["metric"]["client"], OPERATOR)
        print("\ndashboard: %d expressions evaluated; metrics used %s all exported live"
              % (len(chart.dashboard_exprs()), sorted(used & live)), file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
