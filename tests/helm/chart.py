"""Shared helpers of the chart tests: render the chart with `helm template`, validate objects
against the real Kubernetes 1.28 OpenAPI and Prometheus Operator CRD schemas, read the alert
rules and the dashboard's PromQL.

Also the generator of deploy/prometheus/stormwatch-rules.yaml (the plain rules file is the
chart's PrometheusRule spec with default values; test_chart checks they are the same):

    python3 tests/helm/chart.py write-rules     # after changing helm/stormwatch/files/alerts.yaml

and of the `config` part of helm/stormwatch/values.schema.json, from the agent binary
(STORMWATCH_BUILD_DIR/stormwatch config-schema; test_chart checks they are the same):

    python3 tests/helm/chart.py write-schema    # after changing the agent's configuration keys

Debian's python3 with python3-yaml and python3-jsonschema.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
CHART = os.path.join(REPO, "helm", "stormwatch")
# CI clones the repo with a copy of shared/ beside it; STORMWATCH_SHARED_DIR overrides.
SHARED = os.path.abspath(os.environ.get("STORMWATCH_SHARED_DIR", os.path.join(REPO, "..", "shared")))
SCHEMAS = os.path.join(SHARED, "schemas")
BUILD_DIR = os.environ.get("STORMWATCH_BUILD_DIR", os.path.join(REPO, "build"))
# helm v3.17.3, unpacked into the build folder by scripts/setup.sh.
HELM = os.environ.get("STORMWATCH_HELM", os.path.join(BUILD_DIR, "tools", "helm"))
HELM_ENV = dict(os.environ, HELM_CACHE_HOME="/tmp/stormwatch-helm/cache",
                HELM_CONFIG_HOME="/tmp/stormwatch-helm/config", HELM_DATA_HOME="/tmp/stormwatch-helm/data")
VALUES_SCHEMA = os.path.join(CHART, "values.schema.json")
# The chart has no default image (image.repository is required); renders in the tests start from
# this values file, which every other -f and --set overrides.
IMAGE_VALUES = os.path.join(HERE, "image-values.yaml")
# add_executable(stormwatch) in the top-level CMakeLists.txt: the build folder's root.
AGENT = os.environ.get("STORMWATCH_AGENT", os.path.join(BUILD_DIR, "stormwatch"))
# Keys of the agent's file the chart writes itself (from values `agent`): not in values `config`.
CHART_OWNED_KEYS = ("metrics_address", "health_address", "log_level")
RULES_FILE = os.path.join(REPO, "deploy", "prometheus", "stormwatch-rules.yaml")
DASHBOARD = os.path.join(CHART, "dashboards", "stormwatch.json")
RUNBOOKS = os.path.join(REPO, "docs", "runbooks")


# ---- rendering ----

def variants():
    """(name, values file or None): the default values and every documented variant (ci/)."""
    ci = os.path.join(CHART, "ci")
    out = [("default", None)]
    for f in sorted(os.listdir(ci)):
        if f.endswith("-values.yaml"):
            out.append((f[:-len("-values.yaml")], os.path.join(ci, f)))
    return out


def helm(*args):
    """Runs helm (no cluster: template and lint only), with its caches out of the home folder."""
    return subprocess.run([HELM, *args], capture_output=True, text=True, env=HELM_ENV, timeout=60)


def render(values_file=None, sets=(), namespace="monitoring", name="stormwatch", notes=False, check=True,
           extra=(), chart_dir=CHART, image=True):
    """`helm template` of the chart; values_file may be a list of files. With notes=True, the
    rendered NOTES.txt instead (helm template never prints it: a copy of the chart holds it as a
    normal template)."""
    files = values_file if isinstance(values_file, (list, tuple)) else [values_file] if values_file else []
    files = ([IMAGE_VALUES] if image else []) + list(files)
    argv = ["template", name, chart_dir, "--namespace", namespace, *extra]
    for f in files:
        argv += ["-f", f]
    for s in sets:
        argv += ["--set", s]
    if notes:
        # helm template never prints NOTES.txt and parses every other output as YAML: a copy of
        # the chart wraps NOTES.txt in a named template and emits it as a YAML string.
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "stormwatch")
            shutil.copytree(chart_dir, copy)
            with open(os.path.join(copy, "templates", "NOTES.txt")) as f:
                text = f.read()
            with open(os.path.join(copy, "templates", "_notes_test.tpl"), "w") as f:
                f.write('{{- define "stormwatch.testNotes" -}}\n' + text + '{{- end -}}\n')
            with open(os.path.join(copy, "templates", "notes-test.yaml"), "w") as f:
                f.write('notes: {{ include "stormwatch.testNotes" . | toJson }}\n')
            argv[2] = copy
            r = helm(*argv, "--show-only", "templates/notes-test.yaml")
            if r.returncode == 0:
                r.stdout = yaml.safe_load(r.stdout)["notes"]
    else:
        r = helm(*argv)
    if not check:
        return r
    if r.returncode != 0:
        raise AssertionError("helm template failed: %s" % r.stderr)
    return r.stdout


def lint(values_file=None, sets=(), strict=True, image=True):
    argv = ["lint", CHART, "--namespace", "monitoring"]
    if strict:
        argv.append("--strict")
    if image:
        argv += ["-f", IMAGE_VALUES]
    if values_file:
        argv += ["-f", values_file]
    for s in sets:
        argv += ["--set", s]
    return helm(*argv)


def objects(text):
    """The rendered documents as dicts (empty documents dropped)."""
    return [d for d in yaml.safe_load_all(text) if d]


def find(objs, kind):
    return [o for o in objs if o.get("kind") == kind]


def rule_groups(values_file=None, sets=(), namespace="stormwatch"):
    """The `groups` of the PrometheusRule the chart renders (prometheusRule.enabled forced on),
    installed in `namespace` (docs/helm.md's: the alerts' namespace label)."""
    objs = objects(render(values_file, sets=list(sets) + ["prometheusRule.enabled=true"], namespace=namespace))
    (rule,) = find(objs, "PrometheusRule")
    return rule["spec"]


def dump_rules(spec):
    header = ("# GENERATED from helm/stormwatch/files/alerts.yaml by `python3 tests/helm/chart.py "
              "write-rules`;\n# do not edit. The same rules as the chart's PrometheusRule "
              "(default values), for Prometheus\n# without the Prometheus Operator: "
              "add this file to rule_files. Scrape the agents with a job name\n"
              "# matching .*stormwatch.* (agent health alerts select on it). Every alert carries\n"
              "# namespace=stormwatch (the namespace docs/helm.md installs the agents in) and\n"
              "# runbook links to a placeholder host: render the chart with your own namespace and\n"
              "# runbookBaseURL (helm template ... --set prometheusRule.enabled=true) to change them.\n")
    # Keys in the order people read a rule in.
    order = ["alert", "expr", "for", "labels", "annotations"]
    ann_order = ["summary", "description", "runbook_url"]
    groups = []
    for g in spec["groups"]:
        rules = []
        for r in g["rules"]:
            r = {k: r[k] for k in sorted(r, key=lambda k: order.index(k) if k in order else 99)}
            r["annotations"] = {k: r["annotations"][k] for k in sorted(
                r["annotations"], key=lambda k: ann_order.index(k) if k in ann_order else 99)}
            rules.append(r)
        groups.append({"name": g["name"], "rules": rules})
    return header + yaml.safe_dump({"groups": groups}, sort_keys=False, width=100,
                                   default_flow_style=False)


# ---- schemas ----

def _strict(schema):
    """Unknown fields are errors, as kube-apiserver's strict field validation (kubectl's default
    --validate=strict) and CRD pruning make them: close every object schema that lists its
    properties, unless it preserves unknown fields. OpenAPI's nullable becomes a null type."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        if out.get("nullable") and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


