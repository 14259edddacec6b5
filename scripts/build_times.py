#!/usr/bin/env python3
"""Where a build's time went, from Ninja's own log (BUILD_DIR/.ninja_log): job-seconds (the sum of
every step's own wall time, what the build costs on any number of cores) per target and per step,
the total, the wall span, and the top N steps.
  scripts/build_times.py [BUILD_DIR] [--top N] [--json] [--against OTHER_BUILD_DIR]
--against compares the two builds target by target (OTHER first, then BUILD_DIR, and the change): measure
both as clean folders under the same conditions (a loaded machine stretches every step).
A step that ran several times (rebuilds in the same folder) counts once, its last run; measure a
clean folder for a whole build's cost (docs/benchmarks.md has the figures and their commands)."""
import argparse
import json
import os
import re
import signal
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


def summarise(build):
    """A build folder's steps: ({output: seconds}, job-seconds, wall seconds, {target: [seconds, steps]})."""
    log = os.path.join(build, ".ninja_log")
    if not os.path.isfile(log):
        raise ValueError(f"no {log}: not a Ninja build folder, or nothing was built there yet")
    steps = read_log(log)
    if not steps:
        raise ValueError(f"{log} holds no steps")
    secs = {out: (end - start) / 1000.0 for out, (start, end) in steps.items()}
    wall = (max(e for _, e in steps.values()) - min(s for s, _ in steps.values())) / 1000.0
    per_target = {}
    for out, s in secs.items():
        entry = per_target.setdefault(target_of(out), [0.0, 0])
        entry[0] += s
        entry[1] += 1
    return secs, sum(secs.values()), wall, per_target


def compare(a, before, after):
    """The two builds side by side: job-seconds and steps per target, the totals, the change."""
    (_, t0, w0, p0), (_, t1, w1, p1) = before, after
    names = sorted(set(p0) | set(p1), key=lambda t: -max(p0.get(t, [0])[0], p1.get(t, [0])[0]))
    rows = [{"target": t, "before": round(p0.get(t, [0.0, 0])[0], 1), "before_steps": p0.get(t, [0.0, 0])[1],
             "after": round(p1.get(t, [0.0, 0])[0], 1), "after_steps": p1.get(t, [0.0, 0])[1]} for t in names]
    if a.json:
        print(json.dumps({"before": os.path.abspath(a.against), "after": os.path.abspath(a.build),
                          "job_seconds": [round(t0, 1), round(t1, 1)], "wall_seconds": [round(w0, 1), round(w1, 1)],
                          "steps": [sum(v[1] for v in p0.values()), sum(v[1] for v in p1.values())],
                          "targets": rows}))
        return 0
    print(f"before: {a.against}: {sum(v[1] for v in p0.values())} steps, {t0:.1f} job-seconds, {w0:.1f} s wall")
    print(f"after:  {a.build}: {sum(v[1] for v in p1.values())} steps, {t1:.1f} job-seconds, {w1:.1f} s wall")
    print(f"change: {t1 - t0:+.1f} job-seconds ({100 * (t1 - t0) / t0:+.1f}%)" if t0 else "")
    print(f"\n{'before':>8} {'steps':>5} {'after':>8} {'steps':>5} {'change':>8}  target")
    for r in rows:
        print(f"{r['before']:8.1f} {r['before_steps']:5d} {r['after']:8.1f} {r['after_steps']:5d} "
              f"{r['after'] - r['before']:+8.1f}  {r['target']}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build", help="the build folder (default: build)")
    ap.add_argument("--top", type=int, default=15, help="how many of the longest steps to list (default 15)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the tables")
    ap.add_argument("--against", metavar="OTHER_BUILD", help="compare with this build folder, target by target")
    a = ap.parse_args()
    if a.top < 0:
        print("build_times: --top must be >= 0", file=sys.stderr)
        return 2
    try:
        secs, total, wall, per_target = summarise(a.build)
        other = summarise(a.against) if a.against else None
    except (ValueError, OSError) as e:
        print(f"build_times: {e}", file=sys.stderr)
        return 2
    targets = sorted(per_target.items(), key=lambda kv: -kv[1][0])
    top = sorted(secs.items(), key=lambda kv: -kv[1])[:a.top]
    if other:
        return compare(a, other, (secs, total, wall, per_target))

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
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    sys.exit(main())
