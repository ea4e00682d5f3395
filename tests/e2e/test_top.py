"""End to end, as root: `stormwatch top` against real agents on the test API server.

Two agents attached to the same API server (as two masters' agents would each see their own
server: here both see every request, so merged rates and counts are exactly double), known
clients driven by curl at fixed rates (one GETting fast, one LISTing, one getting 409s from
stale PUTs), and `stormwatch top` run in a real terminal (tmux): the screen is read with
`tmux capture-pane`, keys are sent with `tmux send-keys`. `--once --json` is checked exactly
against the traffic and the server's own counts (/debug/counts).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import AGENT_BINARY, Agent, free_port, require_bpf_privileges  # noqa: E402
from cluster import Cluster  # noqa: E402
from counts import count_map, delta  # noqa: E402

HAMMER = "system:serviceaccount:default:top-hammer"
LISTER = "system:serviceaccount:default:top-lister"
CONFLICTER = "system:serviceaccount:default:top-conflicter"
TARGET_CM = "top-target"
# Rates of the live traffic (requests/s) and how long it runs.
HAMMER_RATE, LISTER_RATE, CONFLICTER_RATE = 40, 10, 5
TRAFFIC_S = 300  # longer than the tests; stopped by tearDownClass


def sa_name(identity):
    return identity.rsplit(":", 1)[1]


class TopEndToEnd(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.cluster = None
        cls.agents = []
        cls.traffic = []
        if os.geteuid() != 0:
            return  # setUp fails or skips each test (require_bpf_privileges)
        if not shutil.which("tmux"):
            raise AssertionError("tmux is needed (scripts/setup.sh installs it)")
        c = cls.cluster = Cluster().start()
        # APF UIDs named from the server's own table; a quick conflict_storm so the STORMS
        # column has one to show within the test.
        apf = c.server_apf()
        mapping = {v["uid"]: name for name, v in apf["priorityLevels"].items()}
        config = {"apf": {"static_mapping": mapping},
                  "detectors": {"conflict_storm": {"conflict_rate": 2, "sustain_s": 5, "resolve_s": 30}}}
        config_path = os.path.join(c.tmp, "top-config.yaml")
        with open(config_path, "w") as f:
            json.dump(config, f)  # JSON is YAML
        for _ in range(2):
            a = Agent(c.tmp, extra_args=["--pid", str(c.apiserver_pid), "--config", config_path]).start()
            cls.agents.append(a)
        for a in cls.agents:
            a.wait_attached(1)
        admin = c.admin_kubeconfig
        r = c.kubectl("create", "configmap", TARGET_CM, "--from-literal=a=b", kubeconfig=admin)
        assert r.returncode == 0, r.stderr
        for i in range(20):  # something to LIST
            c.kubectl("create", "configmap", "top-filler-%d" % i, "--from-literal=k=%s" % ("v" * 200),
                      kubeconfig=admin)
        cls.tokens = {}
        for identity in (HAMMER, LISTER, CONFLICTER):
            with open(c.mint_token("default", sa_name(identity))) as f:
                cls.tokens[identity] = f.read().strip()
        # The live traffic, for the whole class: curl paces its requests (--rate) on one
        # HTTP/2 connection per client.
        cm_url = c.base_url + "/api/v1/namespaces/default/configmaps"
        cls.traffic.append(cls.curl(HAMMER, HAMMER_RATE, cm_url + "/" + TARGET_CM))
        cls.traffic.append(cls.curl(LISTER, LISTER_RATE, cm_url))
        stale = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": TARGET_CM, "namespace": "default", "resourceVersion": "1"},
                            "data": {"a": "c"}})
        cls.traffic.append(cls.curl(CONFLICTER, CONFLICTER_RATE, cm_url + "/" + TARGET_CM,
                                    ["-X", "PUT", "-H", "Content-Type: application/json", "-d", stale]))
        cls.traffic_started = time.monotonic()

    @classmethod
    def curl(cls, identity, rate, url, extra=(), count=None):
        """curl as `identity`: `count` requests of `url` (default: TRAFFIC_S seconds' worth) on one
        HTTP/2 connection, paced at `rate`/s (0: as fast as it goes); stdout: "code bytes" each."""
        count = count or rate * TRAFFIC_S
        config = os.path.join(cls.cluster.tmp, "curl-%s-%d.conf" % (sa_name(identity), free_port()))
        with open(config, "w") as f:  # the URLs in a file: thousands of them
            f.write('url = "%s"\noutput = "/dev/null"\n' % url * count)
        argv = ["curl", "-sS", "--http2", "--cacert", cls.cluster.ca_file,
                "-H", "Authorization: Bearer " + cls.tokens[identity], *extra]
        if rate:
            argv += ["--rate", "%d/s" % rate]
        argv += ["-w", "%{http_code} %{size_download}\\n", "-K", config]
        # The live traffic's output is not read: a pipe would fill and stall it.
        out = subprocess.PIPE if count != rate * TRAFFIC_S else subprocess.DEVNULL
        return subprocess.Popen(argv, stdout=out, stderr=out, text=True)

    @classmethod
    def tearDownClass(cls):
        for p in cls.traffic:
            if p.poll() is None:
                p.terminate()
            p.communicate()
        for a in cls.agents:
            a.stop()
        if cls.cluster:
            cls.cluster.stop()

    def setUp(self):
        require_bpf_privileges(self)
        self.sessions = []

    def tearDown(self):
        for s in self.sessions:
            subprocess.run(["tmux", "kill-session", "-t", s], capture_output=True)
        if self._outcome_failed():
            for a in self.agents:
                print("agent stderr:\n" + a.stderr()[-3000:], file=sys.stderr)

    def _outcome_failed(self):
        result = getattr(self, "_outcome", None)
        errors = getattr(result, "errors", None) or getattr(getattr(result, "result", None), "errors", [])
        failures = getattr(getattr(result, "result", None), "failures", [])
        return any(e for _, e in list(errors) + list(failures))

    def debug_url(self, agent):
        return "http://127.0.0.1:%d" % agent.debug_port

    # ---- tmux ----

    def start_top(self, urls, width=200, height=50):
        name = "stormwatch-top-%d" % free_port()
        # After top exits, the pane says how (and stays for capture-pane).
        cmd = " ".join([AGENT_BINARY, "top", *urls]) + "; echo TOP-EXITED $?; sleep 60"
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height),
                        cmd], check=True)
        self.sessions.append(name)
        return name

    def screen(self, session):
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], check=True,
                              capture_output=True, text=True).stdout

    def keys(self, session, *keys):
        subprocess.run(["tmux", "send-keys", "-t", session, *keys], check=True)

    def wait_screen(self, session, predicate, timeout=15, what=""):
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen(session)
            if predicate(text):
                return text
            time.sleep(0.25)
        self.fail("screen never showed %s:\n%s" % (what, text))

    @staticmethod
    def rows(text):
        """Client rows on the screen: {client: (line index, [cells])}, cells split on 2+ spaces
        after the client name (REQ/S LIST/S LIST-B/S 409/S 429/S, then APF AGENTS STORMS)."""
        out = {}
        lines = text.splitlines()
        start = next((i for i, l in enumerate(lines) if l.startswith("CLIENT")), None)
        if start is None:
            return out
        for i, line in enumerate(lines[start + 1:], start + 1):
            if not line.strip() or line.startswith("... "):
                continue
            if line.startswith(("r l b c t n sort", "filter: type")):
                break  # the key help on the last line
            client, rest = line.split(" ", 1)
            cols = rest.split()
            # LIST B/S is "12.3 KiB" (two tokens) or "0" / "-".
            if len(cols) > 3 and cols[3] in ("B", "KiB", "MiB", "GiB"):
                cols[2:4] = [cols[2] + " " + cols[3]]
            out[client] = (i, cols)
        return out

    @staticmethod
    def order(text, clients):
        rows = TopEndToEnd.rows(text)
        return [c for _, c in sorted((rows[c][0], c) for c in clients if c in rows)]

    def rate(self, cells, column):
        v = cells[column]
        self.assertNotEqual(v, "-", cells)
        return float(v[:-1]) * 1000 if v.endswith("k") else float(v)

    # ---- tests ----

    def test_live_view_in_tmux(self):
        """One agent: the three clients in request-rate order with their rates, APF level and
        the conflict storm; sort keys reorder them; `/` filters; resize; `q` quits."""
        session = self.start_top([self.debug_url(self.agents[0])])
        ours = [HAMMER, LISTER, CONFLICTER]

        def ready(text):
            rows = self.rows(text)
            return (all(c in rows and rows[c][1][0] != "-" for c in ours)
                    and "conflict_storm" in " ".join(rows[CONFLICTER][1]))
        text = self.wait_screen(session, ready, timeout=40, what="the three clients with rates and the storm")
        print("\n" + text, file=sys.stderr)
        self.assertEqual(self.order(text, ours), [HAMMER, LISTER, CONFLICTER])
        self.assertRegex(text.splitlines()[0], r"^stormwatch top  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC  "
                                               r"agents 1/1 up  clients \d+  sort requests")
        rows = self.rows(text)
        hammer, lister, conflicter = rows[HAMMER][1], rows[LISTER][1], rows[CONFLICTER][1]
        # Rates as paced by curl (a busy 2-core machine may fall behind, never ahead).
        self.assertTrue(HAMMER_RATE * 0.5 <= self.rate(hammer, 0) <= HAMMER_RATE * 1.3, hammer)
        self.assertTrue(LISTER_RATE * 0.5 <= self.rate(lister, 1) <= LISTER_RATE * 1.3, lister)
        self.assertEqual(self.rate(lister, 0), self.rate(lister, 1))  # all its requests are LISTs
        self.assertRegex(lister[2], r"^\d+(\.\d)? KiB$")              # 21 configmaps per LIST
        self.assertTrue(CONFLICTER_RATE * 0.5 <= self.rate(conflicter, 3) <= CONFLICTER_RATE * 1.3, conflicter)
        self.assertEqual(self.rate(conflicter, 0), self.rate(conflicter, 3))  # every PUT a 409
        self.assertEqual(self.rate(hammer, 1), 0)
        self.assertEqual(self.rate(hammer, 3), 0)
        for cells in (hammer, lister, conflicter):
            self.assertEqual(cells[4], "0")             # no 429
            self.assertEqual(cells[5], "workload-low")  # service accounts' APF level
            self.assertEqual(cells[6], "1")             # the one agent
        self.assertEqual(" ".join(conflicter[7:]), "conflict_storm configmaps")
        self.assertEqual(hammer[7:], ["-"])

        # Sort by LISTs/s, then by 409s/s; `<` moves back to requests.
        self.keys(session, "l")
        text = self.wait_screen(session, lambda t: "sort lists" in t.splitlines()[0], what="sort lists")
        self.assertEqual(self.order(text, ours)[0], LISTER)
        self.assertIn("LIST/S*", text)
        self.keys(session, "c")
        text = self.wait_screen(session, lambda t: "sort conflicts" in t.splitlines()[0], what="sort conflicts")
        self.assertEqual(self.order(text, ours)[0], CONFLICTER)
        self.keys(session, "<", "<", "<")
        text = self.wait_screen(session, lambda t: "sort requests" in t.splitlines()[0], what="sort requests")
        self.assertEqual(self.order(text, ours), [HAMMER, LISTER, CONFLICTER])

        # `/` filter: only matching rows; Esc clears it.
        self.keys(session, "/")
        self.keys(session, "-l", "top-lis")
        self.keys(session, "Enter")
        text = self.wait_screen(session, lambda t: "filter /top-lis (1 shown)" in t, what="the filter")
        self.assertEqual(list(self.rows(text)), [LISTER])
        self.keys(session, "/")
        self.keys(session, "Escape")
        text = self.wait_screen(session, lambda t: "filter" not in t.splitlines()[0] and
                                all(c in self.rows(t) for c in ours), what="the filter cleared")

        # A narrower terminal: every line fits, the busiest client is still first.
        subprocess.run(["tmux", "resize-window", "-t", session, "-x", "100", "-y", "20"], check=True)
        text = self.wait_screen(session, lambda t: max(len(l) for l in t.splitlines()) <= 100 and
                                "..fault:top-hammer" in t, what="the resized frame")
        self.assertLessEqual(len(text.splitlines()), 20)

        self.keys(session, "q")
        self.wait_screen(session, lambda t: "TOP-EXITED 0" in t, what="top's exit")

    def test_two_agents_and_one_down(self):
        """Three URLs, one with nobody behind it: the header says 2/3 up and why the third is
        down, rows are merged from the other two (both see every request: twice the rate)."""
        dead = "http://127.0.0.1:%d" % free_port()
        urls = [self.debug_url(a) for a in self.agents] + [dead]
        session = self.start_top(urls)

        def ready(text):
            rows = self.rows(text)
            return HAMMER in rows and rows[HAMMER][1][0] != "-"
        text = self.wait_screen(session, ready, timeout=20, what="the hammer's merged row")
        print("\n" + text, file=sys.stderr)
        lines = text.splitlines()
        self.assertIn("agents 2/3 up", lines[0])
        self.assertEqual(lines[2], "[1] %s/debug/top  up  node %s" % (urls[0], os.uname().nodename))
        self.assertEqual(lines[3], "[2] %s/debug/top  up  node %s" % (urls[1], os.uname().nodename))
        self.assertRegex(lines[4], r"^\[3\] %s/debug/top  DOWN: .*([Cc]onnection refused|Couldn't connect)"
                         % re.escape(dead))
        hammer = self.rows(text)[HAMMER][1]
        self.assertEqual(hammer[6], "1,2")
        self.assertTrue(2 * HAMMER_RATE * 0.5 <= self.rate(hammer, 0) <= 2 * HAMMER_RATE * 1.3, hammer)
        self.keys(session, "q")
        self.wait_screen(session, lambda t: "TOP-EXITED 0" in t, what="top's exit")

        # The same three URLs, --once --json: both agents' rates summed.
        r = subprocess.run([AGENT_BINARY, "top", "--once", "--json", "--filter", "top-hammer", *urls],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual([a["up"] for a in doc["agents"]], [True, True, False])
        self.assertEqual([c["client"] for c in doc["clients"]], [HAMMER])
        row = doc["clients"][0]
        self.assertEqual(row["agents"], [u + "/debug/top" for u in urls[:2]])
        self.assertTrue(2 * HAMMER_RATE * 0.5 <= row["requests_per_second"] <= 2 * HAMMER_RATE * 1.3, row)
        # Nobody answering: exit 1, the reason on the frame.
        r = subprocess.run([AGENT_BINARY, "top", "--once", dead], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("agents 0/1 up", r.stdout)

    def test_once_json_exact_counts(self):
        """Known traffic to completion (30 GETs, 12 LISTs, 7 stale PUTs = 409s from three new
        service accounts), then `top --once --json`: their cumulative counts exactly, equal to
        the server's own counts; LIST bytes equal to what curl downloaded; through both agents,
        exactly twice each."""
        c = self.cluster
        getter, lister, conflicter = ("system:serviceaccount:default:exact-" + n for n in ("getter", "lister", "conflicter"))
        for identity in (getter, lister, conflicter):
            with open(c.mint_token("default", sa_name(identity))) as f:
                self.tokens[identity] = f.read().strip()
        before = count_map(c.server_counts())
        cm_url = c.base_url + "/api/v1/namespaces/default/configmaps"
        stale = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": TARGET_CM, "namespace": "default", "resourceVersion": "1"}})
        procs = {getter: self.curl(getter, 0, cm_url + "/" + TARGET_CM, count=30),
                 lister: self.curl(lister, 0, cm_url, count=12),
                 conflicter: self.curl(conflicter, 0, cm_url + "/" + TARGET_CM, count=7,
                                       extra=["-X", "PUT", "-H", "Content-Type: application/json", "-d", stale])}
        out = {}
        for identity, p in procs.items():
            stdout, stderr = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, stderr)
            out[identity] = [line.split() for line in stdout.splitlines()]
        self.assertEqual([code for code, _ in out[getter]], ["200"] * 30)
        self.assertEqual([code for code, _ in out[lister]], ["200"] * 12)
        self.assertEqual([code for code, _ in out[conflicter]], ["409"] * 7)
        list_bytes = sum(int(size) for _, size in out[lister])
        server = delta(count_map(c.server_counts()), before)

        def server_count(identity, verb=None, code=None):
            return sum(v for k, v in server.items()
                       if k[1] == identity and (verb is None or k[2] == verb) and (code is None or k[8] == code))
        self.assertEqual((server_count(getter), server_count(lister, verb="LIST"),
                          server_count(conflicter, code="409")), (30, 12, 7))

        want = [
            {"client": getter, "requests": 30, "lists": 0, "list_bytes": 0, "conflicts": 0, "throttled": 0,
             "priority_levels": ["workload-low"], "storms": []},
            {"client": lister, "requests": 12, "lists": 12, "list_bytes": list_bytes, "conflicts": 0,
             "throttled": 0, "priority_levels": ["workload-low"], "storms": []},
            {"client": conflicter, "requests": 7, "lists": 0, "list_bytes": 0, "conflicts": 7,
             "throttled": 0, "priority_levels": ["workload-low"], "storms": []},
        ]
        keys = ("client", "requests", "lists", "list_bytes", "conflicts", "throttled",
                "priority_levels", "storms")

        def once(urls):
            r = subprocess.run([AGENT_BINARY, "top", "--once", "--json", "--filter", "exact-", *urls],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            return json.loads(r.stdout)

        deadline = time.monotonic() + 10
        while True:  # the agent publishes once a second
            doc = once([self.debug_url(self.agents[0])])
            got = [{k: row[k] for k in keys} for row in doc["clients"]]
            if got == want or time.monotonic() > deadline:
                break
        print("\ntop --once --json: %s" % json.dumps(doc), file=sys.stderr)
        self.assertEqual(got, want)
        self.assertEqual(doc["clients_total"] >= 6, True, doc["clients_total"])
        self.assertEqual(doc["sort"], "requests")
        # A handful of clients, a table of 4,096: every request is some row's.
        self.assertEqual(doc["untracked_requests_per_second"], 0, doc)
        self.assertEqual(doc["filter"], "exact-")
        self.assertEqual(doc["agents"], [{"url": self.debug_url(self.agents[0]) + "/debug/top",
                                          "up": True, "node": os.uname().nodename}])
        # Both agents saw every request: merged, each count is exactly twice.
        doc = once([self.debug_url(a) for a in self.agents])
        got = [{k: row[k] for k in keys} for row in doc["clients"]]
        doubled = [{k: (2 * v if isinstance(v, int) else v) for k, v in row.items()} for row in want]
        self.assertEqual(got, doubled)
        self.assertEqual([len(row["agents"]) for row in doc["clients"]], [2, 2, 2])

        # The text frame of the same: the rows in the same order.
        r = subprocess.run([AGENT_BINARY, "top", "--once", "--filter", "exact-", self.debug_url(self.agents[0])],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.order(r.stdout, [getter, lister, conflicter]), [getter, lister, conflicter])


if __name__ == "__main__":
    unittest.main(verbosity=2)
