"""The product's documentation stands alone.

Checked on every Markdown file a user reads (README.md and the other top-level *.md files,
docs/**, helm/**/*.md):
- links (inline, reference-style, images, HTML href/src) that are not URLs stay inside the
  repository and name a file that exists, and an anchor (`file.md#heading`, `#heading`) names a
  heading of that file (GitHub's heading ids) or an explicit <a id/name>;
- no text names a path outside the repository (`../shared/...`, `/work/...`), or a Markdown file
  that is not in the repository (`STORMS.md`, `DESIGN.md`);
- no internal jargon: references to the project's issues, seed incidents or sections of internal
  notes ("issue 6", "issue 3 item 7", "seed 000", "seed incident 002", "STORMS.md section 4");
- every storm of docs/stormwatch.example.yaml's `detectors` has a section in docs/storms.md, a
  runbook docs/runbooks/<storm>.md that storms.md links to, and a link from the README.

Run from this directory: /usr/bin/python3 -m unittest -v test_docs (the ctest docs_standalone).
Plain Python 3, no third-party module.
"""
import os
import re
import unittest
import urllib.parse

REPO = os.path.realpath(os.environ.get(
    "STORMWATCH_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")))

SKIP_DIRS = {".git", "build", "node_modules", ".cache"}


def rel(path):
    return os.path.relpath(path, REPO)


def markdown_files():
    """README.md and the other top-level *.md (CHANGELOG, SECURITY, ...), docs/**, helm/**."""
    files = [os.path.join(REPO, f) for f in sorted(os.listdir(REPO))
             if f.endswith(".md") and os.path.isfile(os.path.join(REPO, f))]
    for top in ("docs", "helm"):
        for root, dirs, names in os.walk(os.path.join(REPO, top)):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return files


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text):
    """(line number, line) outside fenced code blocks, inline code spans blanked."""
    out = []
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            out.append((n, re.sub(r"(`+)(?:(?!\1).)+?\1", lambda c: " " * len(c.group(0)), line)))
    return out


# ---- GitHub heading ids ----

def github_slug(heading):
    """The id GitHub gives a heading: rendered text, lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                          # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text)         # emphasis (not snake_case)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def heading_ids(text):
    """GitHub's ids of the headings of a Markdown text (a repeated heading gets -1, -2, ...),
    and the explicit <a id/name> anchors."""
    ids, seen = set(), {}
    fence = None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m:
            fence = m.group(1) if fence is None else (None if m.group(1) == fence else fence)
            continue
        if fence is not None:
            continue
        h = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if h:
            slug = github_slug(h.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            ids.add(slug if n == 0 else "%s-%d" % (slug, n))
    ids |= set(re.findall(r"<a\s+(?:id|name)=[\"']([^\"']+)[\"']", text))
    return ids


def anchors_of(path, text=None, cache={}):
    """heading_ids of a file (cached), or of `text` standing for it."""
    if text is not None:
        return heading_ids(text)
    if path not in cache:
        cache[path] = heading_ids(read(path))
    return cache[path]


# ---- links ----

INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ATTR = re.compile(r"\b(?:href|src)=[\"']([^\"']+)[\"']")
URL_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def links_of(path, text=None):
    """(line number, target) of every link in the file's prose."""
    out = []
    for n, line in prose_lines(read(path) if text is None else text):
        for rx in (INLINE_LINK, REF_DEF, HTML_ATTR):
            for m in rx.finditer(line):
                target = m.group(1).strip("<>")
                out.append((n, target))
    return out


def inside(path):
    return os.path.realpath(path) == REPO or os.path.realpath(path).startswith(REPO + os.sep)


def link_problems(path, text=None):
    problems = []
    for n, target in links_of(path, text):
        if URL_SCHEME.match(target) or target.startswith("//"):
            continue  # a URL (https:, mailto:): outside by design, not checked here
        where = "%s:%d: %s" % (rel(path), n, target)
        file_part, _, anchor = target.partition("#")
        file_part = urllib.parse.unquote(file_part)
        if file_part.startswith("/"):
            problems.append(where + ": absolute path (use a path relative to the file)")
            continue
        if not file_part:  # "#anchor": a heading of this file
            if anchor and urllib.parse.unquote(anchor) not in anchors_of(path, text):
                problems.append(where + ": no heading or <a id> '%s' in this file" % anchor)
            continue
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        if not inside(dest):
            problems.append(where + ": points outside the repository")
            continue
        if not os.path.exists(dest):
            problems.append(where + ": no such file in the repository")
            continue
        if anchor and dest.endswith(".md") and os.path.isfile(dest):
            if urllib.parse.unquote(anchor) not in anchors_of(dest):
                problems.append(where + ": no heading or <a id> '%s' in %s" % (anchor, rel(dest)))
    return problems