class Schemas:
    """apiVersion/kind -> a jsonschema validator, from the files in shared/schemas."""

    def __init__(self, root=SCHEMAS):
        self.by_gvk = {}   # (apiVersion, kind) -> (document, component name or None)
        k8s = os.path.join(root, "kubernetes-v1.28")
        if not os.path.isdir(k8s):
            # A missing input fails the test (it never skips): say where it was looked for and
            # how to point at it.
            raise FileNotFoundError(
                "no Kubernetes schemas at %s: the tests read shared/schemas beside the repository; "
                "configure with -DSTORMWATCH_SHARED_DIR=<shared folder> (or set the environment "
                "variable of that name) when shared/ is elsewhere" % k8s)
        for f in sorted(os.listdir(k8s)):
            if not f.endswith(".json"):
                continue
            with open(os.path.join(k8s, f)) as fh:
                doc = _strict(json.load(fh))
            for cname, s in doc["components"]["schemas"].items():
                for gvk in s.get("x-kubernetes-group-version-kind", []):
                    api = gvk["version"] if not gvk["group"] else "%s/%s" % (gvk["group"], gvk["version"])
                    # The same kind appears in several files (e.g. meta types); keep its home file.
                    self.by_gvk.setdefault((api, gvk["kind"]), (doc, cname))
            if f == "api__v1_openapi.json":
                self.core = doc
        crds = os.path.join(root, "prometheus-operator")
        for f in sorted(os.listdir(crds)):
            if not f.endswith(".yaml"):
                continue
            with open(os.path.join(crds, f)) as fh:
                crd = yaml.safe_load(fh)
            for v in crd["spec"]["versions"]:
                api = "%s/%s" % (crd["spec"]["group"], v["name"])
                self.by_gvk[(api, crd["spec"]["names"]["kind"])] = (
                    _strict(v["schema"]["openAPIV3Schema"]), None)
        self._validators = {}

    def _validator(self, doc, ref):
        key = (id(doc), ref)
        if key not in self._validators:
            schema = {"$ref": "#/components/schemas/" + ref} if ref else doc
            with warnings.catch_warnings():  # deprecated in jsonschema 4.18+, Debian's is 4.10
                warnings.simplefilter("ignore", DeprecationWarning)
                resolver = jsonschema.RefResolver(base_uri="", referrer=doc)
            self._validators[key] = jsonschema.Draft7Validator(schema, resolver=resolver)
        return self._validators[key]

    def errors(self, obj):
        """Schema errors of one object, as strings (empty when valid)."""
        key = (obj.get("apiVersion"), obj.get("kind"))
        if key not in self.by_gvk:
            return ["no schema for %s %s" % key]
        doc, ref = self.by_gvk[key]
        v = self._validator(doc, ref)
        errs = ["%s: %s" % ("/".join(str(p) for p in e.absolute_path), e.message)
                for e in v.iter_errors(obj)]
        if ref is None:
            # A CRD schema says only `metadata: {type: object}`; the API server still applies
            # ObjectMeta to custom resources.
            meta = self._validator(self.core, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
            errs += ["metadata/%s: %s" % ("/".join(str(p) for p in e.absolute_path), e.message)
                     for e in meta.iter_errors(obj.get("metadata", {}))]
        # The API server's own checks assume a schema-valid object.
        return errs or api_server_checks(obj)


_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "Namespace", "PriorityClass"}


