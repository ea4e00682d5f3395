"""End to end, as root: the agent on a real upstream API server.

k8s.io/apiextensions-apiserver 0.36.4 (Kubernetes 1.36's k8s.io/apiserver: its filters,
RequestInfo, authentication and authorization delegation, APF, apiserver_request_total, x/net
HTTP/2), built stripped from Debian sid's sources with Go 1.26 (scripts/build_apiextensions_apiserver.sh),
serving a CustomResourceDefinition on forky's etcd 3.5.30 over TLS. Bearer tokens (bound
service-account JWTs) and authorization go to tests/e2e/delegation_harness.py, as an aggregated
API server's go to kube-apiserver; client certificates are checked by the server itself.

  - the agent attaches (its layout derived from the binary's type data) and, per verb, group,
    version, resource, subresource, scope and code, its stormwatch_requests_total deltas equal the
    server's own apiserver_request_total deltas exactly, over HTTP/2 (kubectl, h2load, client-go's
    runaway operator on a connection opened before the agent) and HTTP/1.1 (the Python client);
  - the identities it names are the ones in the server's audit log, request for request;
  - seed 000's update loop on the CRD raises update_loop for the operator's service account, and
    seed 004's status writers from a stale cache raise conflict_storm for theirs;
  - client-go controllers speaking application/vnd.kubernetes.protobuf (the apiextensions
    clientset, tests/clients/crd_controller) give the same object facts as JSON: a metadata-only
    update loop is named so with its generation, every 200 write response is read as an object
    of its encoding, exactly; a cleanup controller that stops releasing its finalizer (all of it
    in protobuf, deletes too) raises stuck_finalizers naming it; and every storage call the
    server made for the CRDs (its Txns for the writes) is one the agent saw at etcd.
"""
import collections
import datetime
import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import Agent, parse_metrics, require_bpf_privileges  # noqa: E402
from cluster import Cluster, default_go_out  # noqa: E402

DEBIAN_DIR = os.environ.get("STORMWATCH_DEBIAN_DIR",
                            os.path.join(os.environ.get("STORMWATCH_BUILD_DIR", "build"), "debian"))
ETCD_3_5 = os.path.join(DEBIAN_DIR, "forky/root/usr/bin/etcd")
NS = "etl"
GROUP, VERSION, RESOURCE = "batch.company.com", "v1", "datajobs"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "datajobs.batch.company.com"},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"plural": "datajobs", "singular": "datajob", "kind": "DataJob", "listKind": "DataJobList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}
COLLECTION = "/apis/%s/%s/namespaces/%s/%s" % (GROUP, VERSION, NS, RESOURCE)
# The CRDs tests/clients/crd_controller creates and writes (crd() there).
CRD_GROUP = "stormwatch.test"
CLEANUP_FINALIZER = "stormwatch.test/cleanup"


