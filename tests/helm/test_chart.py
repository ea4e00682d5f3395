"""The chart, rendered by `helm template` (helm v3.17.3) for the default values and every variant in
helm/stormwatch/ci/, checked without a cluster:

- every object validates against the Kubernetes 1.28 OpenAPI / Prometheus Operator CRD schemas
  in ../shared/schemas (unknown fields are errors), plus the API server's name/label checks;
- the DaemonSet's security properties (not privileged, capabilities exactly as documented,
  read-only root, hostPID, control-plane scheduling, probes, resources, seccomp);
- labels, selectors and ports agree across DaemonSet, Service, ServiceMonitor/PodMonitor;
- RBAC is limited to reading the APF objects;
- the rendered config file has the agent's format and defaults (docs/stormwatch.example.yaml),
  the agent binary itself accepts it (and the flags) for every variant, and refuses a bad
  override naming the key and the line;
- one alert per storm of STORMS.md with its runbook, the agent health alerts, and the plain
  rules file identical to the chart's;
- the dashboard queries only metrics of the README's metrics contract.
No privileges needed.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chart  # noqa: E402

AGENT = chart.AGENT
CONFIG_PATH = "/etc/stormwatch/config.yaml"
EXAMPLE_CONFIG = os.path.join(chart.REPO, "docs", "stormwatch.example.yaml")
# Keys of the file the chart writes from values `agent` (the container ports and probes use them).
CHART_OWNED_KEYS = chart.CHART_OWNED_KEYS
# An agent image without --config: every setting that has a flag, passed as flags.
FLAGS_VALUES = """
agent:
  useConfigFile: false
config:
  targets:
    names: [kube-apiserver]
    pids: [4194304, 12]
  alertmanager:
    url: http://alertmanager.monitoring.svc:9093
