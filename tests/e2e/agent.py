"""Runs the stormwatch agent for end-to-end tests and reads what it exports.

The agent is the real binary, attached with real uprobes: these tests need root (CI runs as
root). Without root they fail, unless STORMWATCH_LOCAL_UNPRIVILEGED=1 says this is a local,
unprivileged run, where they are skipped.
"""
import json
import os
import re
import socket
import subprocess
import threading
import time
import unittest
import urllib.error
import urllib.request

BUILD_DIR = os.environ.get(
    "STORMWATCH_BUILD_DIR",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build"))
AGENT_BINARY = os.path.join(BUILD_DIR, "stormwatch")


def require_bpf_privileges(test_case):
    """Fails (or, in an explicitly local unprivileged run, skips) without root."""
    if os.geteuid() == 0:
        return
    if os.environ.get("STORMWATCH_LOCAL_UNPRIVILEGED") == "1" and not os.environ.get("CI"):
        raise unittest.SkipTest("needs root for BPF (local unprivileged run)")
    test_case.fail("BPF end-to-end tests need root; set STORMWATCH_LOCAL_UNPRIVILEGED=1 "
                   "to skip them in a local unprivileged run")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text exposition -> list of (name, {labels}, value)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SERIES.match(line)
        if not m:
            raise ValueError("unparseable metrics line: %r" % line)
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\")
                  for k, v in _LABEL.findall(m.group(3) or "")}
        out.append((m.group(1), labels, float(m.group(4))))
    return out


class Agent:
    """The stormwatch agent as a child process: metrics over HTTP, alert lines on stdout."""

    # The environment the Helm chart gives the agent (agent.heapHugePages): its heap on
    # transparent huge pages.
    DEPLOYED_ENV = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}

    def __init__(self, workdir, extra_args=(), metrics_port=None, env=None):
        """env: the agent's environment variables besides ours (default DEPLOYED_ENV); a None
        value removes one."""
        self.workdir = workdir
        self.env = dict(os.environ)
        for name, value in (self.DEPLOYED_ENV if env is None else env).items():
            if value is None:
                self.env.pop(name, None)
            else:
                self.env[name] = value
        self.metrics_port = metrics_port or free_port()
        self.health_port = free_port()
        self.debug_port = free_port()  # never the default 9849: agents run side by side
        self.args = [AGENT_BINARY, "--metrics-address", "127.0.0.1:%d" % self.metrics_port,
                     "--health-address", "127.0.0.1:%d" % self.health_port,
                     "--debug-address", "127.0.0.1:%d" % self.debug_port, *extra_args]
        self.proc = None
        self.alerts = []          # parsed JSON alert lines, in order
        self.alert_times = []     # time.monotonic() when each arrived
        self.stdout_lines = []
        self._lock = threading.Lock()
        self.stderr_path = os.path.join(workdir, "agent-%d.stderr" % self.metrics_port)

    def start(self):
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, bufsize=1, env=self.env)
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        return self

    def _read_stdout(self):
        for line in self.proc.stdout:
            now = time.monotonic()
            line = line.rstrip("\n")
            with self._lock:
                self.stdout_lines.append(line)
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if isinstance(doc, dict) and "storm" in doc:
                    self.alerts.append(doc)
                    self.alert_times.append(now)

    def stderr(self):
        with open(self.stderr_path) as f:
            return f.read()

    def metrics(self):
        url = "http://127.0.0.1:%d/metrics" % self.metrics_port
        with urllib.request.urlopen(url, timeout=5) as r:
            return parse_metrics(r.read().decode())

    def metric_value(self, name, **labels):
        total = 0.0
        for n, l, v in self.metrics():
            if n == name and all(l.get(k) == val for k, val in labels.items()):
                total += v
        return total

    def health(self, path, port=None):
        """(status, body) of /healthz or /readyz (or `path` on another of its ports)."""
        url = "http://127.0.0.1:%d%s" % (port or self.health_port, path)
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def debug(self, path):
        """(status, body) of /debug/clients and the like, on the debug port."""
        return self.health(path, port=self.debug_port)

    def wait_attached(self, count=1, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("agent exited (%s): %s" % (self.proc.returncode, self.stderr()))
            try:
                if self.metric_value("stormwatch_targets_attached") >= count:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("agent did not attach to %d target(s) in %ss: %s"
                             % (count, timeout, self.stderr()))

    def wait_alert(self, predicate, timeout):
        """First alert line matching predicate -> (doc, arrival monotonic time)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                for doc, t in zip(self.alerts, self.alert_times):
                    if predicate(doc):
                        return doc, t
            if time.monotonic() > deadline:
                return None, None
            time.sleep(0.05)

    def request_counts(self):
        """stormwatch_requests_total as {(client, verb, group, version, resource, subresource,
        scope, code): count}."""
        counts = {}
        for n, l, v in self.metrics():
            if n == "stormwatch_requests_total":
                key = tuple(l.get(k, "") for k in
                            ("client", "verb", "group", "version", "resource", "subresource",
                             "scope", "code"))
                counts[key] = counts.get(key, 0) + int(v)
        return counts

    def capture_losses(self):
        """stormwatch_capture_lost_total by cause, the non-zero ones: what a failed count
        comparison prints, so a request the agent missed says where it was lost."""
        return {l.get("cause", ""): v for n, l, v in self.metrics()
                if n == "stormwatch_capture_lost_total" and v}

    def settled_request_counts(self, timeout=5):
        """request_counts() once unchanged for 0.3 s: the last requests before a pause may still
        be in the agent's ring buffer (drained every 10 ms)."""
        counts = self.request_counts()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.3)
            latest = self.request_counts()
            if latest == counts:
                break
            counts = latest
        return counts

    def kill(self):
        """SIGKILL: the agent gets no chance to clean up; the kernel must release its probes."""
        self.proc.kill()
        self.proc.wait()
        return self.stop()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self._reader.join(timeout=5)
            self.proc.stdout.close()
            self._stderr.close()
        return self.proc.returncode if self.proc else None