def stormwatch_crd(plural):
    kind = plural.capitalize()
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "%ss.%s" % (plural, CRD_GROUP)},
        "spec": {"group": CRD_GROUP, "scope": "Namespaced",
                 "names": {"plural": plural + "s", "singular": plural, "kind": kind, "listKind": kind + "List"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


def datajob(name):
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "DataJob",
            "metadata": {"name": name, "namespace": NS}, "spec": {"schedule": "0 2 * * *", "image": "etl:1.0"}}


def create_datajobs(kubectl, names):
    """Creates the DataJob CRD, waits until it is Established and creates one object per name;
    kubectl(*args, input=None) runs kubectl as the admin and returns its output."""
    kubectl("create", "--raw", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "-f", "-",
            input=json.dumps(CRD))
    deadline = time.monotonic() + 30
    while True:
        crd = json.loads(kubectl("get", "--raw", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                 + CRD["metadata"]["name"]))
        if any(c["type"] == "Established" and c["status"] == "True"
               for c in crd.get("status", {}).get("conditions", [])):
            break
        if time.monotonic() > deadline:
            raise AssertionError("CRD never Established")
        time.sleep(0.2)
    for n in names:
        kubectl("create", "--raw", COLLECTION, "-f", "-", input=json.dumps(datajob(n)))


def sa(ns, name):
    return "system:serviceaccount:%s:%s" % (ns, name)


def server_counts(metrics_text):
    """apiserver_request_total of resource requests: {(verb, group, version, resource,
    subresource, scope, code): count}."""
    out = {}
    for name, l, v in parse_metrics(metrics_text):
        if name == "apiserver_request_total" and l.get("resource") and v:
            key = (l["verb"], l["group"], l["version"], l["resource"], l["subresource"], l["scope"], l["code"])
            out[key] = out.get(key, 0) + int(v)
    return out


def agent_counts(agent):
    """stormwatch_requests_total of resource requests, by the same labels, and per client."""
    by_labels, by_client = {}, {}
    for key, v in agent.request_counts().items():
        if not key[4]:
            continue
        by_labels[key[1:]] = by_labels.get(key[1:], 0) + v
        by_client[key[0]] = by_client.get(key[0], 0) + v
    return by_labels, by_client


def delta(after, before):
    d = {k: v - before.get(k, 0) for k, v in after.items()}
    return {k: v for k, v in d.items() if v}


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class RealApiServer(unittest.TestCase):
    def setUp(self):
        require_bpf_privileges(self)
        bin_path = os.path.join(default_go_out(), "apiextensions-apiserver")
        self.assertTrue(os.path.exists(bin_path), "%s missing: cmake builds it (scripts/build_apiextensions_apiserver.sh)" % bin_path)
        self.assertTrue(os.path.exists(ETCD_3_5), "%s missing: scripts/setup.sh fetches it" % ETCD_3_5)
        self.c = Cluster(server="apiextensions", etcd_bin=ETCD_3_5).start()
        self.addCleanup(self.c.stop)
        self.agent = None

    def tearDown(self):
        if self.agent:
            self.agent.stop()

    def raw(self, *args, kubeconfig=None, input=None):
        r = self.c.kubectl(*args, kubeconfig=kubeconfig or self.c.admin_kubeconfig, input=input)
        self.assertEqual(r.returncode, 0, "%s: %s" % (args, r.stderr))
        return r.stdout

    def create_crd_and_objects(self, names):
        create_datajobs(self.raw, names)

    def start_agent(self, *args, etcd=False):
        pids = [self.c.apiserver_pid] + ([self.c.etcd.pid] if etcd else [])
        self.agent = Agent(self.c.tmp, extra_args=["--pid", ",".join(map(str, pids)), *args]).start()
        self.agent.wait_attached(len(pids))
        info = [l for n, l, v in self.agent.metrics() if n == "stormwatch_target_info" and v == 1
                and l["pid"] == str(self.c.apiserver_pid)]
        self.assertEqual(len(info), 1, info)
        self.assertEqual((info[0]["status"], info[0]["stack"], info[0]["role"]), ("attached", "x/net,std", "apiserver"), info)
        self.assertTrue(info[0]["go_version"].startswith("go1.26."), info)
        self.assertEqual(self.agent.health("/readyz"), (200, "ready\n"))
        return info[0]

    def snapshot(self):
        """The server's counts and the agent's, once both stand still."""
        last = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            now = (server_counts(self.c.apiserver_metrics()), agent_counts(self.agent))
            if now == last:
                return now
            last = now
            time.sleep(0.5)
        return last

    def test_counts_and_identities_equal_the_servers_own(self):
        c = self.c
        self.create_crd_and_objects(["nightly-etl", "hourly-sync", "weekly-report"])
        operator_token = c.mint_token("datajobs-system", "datajob-operator", pod="datajob-operator-6f7c9d5b8-xk2lp")
        reader_token = c.mint_token("monitoring", "dashboard")
        python_token = c.mint_token("analytics", "report-exporter")
        reader = c.kubeconfig(reader_token)
        # A client-go connection opened before the agent: the operator connects, GETs, waits.
        go_file = os.path.join(c.tmp, "go")
        operator = c.run_operator(operator_token, ["nightly-etl", "hourly-sync"], duration=3, wait_file=go_file,
                                  namespace=NS, extra_args=["--workers", "2"])
        time.sleep(1.5)
        self.assertIsNone(operator.poll(), "operator exited early")
        self.start_agent()
        time.sleep(2)  # the server's own controllers settle after the CRD
        (server_before, (agent_before, clients_before)) = self.snapshot()
        by_connection_before = self.agent.metric_value("stormwatch_identity_cache_lookups_total",
                                                       result="connection")
        t0 = time.time()

        # HTTP/2: the operator on its old connection, kubectl, h2load.
        open(go_file, "w").close()
        operator.communicate(timeout=30)
        self.assertEqual(operator.returncode, 0, c.log("operator-%d.log" % (len(c.procs) - 1)))
        for args in (("get", "--raw", COLLECTION), ("get", "--raw", COLLECTION + "/weekly-report"),
                     ("get", "--raw", COLLECTION + "/no-such-job"),
                     ("get", "--raw", "/apis/%s/%s/%s" % (GROUP, VERSION, RESOURCE))):
            r = c.kubectl(*args, kubeconfig=reader)
            self.assertEqual(r.returncode != 0, "no-such-job" in args[-1], r.stderr)
        with open(reader_token) as f:
            token = f.read().strip()
        h2 = subprocess.run(["h2load", "-n", "200", "-c", "2", "-m", "4", "-H", "Authorization: Bearer " + token,
                             c.base_url + COLLECTION + "/weekly-report"], capture_output=True, text=True, timeout=60)
        self.assertIn("200 succeeded", h2.stdout, h2.stdout + h2.stderr)
        # HTTP/1.1: the Python client.
        from kubernetes import client as k8s
        cfg = k8s.Configuration()
        cfg.host = c.base_url
        cfg.ssl_ca_cert = c.ca_file
        with open(python_token) as f:
            cfg.api_key = {"authorization": "Bearer " + f.read().strip()}
        api = k8s.CustomObjectsApi(k8s.ApiClient(cfg))
        for _ in range(5):
            self.assertEqual(len(api.list_namespaced_custom_object(GROUP, VERSION, NS, RESOURCE)["items"]), 3)
            api.get_namespaced_custom_object(GROUP, VERSION, NS, RESOURCE, "hourly-sync")
        api.patch_namespaced_custom_object(GROUP, VERSION, NS, RESOURCE, "hourly-sync",
                                           {"metadata": {"annotations": {"owner": "analytics"}}})

        (server_after, (agent_after, clients_after)) = self.snapshot()
        t1 = time.time()
        theirs, ours = delta(server_after, server_before), delta(agent_after, agent_before)
        total = sum(theirs.values())
        self.assertGreater(total, 300)
        self.assertEqual(ours, theirs)
        self.assertEqual(self.agent.metric_value("stormwatch_capture_lost_total"), 0)

        # Identities: the audit log's user per resource request in the window.
        audited = collections.Counter()
        for e in c.audit_events():
            if e.get("stage") == "ResponseComplete" and e.get("objectRef", {}).get("resource") and \
                    iso(t0) <= e["stageTimestamp"] <= iso(t1) and e["responseStatus"]["code"] not in (401, 403):
                audited[e["user"]["username"]] += 1
        named = delta(clients_after, clients_before)
        for user in (sa("datajobs-system", "datajob-operator"), sa("monitoring", "dashboard"),
                     sa("analytics", "report-exporter")):
            self.assertGreater(named.get(user, 0), 0, named)
        self.assertEqual(named, dict(audited))
        # Nearly every request was named by its connection's authenticated token, not by a lookup
        # of the whole token: all but each connection's first few (those sent before the first
        # answer; kubectl opens one connection per run). The counts are published at the agent's
        # next tick.
        time.sleep(1.5)
        by_connection = self.agent.metric_value("stormwatch_identity_cache_lookups_total",
                                                result="connection") - by_connection_before
        self.assertGreater(by_connection, 0.9 * total, "connection hits %d of %d requests" % (by_connection, total))
        print("\nreal apiserver: %d resource requests, %d series equal to apiserver_request_total; "
              "identities equal to the audit log: %s; %d named by their connection's token"
              % (total, len(theirs), named, by_connection), file=sys.stderr)

    def agent_etcd_by_resource(self):
        """The agent's etcd calls of the API server: {(method, resource): count}."""
        out = {}
        for n, l, v in self.agent.metrics():
            if n == "stormwatch_etcd_requests_total" and l["client"] == "kube-apiserver-etcd-client":
                out[(l["method"], l["resource"])] = out.get((l["method"], l["resource"]), 0) + int(v)
        return out

    def server_etcd_by_resource(self):
        """The server's own etcd_request_duration_seconds_count: {(operation, resource): count}."""
        out = {}
        for name, labels, value in parse_metrics(self.c.apiserver_metrics()):
            if name == "etcd_request_duration_seconds_count" and value:
                # Kubernetes 1.36 labels operation, group, resource (older: type).
                gr = labels["resource"] + ("." + labels["group"] if labels.get("group") else "")
                out[(labels["operation"], gr)] = out.get((labels["operation"], gr), 0) + int(value)
        return out

    def etcd_snapshot(self):
        """The agent's etcd calls and the server's, once both stand still."""
        last = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            now = (self.agent_etcd_by_resource(), self.server_etcd_by_resource())
            if now == last:
                return now
            last = now
            time.sleep(0.5)
        return last

    def test_etcd_side_of_the_lists(self):
        """With etcd attached too: every consistent LIST the real server serves is matched to the
        etcd Range it caused, the Range's resource is the CRD's group-resource, and the agent's
        etcd calls per resource are set beside the server's own etcd_request_duration_seconds."""
        c = self.c
        self.create_crd_and_objects(["nightly-etl", "hourly-sync", "weekly-report"])
        reader = c.kubeconfig(c.mint_token("monitoring", "poller"))
        self.start_agent(etcd=True)
        time.sleep(2)

        def links():
            out = {}
            for n, l, v in self.agent.metrics():
                if n == "stormwatch_etcd_list_links_total":
                    out[l["result"]] = int(v)
            return out

        etcd_by_resource, server_etcd = self.agent_etcd_by_resource, self.server_etcd_by_resource

        time.sleep(1.5)
        links_before, ours_before, theirs_before = links(), etcd_by_resource(), server_etcd()
        consistent = 20
        for i in range(consistent):
            self.raw("get", "--raw", COLLECTION, kubeconfig=reader)
        for i in range(10):  # from the watch cache: no Range
            self.raw("get", "--raw", COLLECTION + "?resourceVersion=0", kubeconfig=reader)
        time.sleep(2)
        links_after, ours_after, theirs_after = links(), etcd_by_resource(), server_etcd()
        matched = links_after.get("matched", 0) - links_before.get("matched", 0)
        unmatched = links_after.get("unmatched", 0) - links_before.get("unmatched", 0)
        ours, theirs = delta(ours_after, ours_before), delta(theirs_after, theirs_before)
        print("\nreal apiserver + etcd: %d consistent LISTs matched to their Range, %d unmatched; "
              "agent's etcd calls %s; server's etcd_request_duration_seconds_count %s"
              % (matched, unmatched, ours, theirs), file=sys.stderr)
        self.assertEqual((matched, unmatched), (consistent, 0))
        crd_resource = "%s.%s" % (RESOURCE, GROUP)
        # Per resource, the agent's etcd calls of the server are the server's own etcd requests
        # (with ConsistentListFromCache each consistent LIST is one revision read: "get").
        self.assertEqual(sum(n for (m, r), n in ours.items() if r == crd_resource),
                         sum(n for (op, r), n in theirs.items() if r == crd_resource))
        self.assertEqual(ours.get(("/etcdserverpb.KV/Range", crd_resource), 0), consistent)
        # The storm evidence reads the same facts: the poller's LISTs each read from etcd.
        self.assertEqual(self.agent.metric_value("stormwatch_capture_lost_total"), 0)

    def test_update_loop_and_conflict_storm_on_a_crd(self):
        c = self.c
        self.create_crd_and_objects(["nightly-etl", "hourly-sync"])
        self.start_agent("--update-loop-resource-rate", "50")
        operator = sa("datajobs-system", "datajob-operator")
        token = c.mint_token("datajobs-system", "datajob-operator", pod="datajob-operator-6f7c9d5b8-xk2lp")
        start = time.monotonic()
        loop = c.run_operator(token, ["nightly-etl", "hourly-sync"], duration=6, namespace=NS,
                              extra_args=["--workers", "2"])
        firing, at = self.agent.wait_alert(lambda a: a["storm"] == "update_loop" and a["state"] == "firing", timeout=15)
        loop.communicate(timeout=30)
        self.assertIsNotNone(firing, "no update_loop alert: %s" % self.agent.alerts)
        self.assertEqual((firing["client"], firing["group"], firing["resource"]), (operator, GROUP, RESOURCE))
        print("\nupdate_loop on the real apiserver after %.1f s: %s" % (at - start, firing["client"]), file=sys.stderr)

        writer = sa("reports", "report-operator")
        token = c.mint_token("reports", "report-operator", pod="report-operator-5d8f7c9b4-x2kq9")
        start = time.monotonic()
        storm = c.run_storm_client("conflict", "--namespace", NS, token_file=token, duration=60)
        firing, at = self.agent.wait_alert(lambda a: a["storm"] == "conflict_storm" and a["state"] == "firing",
                                           timeout=50)
        storm.terminate()
        storm.communicate(timeout=30)
        self.assertIsNotNone(firing, "no conflict_storm alert: %s" % self.agent.alerts)
        self.assertEqual((firing["client"], firing["group"], firing["resource"]), (writer, GROUP, RESOURCE))
        self.assertEqual({a["client"] for a in self.agent.alerts if a["state"] == "firing"}, {operator, writer})
        print("conflict_storm on the real apiserver after %.1f s: %s" % (at - start, firing["client"]), file=sys.stderr)

    def body_counts(self):
        out = {}
        for n, l, v in self.agent.metrics():
            if n == "stormwatch_response_bodies_total":
                out[(l["encoding"], l["result"])] = int(v)
        return out

    def test_protobuf_bodies_give_the_facts_json_gives(self):
        """client-go controllers of CRDs (the apiextensions clientset) speaking
        application/vnd.kubernetes.protobuf: their write responses give the agent the same object
        facts as JSON ones. A metadata-only update loop is called metadata-only with its
        generation, for the protobuf client and for the same client in JSON side by side; a
        cleanup controller whose finalizer stops being released, all of its requests and the
        deletes in protobuf, raises stuck_finalizers naming it and its finalizer."""
        c = self.c
        for plural in ("pbloop", "jsonloop"):
            self.raw("create", "--raw", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "-f", "-",
                     input=json.dumps(stormwatch_crd(plural)))
        config = os.path.join(c.tmp, "stormwatch.yaml")
        with open(config, "w") as f:
            f.write("detectors:\n  stuck_finalizers:\n    stuck_after_s: 10\n    silent_after_s: 10\n"
                    "    resolve_s: 10\n")
        self.start_agent("--config", config, etcd=True)
        time.sleep(2)

        # §1, metadata-only: both loops write an annotation, never the spec.
        clients = {"protobuf": sa("platform", "crd-operator"), "json": sa("platform", "crd-operator-json")}
        bodies_before = self.body_counts()
        ours_before, theirs_before = self.etcd_snapshot()
        loops = {}
        for encoding, plural in (("protobuf", "pbloop"), ("json", "jsonloop")):
            token = c.mint_token("platform", clients[encoding].rsplit(":", 1)[1])
            loops[encoding] = c.run_crd_controller("update-loop", "--name", plural + "s." + CRD_GROUP,
                                                   token_file=token, content_type=encoding, duration=14)
        firing = {}
        for encoding, client in clients.items():
            doc, _ = self.agent.wait_alert(lambda a: a["storm"] == "update_loop" and a["state"] == "firing"
                                           and a["client"] == client, timeout=30)
            self.assertIsNotNone(doc, "no update_loop for %s: %s" % (client, self.agent.alerts))
            firing[encoding] = doc
        summaries = {}
        for encoding, p in loops.items():
            out, _ = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 0, out)
            summaries[encoding] = json.loads(out.strip().splitlines()[-1])
        time.sleep(1.5)
        bodies = delta(self.body_counts(), bodies_before)
        # The write side on etcd: every storage call of the CRDs' resource the server made (its
        # Txns for the updates, the reads of its retries) is one the agent saw, per resource.
        crds = "customresourcedefinitions.apiextensions.k8s.io"
        ours_after, theirs_after = self.etcd_snapshot()
        ours, theirs = delta(ours_after, ours_before), delta(theirs_after, theirs_before)
        print("etcd calls for %s: agent %s; server %s" % (crds, {k: v for k, v in ours.items() if k[1] == crds},
                                                           {k: v for k, v in theirs.items() if k[1] == crds}),
              file=sys.stderr)
        self.assertEqual(sum(n for (m, r), n in ours.items() if r == crds),
                         sum(n for (op, r), n in theirs.items() if r == crds))
        self.assertGreaterEqual(ours.get(("/etcdserverpb.KV/Txn", crds), 0),
                                summaries["protobuf"]["requests"]["PUT 200"] + summaries["json"]["requests"]["PUT 200"])
        print("\nprotobuf and JSON update loops: clients %s; response bodies read %s"
              % ({e: s["requests"] for e, s in summaries.items()}, bodies), file=sys.stderr)
        for encoding, plural in (("protobuf", "pbloop"), ("json", "jsonloop")):
            doc, summary = firing[encoding], summaries[encoding]
            self.assertEqual(summary["content_type"], encoding)
            self.assertEqual(summary["generations"], [1], summary)  # the spec never changed
            self.assertEqual((doc["group"], doc["resource"]), ("apiextensions.k8s.io", "customresourcedefinitions"))
            ev = doc["evidence"]
            self.assertEqual(ev["metadata_only"], "yes", ev)
            self.assertEqual([(o["name"], o.get("generation"), o.get("generation_changed")) for o in ev["top_objects"]],
                             [(plural + "s." + CRD_GROUP, 1, False)], ev)
            self.assertIn("metadata.generation never changes", doc["summary"])
        # Every PUT a client got a 200 for was read as an object of its encoding, and nothing else
        # was (the server's own controllers did not write meanwhile).
        self.assertEqual(bodies.get(("protobuf", "object"), 0), summaries["protobuf"]["requests"]["PUT 200"])
        self.assertEqual(bodies.get(("json", "object"), 0), summaries["json"]["requests"]["PUT 200"])
        # Every write response read was an object, in one of the two encodings.
        self.assertEqual({k: n for k, n in bodies.items() if k[1] != "object"}, {}, bodies)

        update_loop_clients = {a["client"] for a in self.agent.alerts}
        self.assertEqual(update_loop_clients, set(clients.values()))
        self.assertEqual(self.agent.metric_value("stormwatch_capture_lost_total"), 0)

        # §5, on a fresh agent (the loops above would be the silent writers it names): a cleanup
        # controller, then deletes it keeps up with, then deletes it does not.
        self.agent.stop()
        self.start_agent("--config", config, etcd=True)
        controller = sa("platform", "crd-cleanup")
        ctl_token = c.mint_token("platform", "crd-cleanup", pod="crd-cleanup-6b8d9f7c5-hm2rx")
        admin_token = c.mint_token("platform", "crd-admin")
        pause = os.path.join(c.tmp, "cleanup-blocked")
        ctl = c.run_crd_controller("finalizer", "--prefix", "cleanup", "--objects", "16", "--pause-file", pause,
                                   token_file=ctl_token, duration=150)

        def crds(prefix="cleanup"):
            names = self.raw("get", "--raw", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
            return {i["metadata"]["name"]: i["metadata"] for i in json.loads(names)["items"]
                    if i["metadata"]["name"].startswith(prefix)}

        deadline = time.monotonic() + 60
        while len(crds()) < 16 and time.monotonic() < deadline:
            time.sleep(0.5)
        self.assertEqual(len(crds()), 16)

        def delete(first, count):
            d = c.run_crd_controller("delete", "--prefix", "cleanup", "--from", str(first), "--count", str(count),
                                     "--interval", "1s", token_file=admin_token, duration=count + 10)
            out, _ = d.communicate(timeout=count + 20)
            self.assertEqual(json.loads(out.strip().splitlines()[-1])["requests"], {"DELETE 200": count}, out)

        delete(0, 4)  # released by the controller: gone
        time.sleep(2)
        self.assertFalse({"cleanup%02ds.%s" % (i, CRD_GROUP) for i in range(4)} & set(crds()))
        self.assertEqual([a for a in self.agent.alerts if a["storm"] == "stuck_finalizers"], [])

        open(pause, "w").close()  # the controller blocks on its external call
        onset = time.monotonic()
        delete(4, 12)
        doc, at = self.agent.wait_alert(lambda a: a["storm"] == "stuck_finalizers" and a["state"] == "firing",
                                        timeout=max(0.0, onset + 45 - time.monotonic()))
        self.assertIsNotNone(doc, "no stuck_finalizers: %s" % self.agent.alerts)
        stuck = {n for n, m in crds().items() if m.get("deletionTimestamp")}
        self.assertGreaterEqual(len(stuck), 10, stuck)
        self.assertEqual((doc["client"], doc["group"], doc["resource"]),
                         (controller, "apiextensions.k8s.io", "customresourcedefinitions"))
        self.assertEqual(doc["identity"]["pod"], "crd-cleanup-6b8d9f7c5-hm2rx")
        ev = doc["evidence"]
        self.assertEqual(ev["silent_controller"], controller)
        self.assertGreaterEqual(ev["stuck_objects"], 1)
        for example in ev["examples"]:
            self.assertIn(example["name"], stuck)
            self.assertIn(CLEANUP_FINALIZER, example["finalizers"])
        print("stuck_finalizers from protobuf bodies %.1f s after the controller blocked: %s, %d stuck"
              % (at - onset, doc["client"], ev["stuck_objects"]), file=sys.stderr)

        os.unlink(pause)  # unblocked: the backlog is released
        stopped = time.monotonic()
        resolved, _ = self.agent.wait_alert(lambda a: a["storm"] == "stuck_finalizers" and a["state"] == "resolved",
                                            timeout=10 + 15)
        self.assertIsNotNone(resolved, "stuck_finalizers never resolved: %s" % self.agent.alerts)
        print("resolved %.1f s after the controller resumed" % (time.monotonic() - stopped), file=sys.stderr)
        ctl.terminate()
        ctl.communicate(timeout=30)
        self.assertEqual({a["client"] for a in self.agent.alerts}, {controller})
        self.assertEqual(self.agent.metric_value("stormwatch_capture_lost_total"), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
