"""A fixed set of calls with the real Kubernetes Python client (python3-kubernetes: HTTP/1.1
keep-alive through urllib3), for the identity end-to-end test (tests/e2e/test_identities.py).

    python3 python_configmap_calls.py --kubeconfig KC --namespace NS --name NAME

One ApiClient (one connection), in this order: three LISTs of configmaps (resourceVersion
unset and no limit; resourceVersion=0; limit=1, then the next page with its continue token),
a LIST of pods, then create, read, patch (JSON patch), delete a configmap NAME, and a read of it
once deleted (404). Prints one JSON line: a list of {"method", "path", "status", "flow_schema_uid",
"priority_level_uid"}, one per request, from each response's status and X-Kubernetes-PF-*
headers, so the caller knows every request made and how API Priority and Fairness classified it.
"""
import argparse
import json

from kubernetes import client, config
from kubernetes.client.rest import ApiException


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--name", required=True)
    args = ap.parse_args()
    config.load_kube_config(config_file=args.kubeconfig)
    api = client.CoreV1Api(client.ApiClient())
    ns, name = args.namespace, args.name
    calls = []

    def call(method, path, fn, *a, **kw):
        """Runs one *_with_http_info call; records it; returns its data (None on an error)."""
        try:
            data, status, headers = fn(*a, **kw)
        except ApiException as e:
            data, status, headers = None, e.status, e.headers or {}
        calls.append({"method": method, "path": path, "status": status,
                      "flow_schema_uid": headers.get("X-Kubernetes-PF-FlowSchema-UID", ""),
                      "priority_level_uid": headers.get("X-Kubernetes-PF-PriorityLevel-UID", "")})
        return data

    cms = "/api/v1/namespaces/%s/configmaps" % ns
    call("GET", cms, api.list_namespaced_config_map_with_http_info, ns)
    call("GET", cms + "?resourceVersion=0", api.list_namespaced_config_map_with_http_info, ns,
         resource_version="0")
    page = call("GET", cms + "?limit=1", api.list_namespaced_config_map_with_http_info, ns, limit=1)
    token = page.metadata._continue if page else None
    if not token:
        raise SystemExit("the first page of configmaps has no continue token: need 2+ configmaps")
    call("GET", cms + "?limit=1&continue=TOKEN", api.list_namespaced_config_map_with_http_info, ns,
         limit=1, _continue=token)
    call("GET", "/api/v1/namespaces/%s/pods" % ns, api.list_namespaced_pod_with_http_info, ns)
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"a": "1"})
    call("POST", cms, api.create_namespaced_config_map_with_http_info, ns, body)
    call("GET", cms + "/" + name, api.read_namespaced_config_map_with_http_info, name, ns)
    call("PATCH", cms + "/" + name, api.patch_namespaced_config_map_with_http_info, name, ns,
         [{"op": "add", "path": "/data/b", "value": "2"}])
    call("DELETE", cms + "/" + name, api.delete_namespaced_config_map_with_http_info, name, ns)
    call("GET", cms + "/" + name, api.read_namespaced_config_map_with_http_info, name, ns)
    print(json.dumps(calls), flush=True)


if __name__ == "__main__":
    main()
