"""Seed 002's inventory agent: the real Kubernetes Python client (python3-kubernetes, user
agent OpenAPI-Generator/<version>/python, HTTP/1.1 keep-alive through urllib3) polling
list_pod_for_all_namespaces() and list_node() with no resourceVersion and no limit: every
call is a consistent, unpaginated, cluster-scope LIST read from etcd.

    python3 python_list_loop.py --kubeconfig KC --threads 3 --interval 1 --duration 30

Each thread is one replica of the agent: it lists pods, then nodes, then sleeps --interval.
It stops after --duration or on SIGTERM; on exit it prints one JSON line: {"requests": {"pods 200": n, "nodes 200": n, ...}}.
"""
import argparse
import json
import signal
import threading
from collections import Counter

from kubernetes import client, config
from kubernetes.client.rest import ApiException


def poll(api, stop, interval, counts, lock):
    calls = (("pods", api.list_pod_for_all_namespaces), ("nodes", api.list_node))
    while not stop.is_set():
        for resource, call in calls:
            try:
                call()
                outcome = "200"
            except ApiException as e:
                outcome = str(e.status)
            except Exception as e:  # a connection reset is counted, not fatal
                outcome = type(e).__name__
            with lock:
                counts[f"{resource} {outcome}"] += 1
        stop.wait(interval)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between rounds of one thread")
    ap.add_argument("--duration", type=float, default=30.0)
    args = ap.parse_args()

    config.load_kube_config(config_file=args.kubeconfig)
    counts, lock = Counter(), threading.Lock()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    timer = threading.Timer(args.duration, stop.set)
    timer.daemon = True
    timer.start()
    threads = []
    for _ in range(args.threads):
        # One ApiClient (one urllib3 pool, its own keep-alive connection) per replica.
        api = client.CoreV1Api(client.ApiClient())
        t = threading.Thread(target=poll, args=(api, stop, args.interval, counts, lock), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    print(json.dumps({"requests": dict(counts)}), flush=True)


if __name__ == "__main__":
    main()
