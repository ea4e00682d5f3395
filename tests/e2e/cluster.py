"""A throw-away control plane for end-to-end tests: real etcd + stormwatch's test apiserver.

    with Cluster() as c:
        tok = c.mint_token("default", "datajob-operator")
        kc = c.kubeconfig(tok)
        c.kubectl("get", "pods", kubeconfig=kc)
        c.server_counts()

Everything lives in a fresh temporary directory: a CA and certificates made with the openssl
CLI (etcd serving, apiserver-to-etcd client, apiserver serving with SAN 127.0.0.1/localhost),
the service-account signing key, client certificates (the CA is also the apiserver's
--client-ca-file: an admin certificate CN=kubernetes-admin O=system:masters is made at start,
client_cert() makes more), etcd's data dir, logs, tokens and kubeconfigs. Every listener
binds to 127.0.0.1. The apiserver binary is copied to TMP/bin/kube-apiserver because the agent
finds its targets by process name. Processes started here are stopped by their pid in stop(),
which also runs when start-up fails.

Python 3 standard library only; run with Debian's /usr/bin/python3.
"""

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

KUBECTL = "/usr/bin/kubectl"
ETCD = "/usr/bin/etcd"


def resolve_kubectl():
    """The kubectl binary to run: $STORMWATCH_KUBECTL, else /usr/bin/kubectl.

    On these machines /usr/bin/kubectl is the Google Cloud SDK's *dispatcher*
    ("v1.32.4-dispatcher"): before every command it sends its own GET /version with the same
    credentials, then execs kubectl.1.NN matching the server's minor version (1.28 here). That
    extra request is invisible in kubectl's -v logs and would skew exact per-identity counts,
    so when the dispatcher is found its kubectl.1.32 sibling is used directly (the client
    version the tests are written for).
    """
    env = os.environ.get("STORMWATCH_KUBECTL")
    if env:
        return env
    real = os.path.realpath(KUBECTL)
    pinned = os.path.join(os.path.dirname(real), "kubectl.1.32")
    if os.path.exists(pinned):
        try:
            out = subprocess.run([KUBECTL, "version", "--client"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        if "dispatcher" in out:
            return pinned
    return KUBECTL


def default_go_out():
    return os.environ.get("STORMWATCH_GO_OUT", "/work/main/build/go")


def free_port():
    """A free loopback TCP port (the usual bind-to-0 trick; the tiny race is acceptable)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClusterError(RuntimeError):
    pass


def _dn_escape(value):
    """Escapes a value for openssl's -subj (/ and + separate RDNs and attributes, \\ escapes)."""
    return value.replace("\\", "\\\\").replace("/", "\\/").replace("+", "\\+")


class ApiServerProcess:
    """One test apiserver process: its Popen (unshare's for a container), the PID of the server
    itself in the host's PID namespace, its URLs, and when it was spawned (time.monotonic())."""

    def __init__(self, proc, port, debug_port, started):
        self.proc = proc
        self.pid = proc.pid
        self.port = port
        self.debug_port = debug_port
        self.started = started
        self.base_url = f"https://127.0.0.1:{port}"
        self.debug_url = f"http://127.0.0.1:{debug_port}"

    def counts(self):
        """The server's /debug/counts (see Cluster.server_counts)."""
        with urllib.request.urlopen(self.debug_url + "/debug/counts", timeout=5) as r:
            return json.load(r)


class Cluster:
    def __init__(self, apiserver_bin=None, operator_bin=None, keep_tmp=None, apiserver_args=(),
                 apiserver_name="kube-apiserver", etcd_bin=None, etcd_name=None, server="test", audit=True):
        go_out = default_go_out()
        self.apiserver_args = list(apiserver_args)  # extra flags appended to the apiserver's command line
        self.apiserver_name = apiserver_name  # executable name under TMP/bin (the agent finds targets by name)
        # "test": the test API server of tests/apiserver; "apiextensions": the real upstream
        # k8s.io/apiextensions-apiserver (apiserver_bin), delegating authentication and
        # authorization to tests/e2e/delegation_harness.py as aggregated API servers do.
        self.server = server
        self.audit = audit  # apiextensions: a Metadata-level audit log (off: none, as kubeadm's default)
        default_server = "apiextensions-apiserver" if server == "apiextensions" else "test-apiserver"
        self.apiserver_src = apiserver_bin or os.path.join(go_out, default_server)
        self.mint_bin = os.path.join(go_out, "test-apiserver")  # mints bound SA tokens
        self.audit_log = None
        self.etcd_src = etcd_bin or ETCD
        self.etcd_name = etcd_name  # when set, etcd runs as TMP/bin/<etcd_name> (a copy)
        self.kubectl_bin = resolve_kubectl()
        self.operator_bin = operator_bin or os.path.join(go_out, "runaway-operator")
        self.storm_clients_bin = os.path.join(go_out, "storm-clients")
        self.crd_controller_bin = os.path.join(go_out, "crd-controller")
        if keep_tmp is None:
            keep_tmp = os.environ.get("STORMWATCH_KEEP_TMP") == "1"
        self.keep_tmp = keep_tmp
        self.tmp = None
        self.procs = []  # every Popen started here, stopped in reverse order
        self.etcd = None
        self.apiserver = None
        self.apiserver_pid = None
        self.main_apiserver = None  # ApiServerProcess of the apiserver below
        self.base_url = None
        self.debug_url = None
        self.ca_file = None
        self.etcd_url = None
        # The kubeadm-style admin identity: a client certificate CN=kubernetes-admin,
        # O=system:masters (APF: FlowSchema exempt, priority level exempt).
        self.admin_cert = None
        self.admin_key = None
        self.admin_kubeconfig = None

    # ---- lifecycle ----

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self):
        for path in (self.apiserver_src, self.etcd_src, self.kubectl_bin, self.mint_bin):
            if not os.path.exists(path):
                raise ClusterError(f"missing {path} (build with cmake, or set STORMWATCH_GO_OUT)")
        self.tmp = tempfile.mkdtemp(prefix="stormwatch-e2e-")
        for d in ("pki", "bin", "tokens", "kubeconfigs", "logs", "kubecache", "home"):
            os.makedirs(os.path.join(self.tmp, d))
        self._make_pki()
        self._start_etcd()
        self.admin_cert, self.admin_key = self.client_cert("kubernetes-admin", ["system:masters"])
        if self.server == "apiextensions":
            self._start_apiextensions()
        else:
            self._start_apiserver()
        self.admin_kubeconfig = self.kubeconfig_cert(self.admin_cert, self.admin_key)

    def stop(self):
        """Stops every process started here (by pid), then removes the temp dir."""
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 5
        for p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for p in self.procs:
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()
        self.procs = []
        if self.tmp and not self.keep_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def _spawn(self, argv, log_name, **kw):
        log = open(self._path("logs", log_name), "wb")
        p = subprocess.Popen(argv, stdout=kw.pop("stdout", log), stderr=log, stdin=subprocess.DEVNULL, **kw)
        log.close()  # the child holds its own descriptor
        self.procs.append(p)
        return p

    def log(self, name):
        """Contents of one of the logs (etcd.log, apiserver.log, ...), for failure messages."""
        try:
            with open(self._path("logs", name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # ---- PKI (openssl CLI) ----

    def _openssl(self, *args):
        subprocess.run(["openssl", *args], check=True, cwd=self._path("pki"),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _issue(self, name, cn, ext_lines, orgs=()):
        ext = self._path("pki", f"{name}.ext")
        with open(ext, "w") as f:
            f.write("\n".join(ext_lines) + "\n")
        # Subject as kubeadm writes it: the O values first, then CN (each O is one group).
        subj = "".join(f"/O={_dn_escape(o)}" for o in orgs) + f"/CN={_dn_escape(cn)}"
        self._openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                      "-out", f"{name}.csr", "-subj", subj)
        self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                      "-CAcreateserial", "-days", "2", "-sha256", "-out", f"{name}.crt", "-extfile", ext)

    def _make_pki(self):
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                      "-days", "2", "-sha256", "-subj", "/CN=stormwatch-test-ca",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        server = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
                  "extendedKeyUsage=serverAuth,clientAuth", "subjectAltName=IP:127.0.0.1,DNS:localhost"]
        client = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
                  "extendedKeyUsage=clientAuth"]
        self._issue("etcd-server", "etcd", server)
        self._issue("apiserver-etcd-client", "kube-apiserver-etcd-client", client)
        self._issue("apiserver", "kube-apiserver", server)
        self._openssl("genrsa", "-out", "sa.key", "2048")
        self.ca_file = self._path("pki", "ca.crt")
        self.sa_key = self._path("pki", "sa.key")

    # ---- etcd ----

    def _start_etcd(self):
        cport, pport, plain = free_port(), free_port(), free_port()
        self.etcd_url = f"https://127.0.0.1:{cport}"
        # Also plaintext on localhost, as some set-ups run it: there etcd serves gRPC with gRPC's
        # own HTTP/2 server instead of net/http's.
        self.etcd_plain_url = f"http://127.0.0.1:{plain}"
        peer = f"http://127.0.0.1:{pport}"
        pki = self._path("pki")
        etcd_bin = self.etcd_src
        if self.etcd_name:
            etcd_bin = self._path("bin", self.etcd_name)
            shutil.copy2(self.etcd_src, etcd_bin)
        self.etcd = self._spawn([
            etcd_bin, "--name", "stormwatch-test",
            "--data-dir", self._path("etcd-data"),
            "--listen-client-urls", f"{self.etcd_url},{self.etcd_plain_url}", "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"stormwatch-test={peer}", "--initial-cluster-state", "new",
            "--cert-file", f"{pki}/etcd-server.crt", "--key-file", f"{pki}/etcd-server.key",
            "--trusted-ca-file", f"{pki}/ca.crt", "--client-cert-auth",
            "--logger", "zap", "--log-outputs", "stderr",
        ], "etcd.log")
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.load_cert_chain(f"{pki}/apiserver-etcd-client.crt", f"{pki}/apiserver-etcd-client.key")
        self._wait_until(lambda: self._http_ok(self.etcd_url + "/health", ctx), self.etcd, "etcd.log", "etcd")

    def etcd_metrics(self):
        """etcd's own /metrics (Prometheus text), over its client TLS port with the apiserver's
        client certificate."""
        pki = self._path("pki")
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.load_cert_chain(f"{pki}/apiserver-etcd-client.crt", f"{pki}/apiserver-etcd-client.key")
        with urllib.request.urlopen(self.etcd_url + "/metrics", context=ctx, timeout=10) as r:
            return r.read().decode()

    def etcdctl(self, *args, cert=None, key=None, timeout=30, plaintext=False):
        """Runs etcdctl (v3 API) against the cluster's etcd over TLS, as the client whose
        certificate is given (the apiserver's by default), or over its plaintext port."""
        pki = self._path("pki")
        cert = cert or f"{pki}/apiserver-etcd-client.crt"
        key = key or f"{pki}/apiserver-etcd-client.key"
        argv = ["etcdctl", "--endpoints", self.etcd_url, "--cacert", self.ca_file, "--cert", cert,
                "--key", key, *args]
        if plaintext:
            argv = ["etcdctl", "--endpoints", self.etcd_plain_url, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "ETCDCTL_API": "3"})

    # ---- apiserver ----

    def _start_apiserver(self):
        binary = self.apiserver_binary()
        shutil.copy2(self.apiserver_src, binary)
        server = self.start_apiserver(binary)
        self._adopt_apiserver(server)

    def _start_apiextensions(self):
        """The real upstream API server on the cluster's etcd (TLS, client certificate), with
        x509 client certificates from the cluster CA, bearer tokens and authorization delegated
        to the harness (TokenReview, SubjectAccessReview), its informers pointed at the harness,
        and a Metadata-level audit log (the identities the tests compare with the agent's)."""
        pki = self._path("pki")
        hport, port = free_port(), free_port()
        harness = self._spawn([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                            "delegation_harness.py"),
                               "--port", str(hport), "--cert", f"{pki}/apiserver.crt", "--key", f"{pki}/apiserver.key",
                               "--log", self._path("logs", "harness-requests.log")], "harness.log")
        delegation = self._path("kubeconfigs", "delegation.yaml")
        with open(delegation, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "harness",
                       "clusters": [{"name": "harness", "cluster": {"server": f"https://127.0.0.1:{hport}",
                                                                     "certificate-authority": self.ca_file}}],
                       "users": [{"name": "apiext", "user": {"token": "delegation-token"}}],
                       "contexts": [{"name": "harness", "context": {"cluster": "harness", "user": "apiext"}}]}, f)
        audit = []
        if self.audit:
            policy = self._path("pki", "audit-policy.yaml")
            with open(policy, "w") as f:
                f.write("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
                        "rules:\n- level: Metadata\n")
            self.audit_log = self._path("logs", "audit.log")
            audit = ["--audit-policy-file", policy, "--audit-log-path", self.audit_log, "--audit-log-format", "json"]
        binary = self.apiserver_binary()
        shutil.copy2(self.apiserver_src, binary)
        self.base_url = f"https://127.0.0.1:{port}"
        self.apiserver = self._spawn([
            binary, "--etcd-servers", self.etcd_url, "--etcd-cafile", f"{pki}/ca.crt",
            "--etcd-certfile", f"{pki}/apiserver-etcd-client.crt", "--etcd-keyfile", f"{pki}/apiserver-etcd-client.key",
            # kube-apiserver's layout, in which it embeds this server: /registry/<group>/<resource>
            # (the standalone default is /registry/apiextensions.kubernetes.io).
            "--etcd-prefix", "/registry",
            "--bind-address", "127.0.0.1", "--secure-port", str(port),
            "--tls-cert-file", f"{pki}/apiserver.crt", "--tls-private-key-file", f"{pki}/apiserver.key",
            "--client-ca-file", f"{pki}/ca.crt",
            "--authentication-kubeconfig", delegation, "--authorization-kubeconfig", delegation,
            "--kubeconfig", delegation, "--authentication-skip-lookup",
            "--disable-admission-plugins", "NamespaceLifecycle,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
                                           "ValidatingAdmissionPolicy,MutatingAdmissionPolicy",
            *audit, *self.apiserver_args,
        ], "apiserver.log")
        self.apiserver_pid = self.apiserver.pid
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.load_cert_chain(self.admin_cert, self.admin_key)
        self._wait_until(lambda: harness.poll() is None and self._http_ok(self.base_url + "/readyz", ctx),
                         self.apiserver, "apiserver.log", "apiextensions-apiserver", timeout=60)

    def restart_apiextensions(self):
        """Starts the real API server again (after it died) from TMP/bin/NAME, with a harness of
        its own, on new ports: base_url, apiserver_pid and the admin kubeconfig name the new one
        (kubeconfigs made before still name the old port: make them again)."""
        self._start_apiextensions()
        self.admin_kubeconfig = self.kubeconfig_cert(self.admin_cert, self.admin_key)

    def apiserver_metrics(self):
        """The API server's own /metrics, read with the admin certificate."""
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.load_cert_chain(self.admin_cert, self.admin_key)
        with urllib.request.urlopen(self.base_url + "/metrics", context=ctx, timeout=10) as r:
            return r.read().decode()

    def audit_events(self):
        """The audit log's events (JSON lines), as far as written."""
        events = []
        if not self.audit_log:
            return events
        try:
            with open(self.audit_log) as f:
                for line in f:
                    if line.strip():
                        events.append(json.loads(line))
        except OSError:
            pass
        return events

    def _adopt_apiserver(self, server):
        """Makes server the one base_url, debug_url, server_counts() and kubeconfigs refer to."""
        self.main_apiserver = server
        self.apiserver = server.proc
        self.apiserver_pid = server.pid
        self.base_url = server.base_url
        self.debug_url = server.debug_url

    def apiserver_binary(self):
        return self._path("bin", self.apiserver_name)

    def start_apiserver(self, binary, port=None, debug_port=None, container_dir=None):
        """Starts one more test apiserver process on the cluster's etcd and waits until it serves;
        returns its ApiServerProcess. Free ports unless given. With container_dir (a directory,
        empty on the host), the process runs as a container would: `unshare --mount --pid --fork
        --mount-proc` mounts a private tmpfs over container_dir, copies binary into it and runs
        it from there, so its executable exists only inside that mount namespace."""
        port, debug_port = port or free_port(), debug_port or free_port()
        pki = self._path("pki")
        args = [
            "--listen", f"127.0.0.1:{port}",
            "--tls-cert", f"{pki}/apiserver.crt", "--tls-key", f"{pki}/apiserver.key",
            "--etcd-endpoints", self.etcd_url, "--etcd-cafile", f"{pki}/ca.crt",
            "--etcd-certfile", f"{pki}/apiserver-etcd-client.crt",
            "--etcd-keyfile", f"{pki}/apiserver-etcd-client.key",
            "--sa-signing-key", self.sa_key,
            "--debug-listen", f"127.0.0.1:{debug_port}",
            "--client-ca-file", f"{pki}/ca.crt",
            *self.apiserver_args,
        ]
        log_name = "apiserver.log" if self.apiserver is None else f"apiserver-{len(self.procs)}.log"
        started = time.monotonic()
        if container_dir is None:
            proc = self._spawn([binary, *args], log_name)
        else:
            inner = os.path.join(container_dir, os.path.basename(binary))
            script = 'mount -t tmpfs tmpfs "$1" && cp "$2" "$3" && shift 3 && exec "$@"'
            # --kill-child: when stop() has to kill unshare, the namespace and its mount go with it.
            proc = self._spawn(["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child",
                                "sh", "-c", script, "sh", container_dir, binary, inner, inner, *args], log_name)
        server = ApiServerProcess(proc, port, debug_port, started)
        ctx = ssl.create_default_context(cafile=self.ca_file)
        # Ready = the debug listener answers and the secure port completes a TLS handshake.
        self._wait_until(lambda: self._http_ok(server.debug_url + "/healthz") and self._tls_ok(port, ctx),
                         proc, log_name, "test apiserver")
        if container_dir is not None:
            server.pid = self._container_child(proc.pid, os.path.basename(binary))
        return server

    @staticmethod
    def _container_child(unshare_pid, name):
        """The host PID of the process unshare forked (PID 1 of the new namespace), once it runs name."""
        for task in os.listdir(f"/proc/{unshare_pid}/task"):
            with open(f"/proc/{unshare_pid}/task/{task}/children") as f:
                for pid in f.read().split():
                    if os.path.basename(os.readlink(f"/proc/{pid}/exe")) == name:
                        return int(pid)
        raise ClusterError(f"no {name} child of unshare pid {unshare_pid}")

    def stop_apiserver(self, server, sig=signal.SIGTERM):
        """Signals one apiserver process (the server itself, also inside a container: unshare
        blocks SIGTERM) and waits for it to exit; returns time.monotonic() then."""
        os.kill(server.pid, sig)
        server.proc.wait(timeout=10)
        return time.monotonic()

    def stop_main_apiserver(self):
        """Stops the cluster's apiserver (SIGTERM); returns the time.monotonic() of its exit."""
        return self.stop_apiserver(self.main_apiserver)

    def start_main_apiserver(self):
        """Starts TMP/bin/NAME again on the stopped main apiserver's ports (a new PID; a new binary
        if replace_apiserver_binary() ran meanwhile) and makes it the main one; returns it."""
        old = self.main_apiserver
        server = self.start_apiserver(self.apiserver_binary(), port=old.port, debug_port=old.debug_port)
        self._adopt_apiserver(server)
        return server

    def replace_apiserver_binary(self, src):
        """Installs src at TMP/bin/NAME as a package upgrade does: written to a new file, renamed
        over the old path (a new inode; a running process keeps the old, now deleted, one)."""
        binary = self.apiserver_binary()
        shutil.copy2(src, binary + ".new")
        os.rename(binary + ".new", binary)

    @staticmethod
    def _http_ok(url, ctx=None):
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    @staticmethod
    def _tls_ok(port, ctx):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                with ctx.wrap_socket(s, server_hostname="127.0.0.1"):
                    return True
        except (OSError, ssl.SSLError):
            return False

    def _wait_until(self, ready, proc, log_name, what, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if proc.poll() is not None:
                raise ClusterError(f"{what} exited with {proc.returncode}:\n{self.log(log_name)[-4000:]}")
            if ready():
                return
            time.sleep(0.1)
        raise ClusterError(f"{what} not ready after {timeout}s:\n{self.log(log_name)[-4000:]}")

    # ---- clients ----

    def mint_token(self, ns, sa, pod=None, expiration="1h"):
        """Mints a bound service-account token; returns the path of a 0600 file holding it."""
        argv = [self.mint_bin, "mint-token", "--sa-signing-key", self.sa_key,
                "--namespace", ns, "--serviceaccount", sa, "--expiration", expiration]
        if pod:
            argv += ["--pod", pod]
        tok = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()
        path = self._path("tokens", f"{ns}_{sa}" + (f"_{pod}" if pod else "") + ".token")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(tok)
        return path

    def kubeconfig(self, token_file):
        """A kubeconfig for the server that authenticates with token_file (client-go's tokenFile)."""
        name = os.path.basename(token_file).rsplit(".", 1)[0]
        path = self._path("kubeconfigs", name + ".yaml")
        # JSON is YAML: no YAML library needed.
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.base_url, "certificate-authority": self.ca_file}}],
            "users": [{"name": name, "user": {"tokenFile": token_file}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": name, "namespace": "default"}}],
        }
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
        return path

    def client_cert(self, cn, orgs=()):
        """Issues a client certificate (CN=cn, one O per group in orgs) from the cluster CA, which
        the apiserver trusts (--client-ca-file). Returns (cert path, key path)."""
        name = "client-" + "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in cn)
        n, base = 1, name
        while os.path.exists(self._path("pki", name + ".crt")):
            n += 1
            name = f"{base}-{n}"
        self._issue(name, cn, ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
                               "extendedKeyUsage=clientAuth"], orgs=orgs)
        return self._path("pki", name + ".crt"), self._path("pki", name + ".key")

    def kubeconfig_cert(self, cert, key):
        """A kubeconfig for the server that authenticates with a client certificate."""
        name = os.path.basename(cert).rsplit(".", 1)[0]
        path = self._path("kubeconfigs", name + ".yaml")
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.base_url, "certificate-authority": self.ca_file}}],
            "users": [{"name": name, "user": {"client-certificate": cert, "client-key": key}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": name, "namespace": "default"}}],
        }
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
        return path

    def kubectl(self, *args, kubeconfig, input=None, timeout=60, check=False):
        """Runs the real kubectl (see resolve_kubectl). Each kubeconfig gets its own discovery cache dir, so the
        requests one identity makes do not depend on what another identity did before."""
        cache = self._path("kubecache", os.path.basename(kubeconfig))
        env = dict(os.environ, HOME=self._path("home"), KUBECONFIG=kubeconfig)
        return subprocess.run([self.kubectl_bin, "--kubeconfig", kubeconfig, "--cache-dir", cache, *args],
                              input=input, capture_output=True, text=True, timeout=timeout, env=env, check=check)

    def server_counts(self):
        """The server's request counts: a list of dicts (client, verb, group, version, resource,
        subresource, scope, code, proto, count)."""
        with urllib.request.urlopen(self.debug_url + "/debug/counts", timeout=5) as r:
            return json.load(r)

    def server_apf(self):
        """The server's APF state: {"priorityLevels": {name: {uid, exempt, limit, executing, waiting,
        rejected}}, "flowSchemas": {name: {uid, priorityLevel, matchingPrecedence}}}."""
        with urllib.request.urlopen(self.debug_url + "/debug/apf", timeout=5) as r:
            return json.load(r)

    def server_storage(self):
        """Where the server's reads were served from: {"etcdList", "cacheList", "etcdGet", "cacheGet"}."""
        with urllib.request.urlopen(self.debug_url + "/debug/storage", timeout=5) as r:
            return json.load(r)

    def server_writers(self):
        """Go type of the ResponseWriter per protocol ({"HTTP/2.0": "*http2.responseWriter", ...})."""
        with urllib.request.urlopen(self.debug_url + "/debug/writers", timeout=5) as r:
            return json.load(r)

    def run_operator(self, token_file, names, duration, wait_file=None, namespace="default",
                     max_writes=None, extra_args=()):
        """Starts the runaway operator; returns its Popen (stdout = its JSON summary line)."""
        argv = [self.operator_bin, "--server", self.base_url, "--ca", self.ca_file,
                "--token-file", token_file, "--namespace", namespace,
                "--names", ",".join(names) if not isinstance(names, str) else names,
                "--duration", duration if isinstance(duration, str) else f"{duration}s"]
        if wait_file:
            argv += ["--wait-file", wait_file]
        if max_writes is not None:
            argv += ["--max-writes", str(max_writes)]
        argv += list(extra_args)
        return self._spawn(argv, f"operator-{len(self.procs)}.log", stdout=subprocess.PIPE)

    def run_crd_controller(self, command, *args, token_file, content_type="protobuf", duration=30):
        """Starts a subcommand of tests/clients/crd_controller (client-go, the apiextensions
        clientset; update-loop, finalizer, delete) as token_file's identity, speaking
        content_type (protobuf or json). Returns its Popen (stdout = its JSON summary)."""
        argv = [self.crd_controller_bin, command, "--kubeconfig", self.kubeconfig(token_file),
                "--content-type", content_type, "--duration", f"{duration}s", *args]
        return self._spawn(argv, f"crd-{command}-{len(self.procs)}.log", stdout=subprocess.PIPE)

    def run_storm_client(self, command, *args, token_file=None, cert=None, duration=30):
        """Starts a subcommand of tests/clients/storm_clients (conflict, throttled, relist, ...: see
        its main.go) as token_file's identity or as cert's, a (cert, key) pair (none: the
        subcommand brings its own, e.g. kubelets). Returns its Popen (stdout = its JSON summary)."""
        argv = [self.storm_clients_bin, command, "--server", self.base_url, "--ca", self.ca_file,
                "--duration", f"{duration}s"]
        if token_file:
            argv += ["--token-file", token_file]
        if cert:
            argv += ["--cert", cert[0], "--key", cert[1]]
        argv += list(args)
        return self._spawn(argv, f"{command}-{len(self.procs)}.log", stdout=subprocess.PIPE)

    def run_python_list_loop(self, kubeconfig, threads, interval, duration):
        """Starts tests/clients/python_list_loop.py (the real Python client, seed 002's LIST loop)
        with Debian's python3; returns its Popen (stdout = its JSON summary)."""
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python_list_loop.py")
        argv = ["/usr/bin/python3", script, "--kubeconfig", kubeconfig, "--threads", str(threads),
                "--interval", str(interval), "--duration", str(duration)]
        return self._spawn(argv, f"python-list-loop-{len(self.procs)}.log", stdout=subprocess.PIPE)