"""
REQUIRED_CAPS = {"BPF", "PERFMON", "SYS_PTRACE"}
# Documented in values.yaml (extraCapabilities): only for old kernels / unreadable binaries.
JUSTIFIED_EXTRA_CAPS = {"SYS_RESOURCE", "DAC_READ_SEARCH"}
STANDARD_LABELS = ("helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/version", "app.kubernetes.io/managed-by")


def storms_of_storms_md():
    with open(os.path.join(chart.SHARED, "STORMS.md")) as f:
        return re.findall(r"^storm: `([a-z_]+)`(?: \(409s\) and `([a-z_]+)`)?", f.read(), re.M)


def storm_names():
    names = []
    for a, b in storms_of_storms_md():
        names += [n for n in (a, b) if n]
    return names


class Rendered:
    """One variant, rendered once and shared by the tests."""
    cache = {}

    @classmethod
    def get(cls, name, values_file):
        if name not in cls.cache:
            cls.cache[name] = chart.objects(chart.render(values_file))
        return cls.cache[name]


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(chart.HELM):
            raise AssertionError("missing %s (scripts/setup.sh installs helm)" % chart.HELM)
        cls.schemas = chart.Schemas()
        cls.variants = chart.variants()
        with open(os.path.join(chart.CHART, "values.yaml")) as f:
            cls.defaults = yaml.safe_load(f)

    def each(self):
        for name, values_file in self.variants:
            values = dict(self.defaults)
            if values_file:
                with open(values_file) as f:
                    values = _merge(values, yaml.safe_load(f) or {})
            yield name, values, Rendered.get(name, values_file)

    # ---- schemas ----

    def test_every_object_validates_against_the_real_schemas(self):
        total = 0
        kinds = set()
        for name, _, objs in self.each():
            self.assertTrue(objs, name)
            for o in objs:
                errs = self.schemas.errors(o)
                self.assertEqual(errs, [], "%s: %s %s" % (name, o.get("kind"), o["metadata"].get("name")))
                total += 1
                kinds.add(o["kind"])
        print("\n%d objects in %d variants valid (%s)" % (total, len(self.variants), ", ".join(sorted(kinds))),
              file=sys.stderr)
        self.assertTrue({"DaemonSet", "ConfigMap", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                         "Service", "ServiceMonitor", "PodMonitor", "PrometheusRule", "NetworkPolicy"} <= kinds)

    def test_helm_lint_strict_on_defaults_and_every_variant(self):
        for name, values_file in self.variants:
            with self.subTest(variant=name):
                r = chart.lint(values_file)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn("1 chart(s) linted, 0 chart(s) failed", r.stdout)
                self.assertNotIn("[WARNING]", r.stdout)
                self.assertNotIn("[ERROR]", r.stdout)

    def test_set_cases_render_and_validate(self):
        """--set as users type it: lists, escaped dots in keys, numbers, booleans."""
        cases = {
            "podAnnotations.a\\.b=c": lambda objs: self.assertEqual(
                pod_template(objs)["metadata"]["annotations"]["a.b"], "c"),
            "podLabels.example\\.com/team=platform": lambda objs: self.assertEqual(
                pod_template(objs)["metadata"]["labels"]["example.com/team"], "platform"),
            "config.targets.names={kube-apiserver,etcd,kube-apiserver-alt}": lambda objs: self.assertEqual(
                yaml.safe_load(config_file(objs))["targets"]["names"], ["kube-apiserver", "etcd", "kube-apiserver-alt"]),
            "config.detectors.update_loop.allow[0]=system:serviceaccount:kube-system:*": lambda objs: self.assertEqual(
                yaml.safe_load(config_file(objs))["detectors"]["update_loop"]["allow"],
                ["system:serviceaccount:kube-system:*"]),
            # helm --set keeps 7.5 a string (it types only integers and booleans): --set-json.
            "--set-json=config.detectors.list_storm.list_rate=7.5": lambda objs: self.assertEqual(
                yaml.safe_load(config_file(objs))["detectors"]["list_storm"]["list_rate"], 7.5),
            "extraCapabilities={SYS_RESOURCE}": lambda objs: self.assertIn(
                "SYS_RESOURCE", pod_template(objs)["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]),
            "config.alertmanager.labels.cluster=prod-eu-1": lambda objs: self.assertEqual(
                yaml.safe_load(config_file(objs))["alertmanager"]["labels"], {"cluster": "prod-eu-1"}),
        }
        n = 0
        for s, check in cases.items():
            with self.subTest(set=s):
                objs = chart.objects(chart.render(extra=[s]) if s.startswith("--") else chart.render(sets=[s]))
                for o in objs:
                    self.assertEqual(self.schemas.errors(o), [], "%s: %s" % (o["kind"], o["metadata"]["name"]))
                    n += 1
                check(objs)
        print("\n--set cases: %d objects valid" % n, file=sys.stderr)

    def test_the_validator_rejects_what_the_api_server_rejects(self):
        objs = Rendered.get("default", None)
        (ds,) = chart.find(objs, "DaemonSet")
        def broken(mutate, obj=ds):
            o = json.loads(json.dumps(obj))
            mutate(o)
            return self.schemas.errors(o)
        c = lambda o: o["spec"]["template"]["spec"]["containers"][0]  # noqa: E731
        self.assertTrue(broken(lambda o: c(o)["securityContext"].update(privilegd=False)))  # unknown field
        self.assertTrue(broken(lambda o: c(o)["ports"][0].update(containerPort="9847")))   # wrong type
        self.assertTrue(broken(lambda o: o["spec"].pop("selector")))                       # required
        self.assertTrue(broken(lambda o: o["metadata"].update(name="Storm_Watch")))        # name syntax
        self.assertTrue(broken(lambda o: c(o)["ports"].append(dict(c(o)["ports"][0]))))    # duplicate port
        mon = chart.objects(chart.render(sets=["serviceMonitor.enabled=true"]))
        (sm,) = chart.find(mon, "ServiceMonitor")
        self.assertTrue(broken(lambda o: o["spec"]["endpoints"][0].update(interval="15 s"), sm))
        self.assertTrue(broken(lambda o: o["spec"].update(endpoint=[]), sm))

    # ---- the DaemonSet ----

    def test_daemonset_security(self):
        for name, values, objs in self.each():
            with self.subTest(variant=name):
                (ds,) = chart.find(objs, "DaemonSet")
                pod = ds["spec"]["template"]["spec"]
                c = agent_container(pod)
                sc = c["securityContext"]
                self.assertIs(pod.get("hostPID"), True)
                self.assertFalse(pod.get("hostNetwork", False))
                self.assertFalse(pod.get("hostIPC", False))
                self.assertIs(sc.get("privileged"), False)
                self.assertIs(sc.get("allowPrivilegeEscalation"), False)
                self.assertIs(sc.get("readOnlyRootFilesystem"), True)
                self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
                added = set(sc["capabilities"]["add"])
                self.assertEqual(len(added), len(sc["capabilities"]["add"]), "duplicate capabilities")
                self.assertTrue(REQUIRED_CAPS <= added, added)
                self.assertTrue(added <= REQUIRED_CAPS | JUSTIFIED_EXTRA_CAPS, added - REQUIRED_CAPS)
                self.assertEqual(added - REQUIRED_CAPS, set(values.get("extraCapabilities") or []))
                self.assertNotIn("SYS_ADMIN", added)
                # uid 0, or the added capabilities are not effective (no ambient capabilities).
                self.assertEqual(pod["securityContext"]["runAsUser"], 0)
                seccomp = sc.get("seccompProfile") or pod["securityContext"].get("seccompProfile")
                self.assertIn(seccomp["type"], ("Unconfined", "Localhost", "RuntimeDefault"))
                if seccomp["type"] == "Localhost":
                    self.assertTrue(seccomp.get("localhostProfile"))
                for v in pod.get("volumes", []):
                    if "hostPath" in v:
                        self.assertTrue(any(m["name"] == v["name"] and m.get("readOnly")
                                            for m in c.get("volumeMounts", [])),
                                        "hostPath %s must be mounted read-only" % v["name"])
                for kind in ("requests", "limits"):
                    self.assertTrue({"cpu", "memory"} <= set(c["resources"][kind]), kind)

    def test_daemonset_defaults(self):
        (ds,) = chart.find(Rendered.get("default", None), "DaemonSet")
        pod = ds["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        self.assertEqual(set(c["securityContext"]["capabilities"]["add"]), REQUIRED_CAPS)
        self.assertEqual(pod["securityContext"]["seccompProfile"], {"type": "Unconfined"})
        # Control-plane nodes, x86_64 only (the agent and its BPF object are built for amd64).
        self.assertEqual(pod["nodeSelector"], {"node-role.kubernetes.io/control-plane": "",
                                               "kubernetes.io/arch": "amd64"})
        self.assertEqual(c["image"], "registry.example.com/stormwatch:0.1.0")
        taints = {(t["key"], t.get("effect")) for t in pod["tolerations"] if t.get("operator") == "Exists"}
        self.assertEqual(taints, {("node-role.kubernetes.io/control-plane", "NoSchedule"),
                                  ("node-role.kubernetes.io/master", "NoSchedule")})
        self.assertEqual(pod["priorityClassName"], "system-node-critical")
        self.assertFalse([v for v in pod["volumes"] if "hostPath" in v], "no hostPath by default")
        # The heap on transparent huge pages, as the agent's start log then reports.
        self.assertIn({"name": "GLIBC_TUNABLES", "value": "glibc.malloc.hugetlb=1"}, c["env"])

    def test_heap_huge_pages_can_be_left_off(self):
        objs = render_objects("agent:\n  heapHugePages: false\n")
        (ds,) = chart.find(objs, "DaemonSet")
        c = agent_container(ds["spec"]["template"]["spec"])
        self.assertEqual([e for e in c["env"] if e["name"] == "GLIBC_TUNABLES"], [])
        self.assertEqual({e["name"] for e in c["env"]}, {"NODE_NAME", "POD_NAMESPACE"})

    def test_user_glibc_tunables_are_merged_with_huge_pages(self):
        # A GLIBC_TUNABLES of the user's would replace the chart's (the last of two env vars of
        # one name counts): it is merged after the chart's setting instead, so both hold and
        # the user's own settings win. Other extra variables pass through in their order.
        extra = ("agent:\n  extraEnv:\n"
                 "    - {name: GLIBC_TUNABLES, value: glibc.malloc.arena_max=2}\n"
                 "    - {name: FOO, value: bar}\n")
        (ds,) = chart.find(render_objects(extra), "DaemonSet")
        env = agent_container(ds["spec"]["template"]["spec"])["env"]
        self.assertEqual([e["name"] for e in env],
                         ["NODE_NAME", "POD_NAMESPACE", "GLIBC_TUNABLES", "FOO"])
        self.assertEqual(env[2], {"name": "GLIBC_TUNABLES",
                                  "value": "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=2"})
        self.assertEqual(env[3], {"name": "FOO", "value": "bar"})
        # Without huge pages the user's variable is theirs alone, unchanged.
        (ds,) = chart.find(render_objects(extra + "  heapHugePages: false\n"), "DaemonSet")
        env = agent_container(ds["spec"]["template"]["spec"])["env"]
        self.assertEqual(env[2:], [{"name": "GLIBC_TUNABLES", "value": "glibc.malloc.arena_max=2"},
                                   {"name": "FOO", "value": "bar"}])
        # One from a reference cannot be merged: it follows the chart's, and wins, as written.
        ref = ("agent:\n  extraEnv:\n    - name: GLIBC_TUNABLES\n      valueFrom:\n"
               "        configMapKeyRef: {name: tunables, key: glibc}\n")
        (ds,) = chart.find(render_objects(ref), "DaemonSet")
        env = agent_container(ds["spec"]["template"]["spec"])["env"]
        self.assertEqual([e.get("value") for e in env if e["name"] == "GLIBC_TUNABLES"],
                         ["glibc.malloc.hugetlb=1", None])

    def test_scheduling_is_overridable(self):
        (ds,) = chart.find(Rendered.get("custom-scheduling", None), "DaemonSet")
        pod = ds["spec"]["template"]["spec"]
        self.assertEqual(pod["tolerations"], [{"operator": "Exists"}])
        # The user's keys merge with the default arch key; null drops the control-plane one.
        self.assertEqual(pod["nodeSelector"], {"node-role.kubernetes.io/master": "",
                                               "example.com/pool": "masters", "kubernetes.io/arch": "amd64"})
        self.assertNotIn("priorityClassName", pod)

    def test_probes_and_ports_match_the_agent_config(self):
        for name, values, objs in self.each():
            with self.subTest(variant=name):
                (ds,) = chart.find(objs, "DaemonSet")
                pod = ds["spec"]["template"]["spec"]
                c = agent_container(pod)
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                cfg = yaml.safe_load(config_file(objs))
                if values["rbacProxy"]["enabled"]:
                    # The metrics port is the proxy's; the agent listens on loopback only.
                    (proxy,) = [x for x in pod["containers"] if x["name"] == "kube-rbac-proxy"]
                    self.assertNotIn("metrics", ports)
                    ports["metrics"] = {p["name"]: p["containerPort"] for p in proxy["ports"]}["metrics"]
                    self.assertEqual(cfg["metrics_address"], "127.0.0.1:%d" % values["rbacProxy"]["upstreamPort"])
                else:
                    self.assertEqual(cfg["metrics_address"], "0.0.0.0:%d" % ports["metrics"])
                self.assertEqual(set(ports), {"metrics", "health"}, "no other port (no debug port)")
                self.assertEqual(cfg["health_address"], "0.0.0.0:%d" % ports["health"])
                self.assertEqual(cfg["log_level"], values["agent"]["logLevel"])
                self.assertEqual(ports["metrics"], values["agent"]["metricsPort"])
                self.assertEqual(c["livenessProbe"]["httpGet"], {"path": "/healthz", "port": "health"})
                self.assertEqual(c["readinessProbe"]["httpGet"], {"path": "/readyz", "port": "health"})
                self.assertEqual(c["args"], ["--config=" + CONFIG_PATH] + values["agent"]["extraArgs"])

    def test_flags_without_config_file(self):
        """agent.useConfigFile=false: the settings that have flags, from the same values."""
        objs = render_objects(FLAGS_VALUES)
        (ds,) = chart.find(objs, "DaemonSet")
        c = agent_container(ds["spec"]["template"]["spec"])
        self.assertEqual(c["args"], [
            "--target=kube-apiserver", "--pid=4194304", "--pid=12",
            "--metrics-address=0.0.0.0:9847", "--health-address=0.0.0.0:9848", "--log-level=info",
            "--ring-buffer-bytes=16777216", "--update-loop-object-rate=5",
            "--update-loop-object-sustain=10", "--update-loop-resource-rate=100",
            "--update-loop-resource-sustain=3", "--update-loop-resolve=10",
            "--alertmanager-url=http://alertmanager.monitoring.svc:9093"])

    def test_agent_accepts_the_rendered_config_and_flags(self):
        """The agent parses the rendered args and config file of every variant, and of the flags
        mode; it loads the file before acting on --version, which then exits without attaching."""
        if not os.path.exists(AGENT):
            self.fail("missing %s (build the stormwatch target)" % AGENT)
        variants = [(name, objs) for name, _, objs in self.each()]
        variants.append(("flags", render_objects(FLAGS_VALUES)))
        for name, objs in variants:
            with self.subTest(variant=name):
                r = run_agent(objs)
                self.assertEqual(r.returncode, 0, "%s rejects the %s variant: %s" % (AGENT, name, r.stderr))
                self.assertRegex(r.stdout, r"^stormwatch \S+\n$")

    def test_agent_refuses_a_bad_config_override_naming_key_and_line(self):
        if not os.path.exists(AGENT):
            self.fail("missing %s (build the stormwatch target)" % AGENT)
        cases = [
            # A typo never falls back to the default silently.
            ("config.detectors.list_storm.sustian_s=15", "sustian_s: 15",
             "detectors.list_storm.sustian_s: unknown key (line %d); known keys: enabled, list_rate, sustain_s"),
            # The chart's former layout.
            ("config.limits.max_objects=20000", "max_objects: 20000",
             "limits.max_objects: unknown key (line %d); known keys: max_clients"),
            ("config.detectors.conflict_storm.conflict_ratio=1.5", "conflict_ratio: 1.5",
             "detectors.conflict_storm.conflict_ratio: must be > 0 and <= 1, got 1.5 (line %d)"),
            ("config.capture.ring_buffer_bytes=5000", "ring_buffer_bytes: 5000",
             "capture.ring_buffer_bytes: must be a power of two >= 4096 (line %d)"),
        ]
        for override, line_text, message in cases:
            with self.subTest(override=override):
                # values.schema.json refuses these first (ValuesSchemaTest); the agent is the
                # second line, for a file written by hand or a render that skipped the schema.
                # --set-json: helm --set would make 1.5 a string.
                objs = chart.objects(chart.render(extra=["--skip-schema-validation", "--set-json", override]))
                lines = config_file(objs).splitlines()
                (line,) = [i + 1 for i, text in enumerate(lines) if text.strip() == line_text]
                r = run_agent(objs)
                self.assertEqual(r.returncode, 2, r.stdout)
                self.assertIn("config.yaml: " + message % line, r.stderr)
                self.assertEqual(r.stdout, "")

    def test_chart_refuses_the_keys_it_owns(self):
        for key in CHART_OWNED_KEYS:
            with self.subTest(key=key):
                r = chart.render(sets=["config.%s=x" % key], check=False)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn("- config: Additional property %s is not allowed" % key, r.stderr)
                # And the template itself, where the schema is skipped.
                r = chart.render(sets=["config.%s=x" % key], extra=["--skip-schema-validation"], check=False)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn("config.%s: set by the chart" % key, r.stderr)

    def test_config_defaults_are_the_agents(self):
        """values.yaml `config` has the keys and defaults of docs/stormwatch.example.yaml, whose
        values a unit test (config_file_test) checks are the agent's built-in defaults."""
        with open(EXAMPLE_CONFIG) as f:
            example = yaml.safe_load(f)
        rendered = yaml.safe_load(config_file(Rendered.get("default", None)))
        # One difference: the runbook links, written from the chart's runbookBaseURL (the agent's
        # built-in default points at a repository that is not this project's).
        self.assertEqual(rendered["alertmanager"].pop("runbook_base_url"), self.defaults["runbookBaseURL"])
        example["alertmanager"].pop("runbook_base_url")
        self.assertEqual(rendered, example)
        without_chart_keys = {k: v for k, v in example.items() if k not in CHART_OWNED_KEYS}
        self.assertEqual(self.defaults["config"], without_chart_keys)
        self.assertIs(self.defaults["agent"]["useConfigFile"], True)

    def test_config_file_is_mounted_and_matches_values(self):
        for name, values, objs in self.each():
            with self.subTest(variant=name):
                (ds,) = chart.find(objs, "DaemonSet")
                pod = ds["spec"]["template"]["spec"]
                (vol,) = [v for v in pod["volumes"] if v["name"] == "config"]
                self.assertNotIn("items", vol["configMap"])  # every key is a file named after it
                (mount,) = [m for m in agent_container(pod)["volumeMounts"] if m["name"] == "config"]
                self.assertEqual(os.path.join(mount["mountPath"], "config.yaml"), CONFIG_PATH)
                agent = values["agent"]
                metrics = ("127.0.0.1:%d" % values["rbacProxy"]["upstreamPort"] if values["rbacProxy"]["enabled"]
                           else "0.0.0.0:%d" % agent["metricsPort"])
                expected = dict(values["config"], metrics_address=metrics,
                                health_address="0.0.0.0:%d" % agent["healthPort"], log_level=agent["logLevel"])
                expected["alertmanager"] = dict(expected["alertmanager"],
                                                runbook_base_url=values["runbookBaseURL"])
                self.assertEqual(yaml.safe_load(config_file(objs)), expected)
                self.assertIn("checksum/config", ds["spec"]["template"]["metadata"]["annotations"])
        (ds,) = chart.find(Rendered.get("old-kernel", None), "DaemonSet")
        cfg = yaml.safe_load(config_file(Rendered.get("old-kernel", None)))
        self.assertEqual(cfg["targets"], {"names": ["kube-apiserver"], "pids": []})
        self.assertEqual(cfg["detectors"]["update_loop"]["allow"],
                         ["system:serviceaccount:kube-system:generic-garbage-collector"])
        self.assertEqual(cfg["detectors"]["update_loop"]["object_rate"], 2.5)
        self.assertEqual(cfg["detectors"]["update_loop"]["object_sustain_s"], 10)  # merged default
        self.assertIs(cfg["detectors"]["relist_churn"]["enabled"], False)
        cfg = yaml.safe_load(config_file(Rendered.get("minimal", None)))
        self.assertEqual(cfg["alertmanager"]["url"], "http://alertmanager.monitoring.svc:9093")
        self.assertEqual(cfg["alertmanager"]["timeout_s"], 5)

    def test_config_change_rolls_the_pods(self):
        a = chart.find(Rendered.get("default", None), "DaemonSet")[0]
        b = chart.find(chart.objects(chart.render(sets=["config.detectors.list_storm.list_rate=9"])), "DaemonSet")[0]
        key = "checksum/config"
        self.assertNotEqual(a["spec"]["template"]["metadata"]["annotations"][key],
                            b["spec"]["template"]["metadata"]["annotations"][key])

    # ---- labels, selectors, monitoring objects ----

    def test_labels_and_selectors(self):
        for name, values, objs in self.each():
            with self.subTest(variant=name):
                for o in objs:
                    labels = o["metadata"].get("labels", {})
                    for k in STANDARD_LABELS:
                        self.assertIn(k, labels, "%s %s" % (o["kind"], o["metadata"]["name"]))
                (ds,) = chart.find(objs, "DaemonSet")
                pod_labels = ds["spec"]["template"]["metadata"]["labels"]
                port_names = {p["name"] for c in ds["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
                monitoring_labels = dict(values.get("prometheusLabels") or {})
                services = chart.find(objs, "Service")
                for svc in services:
                    self.assertTrue(set(svc["spec"]["selector"].items()) <= set(pod_labels.items()))
                    self.assertEqual(svc["spec"].get("clusterIP"), values["service"]["clusterIP"] or None)
                    for p in svc["spec"]["ports"]:
                        self.assertIn(p["targetPort"], port_names)
                for sm in chart.find(objs, "ServiceMonitor"):
                    (svc,) = services
                    self.assertTrue(set(sm["spec"]["selector"]["matchLabels"].items())
                                    <= set(svc["metadata"]["labels"].items()))
                    self.assertEqual(sm["spec"]["namespaceSelector"]["matchNames"], [svc["metadata"]["namespace"]])
                    self.assertIn(sm["spec"]["endpoints"][0]["port"], {p["name"] for p in svc["spec"]["ports"]})
                    self.assertIn(sm["spec"]["jobLabel"], svc["metadata"]["labels"])
                    for k, v in dict(monitoring_labels, **values["serviceMonitor"]["additionalLabels"]).items():
                        self.assertEqual(sm["metadata"]["labels"][k], v)
                    self.assertIn({"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
                                   "action": "replace"}, sm["spec"]["endpoints"][0]["relabelings"])
                for pm in chart.find(objs, "PodMonitor"):
                    self.assertTrue(set(pm["spec"]["selector"]["matchLabels"].items()) <= set(pod_labels.items()))
                    self.assertIn(pm["spec"]["podMetricsEndpoints"][0]["port"], port_names)
                    self.assertIn(pm["spec"]["jobLabel"], pod_labels)
                for pm in chart.find(objs, "PodMonitor"):
                    for k, v in dict(monitoring_labels, **values["podMonitor"]["additionalLabels"]).items():
                        self.assertEqual(pm["metadata"]["labels"][k], v)
                for pr in chart.find(objs, "PrometheusRule"):
                    for k, v in dict(monitoring_labels, **values["prometheusRule"]["additionalLabels"]).items():
                        self.assertEqual(pr["metadata"]["labels"][k], v)
                for cm in chart.find(objs, "ConfigMap"):
                    if "stormwatch.json" in cm["data"]:
                        self.assertEqual(cm["metadata"]["labels"][values["dashboards"]["label"]],
                                         values["dashboards"]["labelValue"])
                        json.loads(cm["data"]["stormwatch.json"])

    def test_monitor_variants(self):
        kinds = {name: {o["kind"] for o in objs} for name, _, objs in self.each()}
        self.assertTrue({"ServiceMonitor", "PrometheusRule"} <= kinds["servicemonitor"])
        self.assertIn("PodMonitor", kinds["podmonitor"])
        self.assertNotIn("Service", kinds["podmonitor"])
        self.assertFalse({"ServiceMonitor", "PodMonitor", "PrometheusRule"} & kinds["default"])
        both = chart.render(sets=["serviceMonitor.enabled=true", "podMonitor.enabled=true"], check=False)
        self.assertNotEqual(both.returncode, 0, "both monitors must be refused (double scrape)")
        r = chart.render(extra=["--kube-version", "v1.26.0"], check=False)
        self.assertNotEqual(r.returncode, 0, "kubeVersion >=1.27 not enforced")
        self.assertIn("chart requires kubeVersion: >=1.27.0-0 which is incompatible with Kubernetes v1.26.0", r.stderr)

    def test_rbac_reads_only_apf_objects(self):
        for name, values, objs in self.each():
            with self.subTest(variant=name):
                (ds,) = chart.find(objs, "DaemonSet")
                sa_name = ds["spec"]["template"]["spec"]["serviceAccountName"]
                roles = chart.find(objs, "ClusterRole")
                if not values["rbac"]["create"]:
                    self.assertEqual(roles, [])
                    continue
                (role,) = roles
                expected = [{"apiGroups": ["flowcontrol.apiserver.k8s.io"],
                             "resources": ["flowschemas", "prioritylevelconfigurations"],
                             "verbs": ["get", "list"]}]
                if values["rbacProxy"]["enabled"]:  # kube-rbac-proxy reviews each scrape's token
                    expected += [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
                                  "verbs": ["create"]},
                                 {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
                                  "verbs": ["create"]}]
                self.assertEqual(role["rules"], expected)
                self.assertEqual(chart.find(objs, "Role"), [])
                (binding,) = chart.find(objs, "ClusterRoleBinding")
                self.assertEqual(binding["roleRef"]["name"], role["metadata"]["name"])
                self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": sa_name,
                                                        "namespace": ds["metadata"]["namespace"]}])
                sas = chart.find(objs, "ServiceAccount")
                if values["serviceAccount"]["create"]:
                    self.assertEqual([s["metadata"]["name"] for s in sas], [sa_name])

    def test_notes_render(self):
        for name, values_file in self.variants:
            with self.subTest(variant=name):
                notes = chart.render(values_file, notes=True)
                self.assertIn("stormwatch_targets_attached", notes)
                self.assertNotIn("<no value>", notes)

    # ---- alerts ----

    def test_storm_severities_are_the_agents(self):
        """The rules' severity of each storm is the one the agent gives the same storm on its
        alert line, its Alertmanager push and stormwatch_storm_active (kStormSeverities in
        agent/analysis/storm.h): one storm, one severity, whichever path delivers it."""
        with open(os.path.join(chart.REPO, "agent", "analysis", "storm.h")) as f:
            source = f.read()
        table = source.split("kStormSeverities[] = {", 1)[1].split("};", 1)[0]
        agent = dict(re.findall(r'\{"([a-z_]+)", "([a-z]+)"\}', table))
        self.assertEqual(sorted(agent), sorted(storm_names()))
        rules = [r for g in chart.rule_groups()["groups"] for r in g["rules"]]
        catalog = {}
        for r in rules:
            m = re.search(r'stormwatch_storm_active\{storm="([a-z_]+)"\}', r["expr"])
            if m:
                catalog[m.group(1)] = r["labels"]["severity"]
        self.assertEqual(catalog, agent)

    def test_one_alert_per_storm_with_runbook(self):
        storms = storm_names()
        self.assertEqual(len(storms), 8, storms)
        spec = chart.rule_groups()
        rules = [r for g in spec["groups"] for r in g["rules"]]
        by_storm = {}
        for r in rules:
            m = re.search(r'stormwatch_storm_active\{storm="([a-z_]+)"\}', r["expr"])
            if m:
                by_storm.setdefault(m.group(1), []).append(r)
                self.assertTrue(r["expr"].startswith("max by (storm, client, group, resource, object_namespace) ("),
                                r["expr"])
                self.assertIn("$labels.client", r["annotations"]["summary"] + r["annotations"]["description"])
                if m.group(1) != "exempt_client":  # a property of the identity, not of a resource
                    self.assertIn("$labels.resource", r["annotations"]["summary"] + r["annotations"]["description"])
                self.assertIn("Fix:", r["annotations"]["description"])
                self.assertTrue(r["annotations"]["runbook_url"].endswith("/%s.md" % m.group(1)))
            self.assertIn(r["labels"]["severity"], ("critical", "warning", "info"))
            url = r["annotations"]["runbook_url"]
            page, _, anchor = url.rsplit("/", 1)[1].partition("#")
            path = os.path.join(chart.RUNBOOKS, page)
            self.assertTrue(os.path.exists(path), "runbook %s missing" % path)
            if anchor:
                with open(path) as f:
                    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
                                for h in re.findall(r"^#+ (.*)$", f.read(), re.M)}
                self.assertIn(anchor, headings, url)
        self.assertEqual(sorted(by_storm), sorted(storms))
        self.assertTrue(all(len(v) == 1 for v in by_storm.values()))
        exprs = " ".join(r["expr"] for r in rules)
        for needle in ("stormwatch_targets_attached", 'status="refused"', "rate(stormwatch_capture_lost_total",
                       "up{job=~", "absent(up{job=~"):
            self.assertIn(needle, exprs)
        print("\n%d alerts: %d storms + %d agent health" % (len(rules), len(by_storm), len(rules) - len(by_storm)),
              file=sys.stderr)

    def test_alert_values(self):
        spec = chart.rule_groups(sets=["prometheusRule.alerts.StormwatchRelistChurn.enabled=false",
                                       "prometheusRule.alerts.StormwatchUpdateLoop.severity=page",
                                       "prometheusRule.alerts.StormwatchUpdateLoop.for=1m"])
        rules = {r["alert"]: r for g in spec["groups"] for r in g["rules"]}
        self.assertNotIn("StormwatchRelistChurn", rules)
        self.assertEqual(rules["StormwatchUpdateLoop"]["labels"]["severity"], "page")
        self.assertEqual(rules["StormwatchUpdateLoop"]["for"], "1m")
        (_, values_file), = [v for v in self.variants if v[0] == "servicemonitor"]
        spec = chart.rule_groups(values_file)
        r = spec["groups"][0]["rules"][0]
        self.assertTrue(r["expr"].startswith("max by (storm, client, group, resource, object_namespace, cluster) ("),
                        r["expr"])
        self.assertEqual(r["labels"]["team"], "platform")

    def test_plain_rules_file_is_the_chart_rules(self):
        with open(chart.RULES_FILE) as f:
            text = f.read()
        self.assertEqual(text, chart.dump_rules(chart.rule_groups()),
                         "deploy/prometheus/stormwatch-rules.yaml is stale: run "
                         "python3 tests/helm/chart.py write-rules")

    # ---- dashboard ----

    def test_dashboard_uses_only_exported_metrics(self):
        exported = chart.exported_metrics()
        self.assertIn("stormwatch_storm_active", exported)
        with open(chart.DASHBOARD) as f:
            dash = json.load(f)
        self.assertEqual({v["name"] for v in dash["templating"]["list"]}, {"datasource", "cluster", "node", "client"})
        exprs = chart.dashboard_exprs()
        used = set()
        for where, expr in exprs:
            names = chart.families(chart.metric_names(chart.grafana_expr(expr)), exported)
            self.assertTrue(names, where)
            self.assertTrue(names <= exported, "%s: %s not exported by the agent" % (where, names - exported))
            used |= names
        for needed in ("stormwatch_requests_total", "stormwatch_response_bytes_total", "stormwatch_storm_active",
                       "stormwatch_storms_total", "stormwatch_capture_lost_total", "stormwatch_probe_hits_total",
                       "stormwatch_targets_attached"):
            self.assertIn(needed, used)
        self.assertEqual(chart.metric_names('sum by (client) (rate(foo_total{a="b"}[5m])) / on(x) bar'),
                         {"foo_total", "bar"})
        print("\ndashboard: %d expressions over %d metrics" % (len(exprs), len(used)), file=sys.stderr)