def _label_key_errors(key):
    prefix, _, name = key.rpartition("/")
    errs = []
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        errs.append("label key %r: bad prefix" % key)
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        errs.append("label key %r: bad name" % key)
    return errs


def api_server_checks(obj):
    """What kube-apiserver validates beyond the OpenAPI schema, for the fields the chart sets:
    object names, label syntax, namespaces, unique container and port names."""
    errs = []
    meta = obj.get("metadata", {})
    name = meta.get("name", "")
    kind = obj.get("kind")
    if kind == "Service":
        if not (len(name) <= 63 and _DNS1035_LABEL.match(name)):
            errs.append("metadata.name %r: not a DNS-1035 label" % name)
    elif not (len(name) <= 253 and _DNS1123_SUBDOMAIN.match(name)):
        errs.append("metadata.name %r: not a DNS-1123 subdomain" % name)
    if kind in CLUSTER_SCOPED:
        if "namespace" in meta:
            errs.append("cluster-scoped %s has a namespace" % kind)
    elif not meta.get("namespace"):
        errs.append("namespaced %s without metadata.namespace" % kind)
    def labels(where, d):
        for k, v in (d or {}).items():
            errs.extend("%s: %s" % (where, e) for e in _label_key_errors(k))
            if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.match(v):
                errs.append("%s: label %s=%r: bad value" % (where, k, v))
    labels("metadata.labels", meta.get("labels"))
    if kind == "DaemonSet":
        tmpl = obj["spec"]["template"]
        labels("spec.template.metadata.labels", tmpl.get("metadata", {}).get("labels"))
        sel = obj["spec"]["selector"].get("matchLabels", {})
        if not set(sel.items()) <= set(tmpl["metadata"]["labels"].items()):
            errs.append("selector does not match the template's labels")
        pod = tmpl["spec"]
        names = [c["name"] for c in pod.get("containers", []) + pod.get("initContainers", [])]
        if len(names) != len(set(names)):
            errs.append("duplicate container names")
        vols = [v["name"] for v in pod.get("volumes", [])]
        if len(vols) != len(set(vols)):
            errs.append("duplicate volume names")
        for c in pod["containers"]:
            ports = [p.get("name") for p in c.get("ports", []) if p.get("name")]
            if len(ports) != len(set(ports)):
                errs.append("duplicate port names in %s" % c["name"])
            for p in ports:
                if len(p) > 15 or not _DNS1123_LABEL.match(p):
                    errs.append("port name %r: not an IANA service name" % p)
            for m in c.get("volumeMounts", []):
                if m["name"] not in vols:
                    errs.append("volumeMount %s has no volume" % m["name"])
    return errs