# ---- text ----

# A path that climbs out of its directory: ../x, ../../x (not the "..." of an elided path).
PARENT_PATH = re.compile(r"(?<![\w.])((?:\.\./)+)([\w.-]+)")
# Absolute paths of the machines the project is built on, never of a user's.
WORK_PATH = re.compile(r"(?<![\w.])/work/[\w.-]+")
UPPER_MD = re.compile(r"(?<![\w./-])([A-Z][A-Z0-9_-]*\.md)\b")

JARGON = [
    (re.compile(r"\bissues?\s+#?\d+", re.I), "a reference to the project's issue tracker"),
    (re.compile(r"\bseeds?(?:\s+incidents?)?\s*#?\s*\d{1,3}\b", re.I), "a seed incident number"),
    (re.compile(r"\bseed[-_]\d+", re.I), "a seed incident file"),
    (re.compile(r"\bseeds/", re.I), "the internal seeds folder"),
    (re.compile(r"\bSTORMS\.md\b"), "internal notes (the storms are docs/storms.md)"),
    (re.compile(r"\bDESIGN\.md\b"), "internal notes (the design is docs/design.md)"),
    (re.compile(r"\(section \d+\)|\bsection \d+ of\b|§\s*\d", re.I), "a section number of internal notes"),
]


def repo_markdown_names():
    names = set()
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        names |= {f for f in files if f.endswith(".md")}
    return names


def text_problems(path, text=None):
    """Paths outside the repository and jargon, anywhere in the file (code blocks included:
    a user reads those too). Link targets are checked by link_problems instead."""
    problems = []
    known_md = repo_markdown_names()
    base_dirs = (os.path.dirname(path), REPO)
    for n, line in enumerate((read(path) if text is None else text).split("\n"), 1):
        text = INLINE_LINK.sub(lambda m: m.group(0)[: m.group(0).rfind("](")] + "]", line)
        text = REF_DEF.sub("", text)
        text = HTML_ATTR.sub("", text)
        where = "%s:%d" % (rel(path), n)
        for m in PARENT_PATH.finditer(text):
            # A "../x" in prose may be meant from the file's folder or from the repository root:
            # either way it must not leave the repository.
            if any(not inside(os.path.join(b, m.group(1) + m.group(2))) for b in base_dirs):
                problems.append("%s: %r is outside the repository" % (where, m.group(0)))
        for m in WORK_PATH.finditer(text):
            problems.append("%s: %r is a path on the build machine" % (where, m.group(0)))
        for m in UPPER_MD.finditer(text):
            if m.group(1) not in known_md and m.group(1) not in ("STORMS.md", "DESIGN.md"):
                problems.append("%s: %s is not in the repository" % (where, m.group(1)))
        for rx, why in JARGON:
            for m in rx.finditer(text):
                problems.append("%s: %r: %s" % (where, m.group(0), why))
    return problems


# ---- storms ----

def example_storms():
    """The keys under `detectors:` in docs/stormwatch.example.yaml (two-space indent)."""
    storms, inside_detectors = [], False
    for line in read(os.path.join(REPO, "docs", "stormwatch.example.yaml")).split("\n"):
        if re.match(r"^\S", line):
            inside_detectors = line.startswith("detectors:")
            continue
        m = re.match(r"^  ([a-z_][a-z0-9_]*):", line)
        if inside_detectors and m:
            storms.append(m.group(1))
    return storms


