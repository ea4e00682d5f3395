#!/usr/bin/env python3
"""The delegation harness: what an aggregated API server (here the real upstream
k8s.io/apiextensions-apiserver, Kubernetes 1.36's k8s.io/apiserver) asks of the kube-apiserver
it extends, answered by a stand-in of the test harness.

Serves HTTPS (stdlib http.server + ssl) and answers:
  POST /apis/authentication.k8s.io/v1/tokenreviews        a bound service-account JWT -> its
        subject and groups, as kube-apiserver's TokenReview would (the claims are read, the
        signature is not checked: the test mints the tokens), or a fixed token (TOKENS)
  POST /apis/authorization.k8s.io/v1/subjectaccessreviews  authorize(): everyone authenticated
  GET  collection lists  -> empty (or fixed namespaces) typed List with metadata.resourceVersion
  GET  ...?watch=1       -> an open, empty watch stream until timeoutSeconds (with a
                            BOOKMARK 'k8s.io/initial-events-end' if sendInitialEvents=true)
  GET  /api/v1/namespaces/NAME -> Active Namespace for known names, else 404
  GET  /version, /api, /apis, /openapi/v3 -> minimal discovery
  anything else -> 404 Status
Every request is logged as one JSON line to --log (method, path, query, UA, body, status).

usage: harness.py --port 18443 --cert pki/harness.crt --key pki/harness.key --log harness.log
"""
import argparse
import base64
import binascii
import json
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKENS = {
    "admin-token": {"username": "admin", "uid": "uid-admin", "groups": ["system:masters", "system:authenticated"]},
    "op-token": {"username": "system:serviceaccount:ops:operator", "uid": "uid-operator",
                 "groups": ["system:serviceaccounts", "system:serviceaccounts:ops", "system:authenticated"]},
    "viewer-token": {"username": "viewer", "uid": "uid-viewer", "groups": ["system:authenticated"]},
}

NAMESPACES = ["default", "kube-system", "kube-public", "ops", "data"]

# resource (plural) -> Kind, for typed List / BOOKMARK objects that client-go can decode
KINDS = {
    "namespaces": "Namespace", "configmaps": "ConfigMap", "secrets": "Secret", "services": "Service",
    "endpoints": "Endpoints", "endpointslices": "EndpointSlice", "serviceaccounts": "ServiceAccount",
    "events": "Event", "leases": "Lease",
    "validatingwebhookconfigurations": "ValidatingWebhookConfiguration",
    "mutatingwebhookconfigurations": "MutatingWebhookConfiguration",
    "validatingadmissionpolicies": "ValidatingAdmissionPolicy",
    "validatingadmissionpolicybindings": "ValidatingAdmissionPolicyBinding",
    "mutatingadmissionpolicies": "MutatingAdmissionPolicy",
    "mutatingadmissionpolicybindings": "MutatingAdmissionPolicyBinding",
    "flowschemas": "FlowSchema", "prioritylevelconfigurations": "PriorityLevelConfiguration",
    "storageversions": "StorageVersion",
}

LOCK = threading.Lock()
LOG = None
RV = "1"


def log(entry):
    entry["t"] = round(time.time(), 3)
    line = json.dumps(entry, sort_keys=True)
    with LOCK:
        LOG.write(line + "\n")
        LOG.flush()


def authorize(spec):
    """Everyone authenticated may do everything except the user "denied" (the apiserver's
    request counts leave out 403s, so the tests keep to allowed requests)."""
    user, groups = spec.get("user", ""), spec.get("groups") or []
    if user == "denied" or "system:authenticated" not in groups:
        return False, "denied by harness policy"
    return True, "allowed by harness policy"