# ---- metrics and PromQL ----

def exported_metrics(readme=os.path.join(REPO, "README.md")):
    """Metric names of the README's metrics table (the agent's metrics contract)."""
    names = set()
    with open(readme) as f:
        for line in f:
            if line.startswith("| `stormwatch_"):   # a row may name several: `a`, `b` | labels |
                names |= set(re.findall(r"`(stormwatch_[a-z_]+)`", line.split("|")[1]))
    return names


def source_metric_families(exporters=os.path.join(REPO, "exporters")):
    """Metric family names the agent exports: every "stormwatch_..." string literal of
    exporters/*.cc (`.Name("...")` of prometheus-cpp families, and the hand-built exempt family's
    constant)."""
    names = set()
    for f in sorted(os.listdir(exporters)):
        if f.endswith(".cc"):
            with open(os.path.join(exporters, f)) as fh:
                names |= set(re.findall(r'"(stormwatch_[a-z_]+)"', fh.read()))
    return names


def families(names, exported):
    """Metric names -> metric family names: a histogram's _bucket/_sum/_count series belong to
    the family the README (and `# TYPE`) names."""
    out = set()
    for n in names:
        base = re.sub(r"_(bucket|sum|count)$", "", n)
        out.add(base if base != n and base in exported else n)
    return out


GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h",
                "${datasource}": "default", "$cluster": ".*", "$node": ".*", "$client": ".*"}


def grafana_expr(expr):
    """A dashboard expression with Grafana's variables replaced by what Grafana sends."""
    for k in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace(k, GRAFANA_VARS[k])
    return expr


def dashboard_exprs(path=DASHBOARD):
    """(where, PromQL) of every panel target and every label_values() variable query."""
    with open(path) as f:
        dash = json.load(f)
    out = []
    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append(("panel %r %s" % (p["title"], t.get("refId")), t["expr"]))
            walk(p.get("panels", []))
    walk(dash["panels"])
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.match(r"^label_values\((.*),\s*([a-zA-Z_]+)\)$", q)
            if not m:
                raise AssertionError("variable %s: unsupported query %r" % (v["name"], q))
            out.append(("variable %s" % v["name"], m.group(1)))
    return out


PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                   "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr):
    """Metric names a PromQL expression selects. A small lexer, enough for this project's
    expressions: strings, label matchers, ranges, grouping lists and function calls are removed;
    the identifiers left are metric names. promtool checks the syntax separately."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # string literals
    s = re.sub(r"\{[^}]*\}", " ", s)                          # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)                         # range selectors
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        word = m.group(0)
        rest = s[m.end():].lstrip()
        if rest.startswith("("):          # function or aggregation
            continue
        if word.lower() in PROMQL_KEYWORDS:
            continue
        if re.match(r"^\d", word):
            continue
        names.add(word)
    return names


# ---- values.schema.json ----

def agent_config_schema(agent=AGENT):
    """values.schema.json's `config`: the agent's own JSON Schema of its configuration file
    (`stormwatch config-schema`, draft-07) without the keys the chart writes itself and without
    `$schema` (only meaningful at a document's root)."""
    r = subprocess.run([agent, "config-schema"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError("%s config-schema failed (%d): %s" % (agent, r.returncode, r.stderr))
    schema = json.loads(r.stdout)
    schema.pop("$schema", None)
    for k in CHART_OWNED_KEYS:
        del schema["properties"][k]
    return schema


def values_schema_with(config_schema, path=VALUES_SCHEMA):
    with open(path) as f:
        doc = json.load(f)
    doc["properties"]["config"] = config_schema
    return json.dumps(doc, indent=2) + "\n"


def main(argv):
    if argv[1:] == ["write-schema"]:
        text = values_schema_with(agent_config_schema())
        with open(VALUES_SCHEMA, "w") as f:
            f.write(text)
        print("wrote", VALUES_SCHEMA)
        return 0
    if argv[1:] == ["write-rules"]:
        os.makedirs(os.path.dirname(RULES_FILE), exist_ok=True)
        with open(RULES_FILE, "w") as f:
            f.write(dump_rules(rule_groups()))
        print("wrote", RULES_FILE)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