class DocsStandAlone(unittest.TestCase):
    def setUp(self):
        self.files = markdown_files()
        self.assertIn(os.path.join(REPO, "README.md"), self.files)

    def check_each_file(self, check):
        for path in self.files:
            with self.subTest(file=rel(path)):
                problems = check(path)
                self.assertEqual(problems, [], "\n" + "\n".join(problems))

    def test_links_stay_inside_and_resolve(self):
        """Every non-URL link names a file of the repository, and its anchor a heading."""
        self.check_each_file(link_problems)

    def test_no_outside_paths_or_jargon(self):
        """No text points outside the repository or speaks the project's internal language."""
        self.check_each_file(text_problems)

    def test_every_storm_documented(self):
        storms = example_storms()
        self.assertEqual(len(storms), 8, storms)
        storms_md = os.path.join(REPO, "docs", "storms.md")
        sections = anchors_of(storms_md)
        storms_links = {t for _, t in links_of(storms_md)}
        readme_links = {t for _, t in links_of(os.path.join(REPO, "README.md"))}
        for storm in storms:
            with self.subTest(storm=storm):
                self.assertIn(storm, sections, "docs/storms.md has no section '## %s'" % storm)
                runbook = os.path.join(REPO, "docs", "runbooks", storm + ".md")
                self.assertTrue(os.path.isfile(runbook), "no runbook %s" % rel(runbook))
                self.assertIn("runbooks/%s.md" % storm, storms_links,
                              "docs/storms.md does not link to its runbook")
                self.assertIn("docs/storms.md#%s" % storm, readme_links,
                              "README.md does not link to docs/storms.md#%s" % storm)


class Checks(unittest.TestCase):
    """The checker itself, on made-up text: it must catch what it is for."""

    def test_slugs(self):
        self.assertEqual(github_slug("update_loop"), "update_loop")
        self.assertEqual(github_slug("Measured (this machine: 2 cores, Debian bookworm, kernel 6.18)"),
                         "measured-this-machine-2-cores-debian-bookworm-kernel-618")
        self.assertEqual(github_slug("Security: what the agent gets, and why"),
                         "security-what-the-agent-gets-and-why")
        self.assertEqual(github_slug("`list_storm`: a *LIST* storm"), "list_storm-a-list-storm")
        self.assertEqual(github_slug("After install: the first three things to check"),
                         "after-install-the-first-three-things-to-check")

    def test_jargon_caught(self):
        for bad in ("the runaway operator (seed 000)", "STORMS.md section 4, seed incident 003.",
                    "promtool (issue 6)", "# Overhead benchmark (issue 3 item 7)",
                    "| `update_loop` (section 1) |", "see shared/seeds/000_x.txt",
                    "`../shared/schemas`", "/work/shared/STORMS.md", "DEVELOPERS.md"):
            found = [why for rx, why in JARGON if rx.search(bad)]
            found += [m.group(0) for m in PARENT_PATH.finditer(bad)
                      if not inside(os.path.join(REPO, m.group(0)))]
            found += WORK_PATH.findall(bad)
            found += [m for m in UPPER_MD.findall(bad) if m not in repo_markdown_names()]
            self.assertTrue(found, bad)
        for good in ("the issuer (iss) claim", "a seed of the hash", "`.../RESOURCE/NAME/status`",
                     "see docs/storms.md", "Kubernetes 1.31", "README.md"):
            found = [why for rx, why in JARGON if rx.search(good)]
            found += [m.group(0) for m in PARENT_PATH.finditer(good)]
            found += WORK_PATH.findall(good)
            found += [m for m in UPPER_MD.findall(good) if m not in repo_markdown_names()]
            self.assertFalse(found, good)

    def test_problems_found(self):
        virtual = os.path.join(REPO, "docs", "virtual.md")
        text = "\n".join([
            "# Title",
            "[ok](storms.md#update_loop) [ok](#title) [ok](../README.md#requirements)",
            "[out](../../shared/STORMS.md)",
            "[missing](nothing-here.md)",
            "[anchor](storms.md#no-such-storm)",
            "[abs](/etc/passwd)",
            "```sh",
            "ls ../../shared  # seed 000",
            "```",
            "[url](https://example.com/x.md) <https://example.com>",
        ])
        links = link_problems(virtual, text)
        self.assertEqual([p.split(": ")[0] for p in links],
                         ["docs/virtual.md:3", "docs/virtual.md:4", "docs/virtual.md:5",
                          "docs/virtual.md:6"], links)
        texts = text_problems(virtual, text)
        self.assertEqual(sorted({p.split(": ")[0] for p in texts}), ["docs/virtual.md:8"], texts)
        self.assertEqual(len(texts), 2, texts)

    def test_links_parsed(self):
        line = ('[a](../shared/STORMS.md) ![i](img.png "t") [b](docs/x.md#y) [c]: ../z.md '
                '<a href="../w.md">w</a> `[not](a-link.md)`')
        targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
        self.assertEqual(targets[:3], ["../shared/STORMS.md", "img.png", "docs/x.md#y"])
        self.assertEqual(HTML_ATTR.findall(line), ["../w.md"])
        self.assertEqual([t for _, t in prose_lines(line)[:1]][0].count("a-link.md"), 0)


if __name__ == "__main__":
    unittest.main()