def jwt_user(token):
    """A service-account JWT's identity as kube-apiserver's TokenReview answers it."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        pad = "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + pad))
    except (ValueError, binascii.Error):
        return None
    sub = claims.get("sub", "")
    if not sub.startswith("system:serviceaccount:"):
        return None
    ns = sub.split(":")[2]
    user = {"username": sub, "uid": (claims.get("kubernetes.io") or {}).get("serviceaccount", {}).get("uid", ""),
            "groups": ["system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"]}
    pod = (claims.get("kubernetes.io") or {}).get("pod")
    if pod:
        user["extra"] = {"authentication.kubernetes.io/pod-name": [pod["name"]],
                         "authentication.kubernetes.io/pod-uid": [pod.get("uid", "")]}
    return user


def split_path(path):
    """-> (apiVersion, namespace, rest-segments) or None for non-API paths."""
    segs = [s for s in path.split("/") if s]
    if len(segs) >= 2 and segs[0] == "api":
        gv, segs = segs[1], segs[2:]
    elif len(segs) >= 3 and segs[0] == "apis":
        gv, segs = segs[1] + "/" + segs[2], segs[3:]
    else:
        return None
    ns = None
    if len(segs) >= 3 and segs[0] == "namespaces":
        ns, segs = segs[1], segs[2:]
    return gv, ns, segs


def kind_of(resource):
    if resource in KINDS:
        return KINDS[resource]
    r = resource[:-1] if resource.endswith("s") else resource
    return r[:1].upper() + r[1:]


def namespace_obj(name):
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": "ns-" + name, "resourceVersion": RV,
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "apiext-harness/1"

    def log_message(self, fmt, *args):  # keep stderr quiet; we log JSON ourselves
        pass

    def send_json(self, code, obj, entry):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        entry["status"] = code
        log(entry)

    def status(self, code, reason, msg, entry):
        self.send_json(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": msg, "reason": reason, "code": code}, entry)

    def entry(self):
        u = urllib.parse.urlsplit(self.path)
        return {"method": self.command, "path": u.path, "query": u.query, "proto": self.request_version,
                "ua": self.headers.get("User-Agent", ""),
                "auth": (self.headers.get("Authorization", "") or "").split(" ")[0],
                "accept": self.headers.get("Accept", "")}

    def do_POST(self):
        e = self.entry()
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            req = json.loads(raw or b"{}")
        except ValueError:
            e["body_raw"] = raw[:200].decode("latin1")
            return self.status(400, "BadRequest", "harness only speaks JSON", e)
        e["body"] = req
        if e["path"] == "/apis/authentication.k8s.io/v1/tokenreviews":
            spec = req.get("spec") or {}
            user = TOKENS.get(spec.get("token", "")) or jwt_user(spec.get("token", ""))
            st = {"authenticated": bool(user)}
            if user:
                st["user"] = user
                # echo the requested audiences, else the webhook authenticator rejects the answer
                if spec.get("audiences"):
                    st["audiences"] = spec["audiences"]
            else:
                st["error"] = "unknown token"
            masked = dict(req, spec=dict(spec, token="(redacted)"))
            e["body"] = masked  # the request as sent, without the token
            return self.send_json(201, {"apiVersion": req.get("apiVersion", "authentication.k8s.io/v1"),
                                        "kind": "TokenReview", "metadata": {"creationTimestamp": None},
                                        "spec": spec, "status": st}, e)
        if e["path"] == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
            spec = req.get("spec") or {}
            ok, why = authorize(spec)
            e["allowed"] = ok
            st = {"allowed": ok, "reason": why}
            if not ok:
                st["denied"] = False  # no opinion -> other authorizers (none) then deny
            return self.send_json(201, {"apiVersion": req.get("apiVersion", "authorization.k8s.io/v1"),
                                        "kind": "SubjectAccessReview", "metadata": {"creationTimestamp": None},
                                        "spec": spec, "status": st}, e)
        return self.status(404, "NotFound", "harness: no POST handler for " + e["path"], e)

    def do_PUT(self):
        e = self.entry()
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        return self.status(404, "NotFound", "harness: no %s handler" % self.command, e)

    do_PATCH = do_PUT
    do_DELETE = do_PUT

    def do_GET(self):
        e = self.entry()
        q = urllib.parse.parse_qs(e["query"])
        p = e["path"]
        if p == "/version":
            return self.send_json(200, {"major": "1", "minor": "36", "gitVersion": "v1.36.0-harness",
                                        "goVersion": sys.version.split()[0], "platform": "linux/amd64"}, e)
        if p in ("/healthz", "/readyz", "/livez"):
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            e["status"] = 200
            return log(e)
        if p == "/api":
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                                        "serverAddress": "127.0.0.1"}]}, e)
        if p == "/openapi/v3":  # the admission policy type checkers poll it every 5 s
            return self.send_json(200, {"paths": {}}, e)
        if p == "/apis":
            return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}, e)
        sp = split_path(p)
        if sp is None or not sp[2]:
            return self.status(404, "NotFound", "harness: unknown path " + p, e)
        gv, ns, rest = sp
        resource = rest[0]
        if len(rest) >= 2:  # a single object
            if gv == "v1" and ns is None and resource == "namespaces" and len(rest) == 2 and rest[1] in NAMESPACES:
                return self.send_json(200, namespace_obj(rest[1]), e)
            return self.status(404, "NotFound", '%s "%s" not found' % (resource, rest[1]), e)
        kind = kind_of(resource)
        if q.get("watch", ["0"])[0] in ("1", "true"):
            return self.watch(gv, kind, q, e)
        items = [namespace_obj(n) for n in NAMESPACES] if (gv == "v1" and resource == "namespaces") else []
        return self.send_json(200, {"apiVersion": gv, "kind": kind + "List",
                                    "metadata": {"resourceVersion": RV}, "items": items}, e)

    def watch(self, gv, kind, q, e):
        """An empty watch: headers, an optional initial-events-end BOOKMARK, then silence until
        timeoutSeconds (client-go sets 5-10 min), then a clean end of stream."""
        timeout = min(int(q.get("timeoutSeconds", ["300"])[0]), 600)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        e["status"] = 200
        e["watch_timeout"] = timeout
        log(e)

        def chunk(b):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
            self.wfile.flush()
        try:
            if q.get("sendInitialEvents", [""])[0] == "true":
                if gv == "v1" and kind == "Namespace":
                    for n in NAMESPACES:
                        chunk(json.dumps({"type": "ADDED", "object": namespace_obj(n)}).encode() + b"\n")
                chunk(json.dumps({"type": "BOOKMARK", "object": {
                    "apiVersion": gv, "kind": kind, "metadata": {
                        "resourceVersion": RV, "annotations": {"k8s.io/initial-events-end": "true"}}}}).encode()
                      + b"\n")
            else:
                self.wfile.flush()
            end = time.time() + timeout
            while time.time() < end:
                time.sleep(1)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass
        self.close_connection = True


def main():
    global LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=18443)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--log", default="harness.log")
    a = ap.parse_args()
    LOG = open(a.log, "a")
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)
    ctx.set_alpn_protocols(["http/1.1"])  # no h2: client-go falls back to HTTP/1.1
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("harness listening on https://127.0.0.1:%d" % a.port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