class ValuesSchemaTest(unittest.TestCase):
    """helm/stormwatch/values.schema.json: helm refuses unknown keys and wrong types before
    rendering, naming the key; its `config` part is the agent's own schema."""

    @classmethod
    def setUpClass(cls):
        with open(chart.VALUES_SCHEMA) as f:
            cls.schema = json.load(f)

    def refused(self, args, message):
        """Both helm template and helm lint fail, with `message` in the output."""
        sets = [a for a in args if not a.startswith("--")]
        extra = [a for a in args if a.startswith("--")]
        r = chart.render(sets=sets, extra=extra, check=False)
        self.assertNotEqual(r.returncode, 0, "helm template accepted %s" % args)
        self.assertIn("values don't meet the specifications of the schema(s)", r.stderr)
        self.assertIn(message, r.stderr)
        lint = chart.helm("lint", "--strict", chart.CHART, "-f", chart.IMAGE_VALUES, *extra,
                          *[x for v in sets for x in ("--set", v)])
        self.assertNotEqual(lint.returncode, 0, "helm lint accepted %s" % args)
        self.assertIn(message, lint.stdout + lint.stderr)

    def test_unknown_keys_and_wrong_types_are_refused(self):
        cases = [
            (["serviceMonitr.enabled=true"], "- (root): Additional property serviceMonitr is not allowed"),
            (["config.detectors.list_storm.sustian_s=5"],
             "- config.detectors.list_storm: Additional property sustian_s is not allowed"),
            (["config.detectors.list_storm.sustain_s=abc"],
             "- config.detectors.list_storm.sustain_s: Invalid type. Expected: integer, given: string"),
            (["config.detectors.update_loop.object_rate=-2"], "- config.detectors.update_loop.object_rate: Must be greater than"),
            (["serviceMonitor.interval=15 s"], "- serviceMonitor.interval: Does not match pattern"),
            (["serviceMonitor.sampleLimit=-1"], "- serviceMonitor.sampleLimit: Must be greater than or equal to 0"),
            (["agent.metricsPort=70000"], "- agent.metricsPort: Must be less than or equal to 65535"),
            (["agent.logLevel=verbose"], "- agent.logLevel: agent.logLevel must be one of the following"),
            (["extraCapabilities={SYS_ADMIN}"], "- extraCapabilities.0: extraCapabilities.0 must be one of the following"),
            (["prometheusRule.alerts.StormwatchUpdateLoop.for=soon"],
             "- prometheusRule.alerts.StormwatchUpdateLoop.for: Does not match pattern"),
            (["prometheusRule.alerts.StormwatchUpdateLop.enabled=false"],
             "- prometheusRule.alerts: Additional property StormwatchUpdateLop is not allowed"),
            (["rbacProxy.image.repositry=x"], "- rbacProxy.image: Additional property repositry is not allowed"),
            (["networkPolicy.from=x"], "- networkPolicy.from: Invalid type. Expected: array, given: string"),
            # helm --set leaves 7.5 a string (it types integers and booleans only): use --set-json.
            (["config.detectors.list_storm.list_rate=7.5"],
             "- config.detectors.list_storm.list_rate: Invalid type. Expected: number, given: string"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                self.refused(args, message)

    def test_every_object_we_own_is_closed(self):
        """additionalProperties: false wherever the chart (or the agent) owns the shape; open
        objects are Kubernetes types (validated after rendering) or string maps."""
        open_objects = []
        def walk(node, path):
            if isinstance(node, dict):
                if node.get("type") == "object" or "properties" in node:
                    if "properties" in node and node.get("additionalProperties") is not False:
                        open_objects.append(path)
                    if "properties" not in node and "additionalProperties" not in node:
                        self.assertIn("description", node, "%s: an open object says what it holds" % path)
                for k, v in node.items():
                    walk(v, path + "/" + k)
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, "%s/%d" % (path, i))
        walk(self.schema, "")
        self.assertEqual(open_objects, [])
        self.assertEqual(self.schema["$schema"], "http://json-schema.org/draft-07/schema#")
        with open(os.path.join(chart.CHART, "values.yaml")) as f:
            defaults = yaml.safe_load(f)
        # Every top-level value has a schema, and only those.
        self.assertEqual(set(self.schema["properties"]) - {"global"}, set(defaults))

    def test_config_schema_is_the_agents(self):
        """values.schema.json's config = `stormwatch config-schema` minus the chart's own keys:
        regenerate with python3 tests/helm/chart.py write-schema."""
        if not os.path.exists(AGENT):
            self.fail("missing %s (build the stormwatch target)" % AGENT)
        expected = chart.agent_config_schema()
        self.assertEqual(self.schema["properties"]["config"], expected,
                         "values.schema.json's config is stale: run python3 tests/helm/chart.py write-schema")
        for k in CHART_OWNED_KEYS:
            self.assertNotIn(k, expected["properties"])

    def test_image_repository_is_required(self):
        r = chart.render(image=False, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("image.repository is required: the image built from the repository's Dockerfile", r.stderr)
        lint = chart.lint(image=False)
        self.assertIn("Missing required value: image.repository is required", lint.stdout + lint.stderr)
        r = chart.render(sets=["rbacProxy.enabled=true"], check=False)
        self.assertIn("rbacProxy.image.repository is required", r.stderr)
        r = chart.render(sets=["rbacProxy.enabled=true", "rbacProxy.image.repository=r/krp"], check=False)
        self.assertIn("rbacProxy.image.tag or rbacProxy.image.digest is required", r.stderr)
        with open(os.path.join(chart.CHART, "values.yaml")) as f:
            self.assertEqual(yaml.safe_load(f)["image"]["repository"], "")


class IntegrationTest(unittest.TestCase):
    """kube-prometheus-stack, kube-rbac-proxy, NetworkPolicy, scrape limits, alert labels."""

    @classmethod
    def setUpClass(cls):
        cls.schemas = chart.Schemas()

    def render(self, values_file=None, sets=()):
        objs = chart.objects(chart.render(values_file, sets=sets))
        for o in objs:
            self.assertEqual(self.schemas.errors(o), [], "%s %s" % (o["kind"], o["metadata"]["name"]))
        return objs

    def test_kube_prometheus_stack_values(self):
        """Its Prometheus selects by release=<its release>: exactly the chart's labels plus that."""
        objs = self.render(os.path.join(chart.CHART, "ci", "kube-prometheus-stack-values.yaml"))
        (ds,) = chart.find(objs, "DaemonSet")
        chart_labels = ds["metadata"]["labels"]
        for kind in ("ServiceMonitor", "PrometheusRule"):
            (o,) = chart.find(objs, kind)
            self.assertEqual(o["metadata"]["labels"], dict(chart_labels, release="kube-prometheus-stack"), kind)
            self.assertEqual(o["metadata"]["namespace"], "monitoring")
        (pr,) = chart.find(objs, "PrometheusRule")
        for g in pr["spec"]["groups"]:
            for r in g["rules"]:
                self.assertEqual(r["labels"], {"severity": r["labels"]["severity"],
                                               "namespace": namespace_label(r, "monitoring")})
                self.assertTrue(r["annotations"]["runbook_url"].startswith(
                    "https://git.example.com/platform/stormwatch/-/blob/main/docs/runbooks/"))
        (dash,) = [c for c in chart.find(objs, "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
        self.assertEqual(dash["metadata"]["labels"]["grafana_dashboard"], "1")
        # prometheusLabels also reach a PodMonitor; an object's additionalLabels win.
        objs = self.render(sets=["prometheusLabels.release=kps", "podMonitor.enabled=true", "service.enabled=false",
                                 "podMonitor.additionalLabels.release=other", "prometheusRule.enabled=true"])
        (pm,) = chart.find(objs, "PodMonitor")
        self.assertEqual(pm["metadata"]["labels"]["release"], "other")
        (pr,) = chart.find(objs, "PrometheusRule")
        self.assertEqual(pr["metadata"]["labels"]["release"], "kps")

    def test_scrape_limits(self):
        for kind, key in (("ServiceMonitor", "serviceMonitor"), ("PodMonitor", "podMonitor")):
            with self.subTest(kind=kind):
                base = ["%s.enabled=true" % key] + (["service.enabled=false"] if kind == "PodMonitor" else [])
                (m,) = chart.find(self.render(sets=base), kind)
                self.assertEqual((m["spec"]["sampleLimit"], m["spec"]["labelLimit"]), (501 * 200, 30))
                (m,) = chart.find(self.render(sets=base + ["config.limits.max_clients=1000"]), kind)
                self.assertEqual(m["spec"]["sampleLimit"], 1001 * 200)   # follows the agent's cap
                (m,) = chart.find(self.render(sets=base + ["%s.sampleLimit=5000" % key,
                                                           "%s.labelLimit=40" % key]), kind)
                self.assertEqual((m["spec"]["sampleLimit"], m["spec"]["labelLimit"]), (5000, 40))

    def test_rbac_proxy(self):
        objs = self.render(os.path.join(chart.CHART, "ci", "rbac-proxy-values.yaml"))
        (ds,) = chart.find(objs, "DaemonSet")
        pod = ds["spec"]["template"]["spec"]
        self.assertEqual([c["name"] for c in pod["containers"]], ["agent", "kube-rbac-proxy"])
        proxy = pod["containers"][1]
        self.assertEqual(proxy["image"], "registry.example.com/brancz/kube-rbac-proxy:v0.18.1")
        self.assertEqual(proxy["args"], [
            "--secure-listen-address=0.0.0.0:9847", "--upstream=http://127.0.0.1:9849/", "--allow-paths=/metrics",
            "--tls-cert-file=/etc/kube-rbac-proxy/tls/tls.crt",
            "--tls-private-key-file=/etc/kube-rbac-proxy/tls/tls.key"])
        self.assertEqual(proxy["ports"], [{"name": "metrics", "containerPort": 9847, "protocol": "TCP"}])
        sc = proxy["securityContext"]
        self.assertEqual((sc["privileged"], sc["allowPrivilegeEscalation"], sc["readOnlyRootFilesystem"],
                          sc["runAsNonRoot"], sc["capabilities"]), (False, False, True, True, {"drop": ["ALL"]}))
        self.assertEqual(yaml.safe_load(config_file(objs))["metrics_address"], "127.0.0.1:9849")
        self.assertEqual([p["name"] for p in agent_container(pod)["ports"]], ["health"])
        (sm,) = chart.find(objs, "ServiceMonitor")
        ep = sm["spec"]["endpoints"][0]
        self.assertEqual((ep["port"], ep["scheme"], ep["bearerTokenFile"]),
                         ("metrics", "https", "/var/run/secrets/kubernetes.io/serviceaccount/token"))
        self.assertEqual(ep["tlsConfig"], {"serverName": "stormwatch.monitoring.svc",
                                           "ca": {"secret": {"name": "stormwatch-metrics-tls", "key": "ca.crt"}}})
        # Self-signed without a Secret; PodMonitor needs a token Secret; the proxy needs a token.
        (sm,) = chart.find(self.render(sets=["rbacProxy.enabled=true", "rbacProxy.image.repository=r/krp",
                                             "rbacProxy.image.tag=v1", "serviceMonitor.enabled=true"]), "ServiceMonitor")
        self.assertEqual(sm["spec"]["endpoints"][0]["tlsConfig"], {"insecureSkipVerify": True})
        proxy_sets = ["rbacProxy.enabled=true", "rbacProxy.image.repository=r/krp", "rbacProxy.image.tag=v1"]
        r = chart.render(sets=proxy_sets + ["podMonitor.enabled=true"], check=False)
        self.assertIn("rbacProxy.enabled with podMonitor.enabled needs rbacProxy.bearerTokenSecret", r.stderr)
        (pm,) = chart.find(self.render(sets=proxy_sets + [
            "podMonitor.enabled=true", "rbacProxy.bearerTokenSecret.name=prom-token",
            "rbacProxy.bearerTokenSecret.key=token"]), "PodMonitor")
        self.assertEqual(pm["spec"]["podMetricsEndpoints"][0]["authorization"],
                         {"type": "Bearer", "credentials": {"name": "prom-token", "key": "token"}})
        r = chart.render(sets=proxy_sets + ["serviceAccount.automountServiceAccountToken=false"], check=False)
        self.assertIn("rbacProxy.enabled needs serviceAccount.automountServiceAccountToken", r.stderr)

    def test_network_policy(self):
        objs = self.render(os.path.join(chart.CHART, "ci", "rbac-proxy-values.yaml"))
        (np,) = chart.find(objs, "NetworkPolicy")
        (ds,) = chart.find(objs, "DaemonSet")
        self.assertEqual(np["spec"]["podSelector"]["matchLabels"], ds["spec"]["selector"]["matchLabels"])
        self.assertEqual(np["spec"]["policyTypes"], ["Ingress"])
        self.assertEqual(np["spec"]["ingress"], [{
            "ports": [{"port": "metrics", "protocol": "TCP"}],
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                      "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
                     {"ipBlock": {"cidr": "10.0.0.0/8"}}]}])
        self.assertEqual(chart.find(self.render(), "NetworkPolicy"), [])
        r = chart.render(sets=["networkPolicy.enabled=true", "networkPolicy.namespaceSelector=null",
                               "networkPolicy.podSelector=null"], check=False)
        self.assertIn("networkPolicy.enabled needs namespaceSelector, podSelector or from", r.stderr)

    def test_alert_labels_for_and_runbooks(self):
        spec = chart.rule_groups(namespace="platform-monitoring")
        rules = [r for g in spec["groups"] for r in g["rules"]]
        for r in rules:
            self.assertEqual(set(r["labels"]), {"severity", "namespace"}, r["alert"])
            self.assertEqual(r["labels"]["namespace"], namespace_label(r, "platform-monitoring"))
            self.assertIn("for", r, r["alert"])
            self.assertTrue(r["annotations"]["runbook_url"].startswith("https://stormwatch.invalid/docs/runbooks/"))
            if r["labels"]["severity"] == "critical":
                self.assertEqual(r["for"], "1m", "critical alerts never page on one scrape")
            for text in (r["annotations"]["summary"], r["annotations"]["description"]):
                self.assertNotIn("[[", text)
        # Thresholds in the texts are the agent's config, not numbers written in the catalog.
        spec = chart.rule_groups(sets=["config.detectors.update_loop.object_rate=7",
                                       "config.detectors.list_storm.bytes_rate=10485760",
                                       "prometheusRule.for=2m", "runbookBaseURL=https://docs.example.com/rb/"])
        by = {r["alert"]: r for g in spec["groups"] for r in g["rules"]}
        self.assertIn("at least 7 writes/s on one object for 10 s", by["StormwatchUpdateLoop"]["annotations"]["description"])
        self.assertIn("or 10 MiB/s for 15 s", by["StormwatchListStorm"]["annotations"]["description"])
        self.assertEqual(by["StormwatchUpdateLoop"]["for"], "2m")
        self.assertEqual(by["StormwatchAgentAbsent"]["for"], "15m")  # agent health keeps its own
        self.assertEqual(by["StormwatchUpdateLoop"]["annotations"]["runbook_url"],
                         "https://docs.example.com/rb/update_loop.md")
        # A storm label set wins over additionalAlertLabels? No: severity/namespace are the chart's.
        spec = chart.rule_groups(sets=["prometheusRule.additionalAlertLabels.namespace=x"])
        self.assertEqual(spec["groups"][0]["rules"][0]["labels"]["namespace"],
                         namespace_label(spec["groups"][0]["rules"][0], "stormwatch"))

    def test_no_foreign_repository_url(self):
        """The repository has no public home yet: nothing may point at a GitHub account that is
        not the project's (the old runbook links did)."""
        hits = []
        for root in (chart.CHART, os.path.join(chart.REPO, "deploy"), os.path.join(chart.REPO, "docs", "helm.md")):
            paths = [root] if os.path.isfile(root) else [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
            for path in paths:
                with open(path, errors="replace") as f:
                    if "github.com" in f.read():
                        hits.append(os.path.relpath(path, chart.REPO))
        self.assertEqual(hits, [])


class DashboardTest(unittest.TestCase):
    def test_every_exported_family_has_a_panel(self):
        """Every metric family the agent registers (exporters/*.cc) is queried by at least one
        panel, and the dashboard carries no 'planned'/'not exported' placeholder."""
        families = chart.source_metric_families()
        self.assertGreaterEqual(len(families), 30, families)
        self.assertEqual(families - chart.exported_metrics(), set(), "registered but not in README's metrics table")
        used = set()
        for where, expr in chart.dashboard_exprs():
            if where.startswith("panel"):
                used |= chart.families(chart.metric_names(chart.grafana_expr(expr)), families)
        self.assertEqual(families - used, set(), "metric families without a dashboard panel")
        with open(chart.DASHBOARD) as f:
            text = f.read().lower()
        for stale in ("planned", "not exported", "todo"):
            self.assertNotIn(stale, text)
        print("\ndashboard: all %d exported families in panels" % len(families), file=sys.stderr)


class MetadataTest(unittest.TestCase):
    def test_license_changelog_security_and_chart_metadata(self):
        with open(os.path.join(chart.REPO, "LICENSE")) as f, open("/usr/share/common-licenses/Apache-2.0") as g:
            self.assertEqual(f.read(), g.read(), "LICENSE is the Apache-2.0 text")
        with open(os.path.join(chart.REPO, "CHANGELOG.md")) as f:
            changelog = f.read()
        with open(os.path.join(chart.CHART, "Chart.yaml")) as f:
            meta = yaml.safe_load(f)
        self.assertIn("## [%s] - " % meta["appVersion"], changelog)
        self.assertIn("## [Unreleased]", changelog)
        with open(os.path.join(chart.REPO, "SECURITY.md")) as f:
            security = f.read()
        for needed in ("## Reporting a vulnerability", "reads the memory of kube-apiserver and etcd",
                       "secrets never leave the agent", "CAP_BPF"):
            self.assertIn(needed, security)
        for key in ("home", "sources", "icon", "maintainers"):
            self.assertTrue(meta.get(key), key)
        self.assertTrue(meta["icon"].startswith("data:image/svg+xml;base64,"))
        for url in [meta["home"]] + meta["sources"]:
            self.assertRegex(url, r"^https://stormwatch\.invalid/", "placeholder until the project has a home")

    def test_kernel_floor_is_stated(self):
        floor = "5.17"
        notes = chart.render(notes=True)
        self.assertIn("Linux 5.17+ (the BPF object uses bpf_loop) with BTF", notes)
        self.assertIn("x86_64", notes)
        for path in (os.path.join(chart.CHART, "README.md"), os.path.join(chart.REPO, "docs", "helm.md"),
                     os.path.join(chart.CHART, "ci", "old-kernel-values.yaml")):
            with open(path) as f:
                text = f.read()
            self.assertIn(floor, text, path)
            self.assertNotIn("5.8-5.10", text, path)


class ImageTest(unittest.TestCase):
    """The Dockerfile cannot be built here (no docker); what it runs can be checked."""

    def test_runtime_packages_of_the_agent(self):
        if not os.path.exists(AGENT):
            self.fail("missing %s (build the stormwatch target)" % AGENT)
        r = subprocess.run(["bash", os.path.join(chart.REPO, "deploy", "runtime-packages.sh"), AGENT],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        pkgs = dict(line.split("=", 1) for line in r.stdout.split())
        for needed in ("libbpf1", "libelf1", "libcapstone4"):
            self.assertIn(needed, pkgs)
        for pkg, version in pkgs.items():
            installed = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True)
            self.assertEqual(installed.stdout, version, pkg)
        print("\nimage runtime packages: %s" % " ".join(sorted(pkgs)), file=sys.stderr)

    def test_dockerfile(self):
        with open(os.path.join(chart.REPO, "Dockerfile")) as f:
            text = f.read()
        self.assertRegex(text, r"(?m)^FROM debian:bookworm AS build$")
        self.assertRegex(text, r"(?m)^FROM debian:bookworm-slim$")
        self.assertIn("RUN bash scripts/setup.sh", text)
        self.assertIn("deploy/runtime-packages.sh", text)
        with open(os.path.join(chart.CHART, "values.yaml")) as f:
            agent = yaml.safe_load(f)["agent"]
        self.assertIn("EXPOSE %d %d" % (agent["metricsPort"], agent["healthPort"]), text)
        with open(os.path.join(chart.CHART, "Chart.yaml")) as f:
            app_version = yaml.safe_load(f)["appVersion"]
        if os.path.exists(AGENT):
            out = subprocess.run([AGENT, "--version"], capture_output=True, text=True).stdout
            self.assertIn(app_version, out, "Chart appVersion != agent --version")


def config_file(objs):
    """The text of the config file the DaemonSet mounts (key config.yaml of its ConfigMap)."""
    (ds,) = chart.find(objs, "DaemonSet")
    (vol,) = [v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    (cm,) = [o for o in chart.find(objs, "ConfigMap") if o["metadata"]["name"] == vol["configMap"]["name"]]
    return cm["data"]["config.yaml"]


def namespace_label(rule, release_namespace):
    """The `namespace` label an alert rule must set: a storm's objects' namespace where the series
    has one (object_namespace), else the release namespace; agent health: the release namespace."""
    if "stormwatch_storm_active" in rule["expr"]:
        return ("{{ if $labels.object_namespace }}{{ $labels.object_namespace }}{{ else }}%s{{ end }}"
                % release_namespace)
    return release_namespace


def agent_container(pod):
    (c,) = [c for c in pod["containers"] if c["name"] == "agent"]
    return c


def pod_template(objs):
    (ds,) = chart.find(objs, "DaemonSet")
    return ds["spec"]["template"]


def render_objects(values_text):
    """The chart rendered with a values file holding `values_text` (--set cannot give lists)."""
    with tempfile.NamedTemporaryFile("w", suffix="-values.yaml") as f:
        f.write(values_text)
        f.flush()
        return chart.objects(chart.render(f.name))


def run_agent(objs):
    """Runs the agent with the DaemonSet's args and --version, the mounted file replaced by the
    rendered one: the agent parses flags and file, then exits without attaching."""
    (ds,) = chart.find(objs, "DaemonSet")
    c = agent_container(ds["spec"]["template"]["spec"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.yaml")
        with open(path, "w") as f:
            f.write(config_file(objs))
        args = [a.replace("=" + CONFIG_PATH, "=" + path) for a in c["args"]]
        return subprocess.run([AGENT, *args, "--version"], capture_output=True, text=True, timeout=30)


def _merge(a, b):
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        elif v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


if __name__ == "__main__":
    unittest.main(verbosity=2)
