#!/usr/bin/env python3
"""Checks that what users read states what is true now, for its reader.

  scripts/check_docs.py [REPO_ROOT]

Fails (exit 1, one line per hit: file:line: what, the text) when
  - docs/*.md, README.md, tutorials/**/*.md or a string literal of cli/ and debug/ (.cpp, .h:
    what the tool prints) has a development-diary phrase from the PATTERNS list below;
  - a docs/*.md is not linked from docs/README.md, or a relative link there points nowhere;
  - any tracked text file names the steering folder or its notes file (FORBIDDEN below).
The list is short and explicit on purpose: each pattern names a kind of text a reader cannot use.
"""
import os
import re
import subprocess
import sys

# (pattern, why). Case-insensitive unless the pattern sets (?-i:...) itself.
PATTERNS = [
    (r"\bissues?\s+#?\d+", "an issue number: a reader cannot look it up"),
    (r"\(#\d+\)|\b(PR|pull request)\s*#?\d+\b", "an issue or pull-request number"),
    (r"\bour\s+(\d+-core\s+|own\s+|shared\s+)?(machine|vm)s?\b", "\"our machine\": say what the machine is"),
    (r"\b(?-i:sessions?)\b", "a work session: say what is true now"),
    (r"\bother engineers?\b", "who else was working: not the reader's concern"),
    (r"\b(another|a parallel|a test|other engineers') build (ran|was running|running)\b",
     "a machine-load story: give the load average as a condition"),
    (r"\bbusier machine\b", "a machine-load story: give the load average as a condition"),
    (r"\bsince then\b", "a note dated against an earlier state: state what is true now"),
    (r"\bcommit\s+`?[0-9a-f]{7,40}\b", "dated to a commit: state what is true now"),
    (r"\(the start of this\b", "a development-diary marker"),
]
# Measurements, and the conditions they were taken in, live in docs/benchmarks.md only.
ONLY_IN_BENCHMARKS = (r"\bload average\b", "a measurement condition outside docs/benchmarks.md: move the measurement there")
# Names that nothing in the repository may mention (built from parts so this file does not).
FORBIDDEN = ["../" + "shared", "CHECKS" + ".md"]

STRING_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=False)
    if out.returncode == 0 and out.stdout:
        return [p for p in out.stdout.decode().split("\0") if p]
    files = []  # not a git checkout: walk it
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
        files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return files


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    files = tracked_files(root)
    compiled = [(re.compile(p, re.IGNORECASE), why) for p, why in PATTERNS]
    hits = []

    def scan(rel, lines):
        rules = compiled if rel == "docs/benchmarks.md" else compiled + [(re.compile(ONLY_IN_BENCHMARKS[0], re.I), ONLY_IN_BENCHMARKS[1])]
        for lineno, text in lines:
            for rx, why in rules:
                m = rx.search(text)
                if m:
                    hits.append(f"{rel}:{lineno}: {why}: ...{text[max(0, m.start() - 40):m.end() + 40].strip()}...")

    prose = [f for f in files if f.endswith(".md") and
             (f == "README.md" or (f.startswith("docs/") and f.count("/") == 1) or f.startswith("tutorials/"))]
    for rel in prose:
        scan(rel, enumerate(read(os.path.join(root, rel)).splitlines(), 1))
    code = [f for f in files if f.split("/")[0] in ("cli", "debug") and f.endswith((".cpp", ".h"))]
    for rel in code:
        lines = []
        for lineno, text in enumerate(read(os.path.join(root, rel)).splitlines(), 1):
            literals = [m.group(1) for m in STRING_LITERAL.finditer(text)]
            if literals:
                lines.append((lineno, " ".join(literals)))
        scan(rel, lines)

    for rel in files:
        if rel == "scripts/check_docs.py":
            continue
        path = os.path.join(root, rel)
        if not os.path.isfile(path) or os.path.getsize(path) > 2_000_000:
            continue
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:
            continue
        for lineno, text in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            for name in FORBIDDEN:
                if name in text:
                    hits.append(f"{rel}:{lineno}: names '{name}', which is not part of the project")

    index = os.path.join(root, "docs", "README.md")
    if not os.path.isfile(index):
        hits.append("docs/README.md: missing (the docs index)")
    else:
        text = read(index)
        linked = set()
        for m in LINK.finditer(text):
            target = m.group(1)
            if "://" in target:
                continue
            full = os.path.normpath(os.path.join(root, "docs", target))
            if not os.path.exists(full):
                hits.append(f"docs/README.md: links to {target}, which does not exist")
            linked.add(os.path.relpath(full, root))
        for rel in sorted(files):
            if rel.startswith("docs/") and rel.count("/") == 1 and rel.endswith(".md") and rel != "docs/README.md":
                if rel not in linked:
                    hits.append(f"docs/README.md: does not link {rel} (every doc is reachable from the index)")

    for h in hits:
        print(h)
    print(f"check_docs: {len(prose)} documents, {len(code)} source files of printed text: "
          f"{'no hits' if not hits else str(len(hits)) + ' hits'}")
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
