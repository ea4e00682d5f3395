"""The alert rules and the dashboard's PromQL, checked by promtool (Debian's prometheus package):

- `promtool check rules` on deploy/prometheus/stormwatch-rules.yaml and on the rules every chart
  variant renders;
- `promtool test rules`: per alert, a synthetic series that must fire it (with the exact labels
  and annotations an on-call engineer gets: client, resource, fix, runbook) and healthy series
  that must not. The expected annotations are the catalog's templates expanded here; promtool
  expands them with Prometheus's own template engine, so both must agree;
- every dashboard expression, as a recording rule, through `promtool check rules`.
No privileges needed.
"""
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chart  # noqa: E402

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
OPERATOR = "system:serviceaccount:datajobs-system:datajob-operator"
HEALTHY = "system:serviceaccount:kube-system:replicaset-controller"
# A client whose storm gauge is 1 in a single scrape only: `for` must keep it from paging.
BLIP = "system:serviceaccount:ci:flaky-job"
# storm -> (group, resource) of its synthetic storm
STORM_RESOURCES = {
    "update_loop": ("batch.company.com", "datajobs"),
    "list_storm": ("", "pods"),
    "exempt_client": ("", ""),
    "conflict_storm": ("batch.company.com", "datajobs"),
    "throttled_client": ("apps", "deployments"),
    "stuck_finalizers": ("batch.company.com", "datajobs"),
    "relist_churn": ("", "configmaps"),
    "etcd_range_storm": ("", "pods"),
}


# storm -> namespace of its objects, as stormwatch_storm_active{object_namespace} (others: none,
# the alert's namespace is then the release namespace).
STORM_NAMESPACES = {"update_loop": "etl", "conflict_storm": "etl"}


def humanize(v):
    """Prometheus's `humanize` template function."""
    if v == 0 or math.isnan(v) or math.isinf(v):
        return "%.4g" % v
    prefix = ""
    if abs(v) >= 1:
        for p in "kMGTPEZY":
            if abs(v) < 1000:
                break
            v /= 1000
            prefix = p
    else:
        for p in "munpfazy":
            if abs(v) >= 1:
                break
            v *= 1000
            prefix = p
    return "%.4g%s" % (v, prefix)


def expand(text, labels, value=None):
    """The Prometheus template constructs the catalog uses, expanded for `labels`."""
    text = re.sub(r"\{\{ if \$labels\.(\w+) \}\}(.*?)(?:\{\{ else \}\}(.*?))?\{\{ end \}\}",
                  lambda m: m.group(2) if labels.get(m.group(1)) else (m.group(3) or ""), text)
    text = re.sub(r"\{\{ \$value \| humanize \}\}", lambda m: humanize(value), text)
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)
    assert "{{" not in text, "unexpanded template construct in %r" % text
    return text


def series(name, labels):
    return "%s{%s}" % (name, ", ".join('%s="%s"' % kv for kv in sorted(labels.items())))


def promtool(*args):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)


class RulesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="stormwatch-rules-")
        cls.spec = chart.rule_groups()
        cls.rules = {r["alert"]: r for g in cls.spec["groups"] for r in g["rules"]}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def write(self, name, doc):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False, width=1000)
        return path

    def test_check_rules_plain_file_and_every_variant(self):
        r = promtool("check", "rules", chart.RULES_FILE)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for name, values_file in chart.variants():
            with self.subTest(variant=name):
                path = self.write("rules-%s.yaml" % name, chart.rule_groups(values_file))
                r = promtool("check", "rules", path)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_alert_exprs_use_only_exported_metrics(self):
        exported = chart.exported_metrics() | {"up"}  # up: Prometheus's own scrape health series
        for name, r in self.rules.items():
            names = chart.families(chart.metric_names(r["expr"]), exported)
            self.assertTrue(names and names <= exported, "%s: %s" % (name, names - exported))

    def alert(self, name, labels, value=None):
        """The expected alert (labels and annotations) for promtool's exp_alerts."""
        r = self.rules[name]
        # Rule labels are templates too (namespace: the storm's objects' one, else the release's).
        rule_labels = {k: expand(v, labels, value) for k, v in r["labels"].items()}
        exp_labels = {k: v for k, v in dict(labels, **rule_labels).items() if v}  # "" = no label
        ann = {k: expand(v, exp_labels, value) for k, v in r["annotations"].items()}
        return {"exp_labels": exp_labels, "exp_annotations": ann}

    def storm_tests(self):
        """Each storm on two masters (the load moves from one to the other), a healthy client
        and a one-scrape blip beside it: with the default `for: 1m`, pending at the first
        evaluation that sees it, then one aggregated alert for the storming client while either
        master reports it, none before or after; none for the healthy client, none for the
        blip (one scrape never pages)."""
        tests = []
        for alert, r in self.rules.items():
            m = re.search(r'storm="([a-z_]+)"', r["expr"])
            if not m:
                continue
            storm = m.group(1)
            group, resource = STORM_RESOURCES[storm]
            key = {"storm": storm, "client": OPERATOR, "group": group, "resource": resource}
            if storm in STORM_NAMESPACES:  # the label the agent is to add (docs/helm.md)
                key["object_namespace"] = STORM_NAMESPACES[storm]
            self.assertEqual(r["for"], "1m", alert)
            healthy = dict(key, client=HEALTHY)
            blip = dict(key, client=BLIP)
            inputs = []
            # The agent's own severity label differs between the masters here (one saw the client
            # as exempt): the rule aggregates it away, one alert with the catalog's severity.
            for node, values, severity in (("master-1", "0 0 1 1 1 0 0 0", "warning"),
                                           ("master-2", "0 0 0 1 1 1 0 0", "critical")):
                target = {"job": "stormwatch", "instance": "%s:9847" % node, "node": node}
                inputs.append({"series": series("stormwatch_storm_active", dict(key, severity=severity, **target)),
                               "values": values})
                inputs.append({"series": series("stormwatch_storm_active", dict(healthy, **target)), "values": "0x7"})
            target = {"job": "stormwatch", "instance": "master-1:9847", "node": "master-1"}
            inputs.append({"series": series("stormwatch_storm_active", dict(blip, **target)),
                           "values": "0 0 0 0 1 0 0 0"})
            fire = [self.alert(alert, key)]
            tests.append({
                "name": alert, "interval": "1m", "input_series": inputs,
                "alert_rule_test": [
                    {"eval_time": "1m", "alertname": alert, "exp_alerts": []},
                    {"eval_time": "2m", "alertname": alert, "exp_alerts": []},     # master-1: pending
                    {"eval_time": "3m", "alertname": alert, "exp_alerts": fire},   # sustained 1m
                    {"eval_time": "4m", "alertname": alert, "exp_alerts": fire},   # both: one alert; blip pending
                    {"eval_time": "5m", "alertname": alert, "exp_alerts": fire},   # master-2 only; no blip
                    {"eval_time": "7m", "alertname": alert, "exp_alerts": []},     # resolved
                ]})
        return tests

    def agent_tests(self):
        a = {"job": "stormwatch", "instance": "10.0.0.1:9847"}
        b = {"job": "stormwatch", "instance": "10.0.0.2:9847"}
        other = {"job": "node-exporter", "instance": "10.0.0.3:9100"}
        info = {"target": "kube-apiserver", "pid": "4242", "go_version": "go1.22.5", "xnet_version": "v0.23.0",
                "stack": "x/net"}
        return [
            {"name": "StormwatchNoTargetAttached", "interval": "1m", "input_series": [
                {"series": series("stormwatch_targets_attached", a), "values": "1x20"},
                {"series": series("stormwatch_targets_attached", b), "values": "1 1 0x20"}],
             "alert_rule_test": [
                 {"eval_time": "5m", "alertname": "StormwatchNoTargetAttached", "exp_alerts": []},  # pending
                 {"eval_time": "15m", "alertname": "StormwatchNoTargetAttached",
                  "exp_alerts": [self.alert("StormwatchNoTargetAttached", b)]}]},
            {"name": "StormwatchTargetRefused", "interval": "1m", "input_series": [
                {"series": series("stormwatch_target_info", dict(a, status="attached", **info)), "values": "1x20"},
                {"series": series("stormwatch_target_info", dict(b, status="refused", **info)), "values": "1x20"}],
             "alert_rule_test": [
                 {"eval_time": "10m", "alertname": "StormwatchTargetRefused",
                  "exp_alerts": [self.alert("StormwatchTargetRefused", dict(b, status="refused", **info))]}]},
            {"name": "StormwatchEventsLost", "interval": "1m", "input_series": [
                {"series": series("stormwatch_capture_lost_total", dict(a, cause="ring_buffer_full")), "values": "0+60x30"},
                {"series": series("stormwatch_capture_lost_total", dict(b, cause="ring_buffer_full")), "values": "0x30"},
                {"series": series("stormwatch_capture_lost_total", dict(b, cause="read_failed")), "values": "0 5 5x28"}],
             "alert_rule_test": [
                 {"eval_time": "5m", "alertname": "StormwatchEventsLost", "exp_alerts": []},  # pending
                 {"eval_time": "20m", "alertname": "StormwatchEventsLost",
                  "exp_alerts": [self.alert("StormwatchEventsLost", dict(a, cause="ring_buffer_full"), value=1.0)]}]},
            {"name": "StormwatchAgentDown", "interval": "1m", "input_series": [
                {"series": series("up", a), "values": "1x20"},
                {"series": series("up", b), "values": "1 1 0x20"},
                {"series": series("up", other), "values": "0x20"}],
             "alert_rule_test": [
                 {"eval_time": "4m", "alertname": "StormwatchAgentDown", "exp_alerts": []},
                 {"eval_time": "10m", "alertname": "StormwatchAgentDown",
                  "exp_alerts": [self.alert("StormwatchAgentDown", b)]},
                 {"eval_time": "20m", "alertname": "StormwatchAgentAbsent", "exp_alerts": []}]},
            {"name": "StormwatchAgentAbsent", "interval": "1m", "input_series": [
                {"series": series("up", other), "values": "1x30"},
                {"series": series("up", b), "values": "0x30"}],
             "alert_rule_test": [
                 {"eval_time": "10m", "alertname": "StormwatchAgentAbsent", "exp_alerts": []},  # pending
                 {"eval_time": "20m", "alertname": "StormwatchAgentAbsent",
                  "exp_alerts": [self.alert("StormwatchAgentAbsent", {})]}]},
        ]

    def test_promtool_unit_tests_fire_and_stay_silent(self):
        shutil.copy(chart.RULES_FILE, os.path.join(self.tmp, "stormwatch-rules.yaml"))
        tests = self.storm_tests() + self.agent_tests()
        covered = set()
        for t in tests:
            for case in t.pop("alert_rule_test"):
                t.setdefault("alert_rule_test", []).append(case)
                covered.add(case["alertname"])
            t.pop("name")
        self.assertEqual(covered, set(self.rules), "every alert has a unit test")
        path = self.write("stormwatch-rules.test.yaml", {
            "rule_files": ["stormwatch-rules.yaml"], "evaluation_interval": "1m", "tests": tests})
        r = promtool("test", "rules", path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        cases = sum(len(t["alert_rule_test"]) for t in tests)
        print("\npromtool test rules: %d alerts, %d test groups, %d eval cases passed"
              % (len(covered), len(tests), cases), file=sys.stderr)

    def test_dashboard_exprs_parse(self):
        exprs = chart.dashboard_exprs()
        rules = [{"record": "stormwatch_dashboard:expr_%d" % i, "expr": chart.grafana_expr(e)}
                 for i, (_, e) in enumerate(exprs)]
        path = self.write("dashboard-exprs.yaml", {"groups": [{"name": "dashboard", "rules": rules}]})
        r = promtool("check", "rules", path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("%d rules found" % len(rules), r.stdout)
        # A broken expression must fail the same way (the check is real).
        bad = self.write("bad.yaml", {"groups": [{"name": "x", "rules": [
            {"record": "x", "expr": "sum by (client) (rate(stormwatch_requests_total[5m])"}]}]})
        self.assertNotEqual(promtool("check", "rules", bad).returncode, 0)


AMTOOL = shutil.which("amtool") or "/usr/bin/amtool"
ROUTING = os.path.join(chart.REPO, "deploy", "alertmanager", "stormwatch-routing.yaml")


class RoutingExampleTest(unittest.TestCase):
    """deploy/alertmanager/stormwatch-routing.yaml (docs/helm.md): a valid Alertmanager config
    that routes the chart's alerts by the labels they really carry."""

    def route(self, labels):
        r = subprocess.run([AMTOOL, "config", "routes", "test", "--config.file", ROUTING,
                            *["%s=%s" % kv for kv in sorted(labels.items())]],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip()

    def test_check_config_and_routes(self):
        r = subprocess.run([AMTOOL, "check-config", ROUTING], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        rules = {r["alert"]: r for g in chart.rule_groups()["groups"] for r in g["rules"]}
        by_receiver = {}
        for name, rule in rules.items():
            labels = dict(rule["labels"], alertname=name, prometheus="monitoring/kube-prometheus-stack-prometheus")
            if "storm=" in rule["expr"]:
                labels["storm"] = rule["expr"].split('storm="')[1].split('"')[0]
            got = self.route(labels)
            want = "platform-pager" if rule["labels"]["severity"] == "critical" else "platform-tickets"
            self.assertEqual(got, want, name)
            by_receiver.setdefault(got, set()).add(name)
            # The agent's direct push of a storm (no `prometheus` label) is dropped.
            if "storm" in labels:
                del labels["prometheus"]
                self.assertEqual(self.route(labels), "null", name)
        self.assertEqual(by_receiver["platform-pager"],
                         {"StormwatchUpdateLoop", "StormwatchListStorm", "StormwatchEtcdRangeStorm"})
        self.assertEqual(self.route({"alertname": "Watchdog"}), "default")


if __name__ == "__main__":
    unittest.main(verbosity=2)
