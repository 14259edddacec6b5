#!/usr/bin/env python3
"""Where a build's time went, from Ninja's own log (BUILD_DIR/.ninja_log): job-seconds (the sum of
every step's own wall time, what the build costs on any number of cores) per target and per step,
the total, the wall span, and the top N steps.
  scripts/build_times.py [BUILD_DIR] [--top N] [--json]
A step that ran several times (rebuilds in the same folder) counts once, its last run; measure a
clean folder for a whole build's cost (docs/benchmarks.md has the figures and their commands)."""
import argparse
import json
import os
import re
import sys


def read_log(path):
    """The last run of each output: {output: (start_ms, end_ms)}, in the order of the log."""
    steps = {}
    with open(path) as f:
        head = f.readline()
        if not head.startswith("# ninja log v"):
            raise ValueError(f"{path} is not a Ninja log (first line: {head.strip()!r})")
        for n, line in enumerate(f, start=2):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 5:
                raise ValueError(f"{path}:{n}: expected 5 tab-separated fields, got {len(parts)}")
            start, end, output = int(parts[0]), int(parts[1]), parts[3]
            # A restarted build logs its steps again: the new run replaces the old one.
            steps.pop(output, None)
            steps[output] = (start, end)
    return steps


TARGET = re.compile(r"(?:^|/)CMakeFiles/([^/]+)\.dir/")


def target_of(output):
    """The CMake target a step belongs to: compiles by their object folder, links by their file."""
    m = TARGET.search(output)
    if m:
        return m.group(1)
    base = os.path.basename(output)
    for prefix, suffixes in (("lib", (".a", ".so")), ("", ("",))):
        for suffix in suffixes:
            if base.startswith(prefix) and base.endswith(suffix) and (prefix or suffix or "." not in base):
                name = base[len(prefix):len(base) - len(suffix)] if suffix else base[len(prefix):]
                return name + " (link)"
    return "(other) " + output


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build", help="the build folder (default: build)")
    ap.add_argument("--top", type=int, default=15, help="how many of the longest steps to list (default 15)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the tables")
    a = ap.parse_args()
    if a.top < 0:
        print("build_times: --top must be >= 0", file=sys.stderr)
        return 2
    log = os.path.join(a.build, ".ninja_log")
    if not os.path.isfile(log):
        print(f"build_times: no {log}: not a Ninja build folder, or nothing was built there yet", file=sys.stderr)
        return 2
    try:
        steps = read_log(log)
    except (ValueError, OSError) as e:
        print(f"build_times: {e}", file=sys.stderr)
        return 2
    if not steps:
        print(f"build_times: {log} holds no steps", file=sys.stderr)
        return 2

    secs = {out: (end - start) / 1000.0 for out, (start, end) in steps.items()}
    total = sum(secs.values())
    wall = (max(e for _, e in steps.values()) - min(s for s, _ in steps.values())) / 1000.0
    per_target = {}
    for out, s in secs.items():
        t = target_of(out)
        entry = per_target.setdefault(t, [0.0, 0])
        entry[0] += s
        entry[1] += 1
    targets = sorted(per_target.items(), key=lambda kv: -kv[1][0])
    top = sorted(secs.items(), key=lambda kv: -kv[1])[:a.top]

    if a.json:
        print(json.dumps({
            "build": os.path.abspath(a.build), "steps": len(secs), "job_seconds": round(total, 1),
            "wall_seconds": round(wall, 1),
            "targets": [{"target": t, "job_seconds": round(v[0], 1), "steps": v[1]} for t, v in targets],
            "top": [{"output": o, "target": target_of(o), "seconds": round(s, 1)} for o, s in top],
        }))
        return 0
    print(f"{a.build}: {len(secs)} steps, {total:.1f} job-seconds, {wall:.1f} s from the first step's start "
          f"to the last one's end")
    print(f"\n{'job-s':>8} {'share':>6} {'steps':>5}  target")
    for t, (s, n) in targets:
        print(f"{s:8.1f} {100 * s / total:5.1f}% {n:5d}  {t}")
    if top:
        print(f"\nthe {len(top)} longest steps:")
        for o, s in top:
            print(f"{s:8.1f}  {o}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
