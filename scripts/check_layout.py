#!/usr/bin/env python3
"""Checks the layout rules of docs/layout.md: includes run down the floors, never up.

  scripts/check_layout.py [REPO]      exit 1 and one line per broken rule

The rules:
  - the libraries: core <- nn <- optim <- debug (a folder includes only the folders below it);
  - debug's rooms: evidence <- checks <- diagnosis <- report <- run <- zoo (a room includes only
    its own and the rooms below it; the check families under checks/ may include each other);
  - no source file under debug/ is longer than 800 lines;
  - docs/layout.md names every header under debug/ (its reading order).
"""
import pathlib
import re
import sys

LIBRARY_FLOORS = {"core": 0, "nn": 1, "optim": 2, "debug": 3}
DEBUG_ROOMS = {"evidence": 0, "checks": 1, "diagnosis": 2, "report": 3, "run": 4, "zoo": 5, "corpus": 5}
MAX_DEBUG_LINES = 800
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(path):
    """'debug/checks/data/x.h' -> 'checks'; None outside debug's rooms."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "debug" and parts[1] in DEBUG_ROOMS else None


def main():
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    problems = []
    sources = [p for top in LIBRARY_FLOORS for p in (repo / top).rglob("*") if p.suffix in (".h", ".cpp")]
    for p in sorted(sources):
        rel = p.relative_to(repo).as_posix()
        text = p.read_text(errors="replace")
        top = rel.split("/")[0]
        for inc in INCLUDE.findall(text):
            target = inc.split("/")[0]
            if target in LIBRARY_FLOORS and LIBRARY_FLOORS[target] > LIBRARY_FLOORS[top]:
                problems.append(f"{rel}: includes {inc}, a floor above {top}/ ({' <- '.join(LIBRARY_FLOORS)})")
            src_room, dst_room = room_of(rel), room_of(inc)
            if top == "debug" and inc.startswith("debug/"):
                if dst_room is None and not (repo / inc).exists():
                    problems.append(f"{rel}: includes {inc}, which does not exist")
                elif src_room is None or dst_room is None:
                    problems.append(f"{rel}: includes {inc}: every debug file lives in a room "
                                    f"({', '.join(DEBUG_ROOMS)})")
                elif DEBUG_ROOMS[dst_room] > DEBUG_ROOMS[src_room]:
                    problems.append(f"{rel}: includes {inc}, a room above {src_room}/ "
                                    f"({' <- '.join(DEBUG_ROOMS)})")
        if top == "debug":
            lines = text.count("\n")
            if lines > MAX_DEBUG_LINES:
                problems.append(f"{rel}: {lines} lines, over the {MAX_DEBUG_LINES} a debug file may have: split it "
                                "by check or by concern")
    layout = (repo / "docs" / "layout.md").read_text()
    for h in sorted((repo / "debug").rglob("*.h")):
        rel = h.relative_to(repo / "debug").as_posix()
        if f"`{rel}`" not in layout:
            problems.append(f"docs/layout.md: the reading order of debug/ does not name `{rel}`")
    for line in problems:
        print(line)
    print(f"layout: {len(sources)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
