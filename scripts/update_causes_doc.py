#!/usr/bin/env python3
"""Rewrites the diagnosis tables in docs/checks.md from `gradsleuth checks --causes`.

    scripts/update_causes_doc.py [build/bin/gradsleuth]

The tables follow the marker line `<!-- gradsleuth checks --causes -->` and end at the first
line after them that is not a table row or the blank line between the two tables.
"""
import pathlib
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
tool = sys.argv[1] if len(sys.argv) > 1 else str(root / "build/bin/gradsleuth")
tables = subprocess.run([tool, "checks", "--causes"], check=True, capture_output=True, text=True).stdout
doc = root / "docs/checks.md"
lines = doc.read_text().split("\n")
marker = "<!-- gradsleuth checks --causes -->"
start = lines.index(marker) + 1
end = start
blank_seen = False
while end < len(lines) and (lines[end].startswith("|") or (lines[end] == "" and not blank_seen)):
    blank_seen = blank_seen or lines[end] == ""
    end += 1
new = lines[:start] + tables.rstrip("\n").split("\n") + lines[end:]
doc.write_text("\n".join(new))
print(f"update_causes_doc: {doc.relative_to(root)} holds the tables of {tool}")
