"""The stormwatch demo: a runaway operator hammers a local API server; the agent names it.

Run through scripts/demo.sh (it builds first). Everything runs on 127.0.0.1 and stops by itself.
"""
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from agent import Agent  # noqa: E402
from cluster import Cluster  # noqa: E402

BOLD, RED, GREEN, DIM, RESET = "\033[1m", "\033[31m", "\033[32m", "\033[2m", "\033[0m"
if not sys.stdout.isatty():
    BOLD = RED = GREEN = DIM = RESET = ""

DATAJOB = """apiVersion: batch.company.com/v1
kind: DataJob
metadata: {name: %s, namespace: etl}
spec: {schedule: "0 2 * * *", image: registry.example/etl:1.0}
"""


def step(text):
    print("\n%s==> %s%s" % (BOLD, text, RESET), flush=True)


def show_metrics(agent, client):
    rows = [(l, v) for n, l, v in agent.metrics()
            if n == "stormwatch_requests_total" and l["client"] == client]
    rows.sort(key=lambda r: -r[1])
    for l, v in rows[:6]:
        print("  stormwatch_requests_total{client=%r, verb=%r, resource=%r, code=%r} %d"
              % (l["client"], l["verb"], l["resource"], l["code"], v))
    for n, l, v in agent.metrics():
        if n == "stormwatch_storm_active":
            print("  stormwatch_storm_active{storm=%r, client=%r, resource=%r} %d"
                  % (l["storm"], l["client"], l["resource"], v))


def main():
    if os.geteuid() != 0:
        sys.exit("the demo attaches uprobes: run it as root")
    step("Starting a local control plane: real etcd (TLS) + a stripped Go API server (TLS, HTTP/2)")
    with Cluster() as c:
        print("  API server %s, pid %d" % (c.base_url, c.apiserver_pid))
        human = c.kubeconfig(c.mint_token("default", "ops-engineer"))
        op_token = c.mint_token("datajobs-system", "datajob-operator",
                                pod="datajob-operator-6f7c9d5b8-xk2lp")
        c.kubectl("create", "namespace", "etl", kubeconfig=human, check=True)
        for name in ("nightly-etl", "hourly-sync"):
            c.kubectl("create", "-f", "-", input=DATAJOB % name, kubeconfig=human, check=True)

        step("Starting the stormwatch agent (uprobes by .gopclntab offsets, no symbols, no DWARF)")
        agent = Agent(c.tmp, extra_args=["--target", "kube-apiserver"]).start()
        try:
            agent.wait_attached(1)
            print(DIM + agent.stderr().strip() + RESET)

            step("A person uses kubectl as system:serviceaccount:default:ops-engineer")
            print(c.kubectl("get", "datajobs", "-n", "etl", kubeconfig=human).stdout.rstrip())

            step("A runaway operator starts: GET + PUT of its own DataJobs, no backoff, 12 s")
            start = time.monotonic()
            op = c.run_operator(op_token, ["nightly-etl", "hourly-sync"], duration=12,
                                namespace="etl", extra_args=["--workers", "2"])
            alert, at = agent.wait_alert(lambda a: a["state"] == "firing", timeout=20)
            if not alert:
                sys.exit("no alert: " + agent.stderr())
            print("%s%sALERT after %.1f s%s (one JSON line on the agent's stdout):"
                  % (BOLD, RED, at - start, RESET))
            print(json.dumps(alert, indent=2))

            step("Metrics on http://127.0.0.1:%d/metrics" % agent.metrics_port)
            show_metrics(agent, alert["client"])
            out, _ = op.communicate(timeout=30)
            print("  operator's own count: %s" % out.decode().strip())

            step("The loop stops; the alert resolves")
            resolved, at = agent.wait_alert(lambda a: a["state"] == "resolved", timeout=30)
            if resolved:
                print("%sRESOLVED%s %s" % (GREEN, RESET, json.dumps(
                    {k: resolved[k] for k in ("time", "storm", "state", "client", "resource")})))
            show_metrics(agent, alert["client"])
        finally:
            agent.stop()


if __name__ == "__main__":
    main()
