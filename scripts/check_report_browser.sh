#!/usr/bin/env bash
# Opens an HTML report in headless Chromium (Debian package `chromium`) and fails when
# the browser logs a console error, or when a plot in the rendered page is empty.
#   scripts/check_report_browser.sh REPORT.html [SCREENSHOT.png]
# Exit status: 0 good, 1 a problem (printed), 77 Chromium is not installed (CTest: skipped).
# Install the browser with: apt-get install chromium   (scripts/setup.sh --browser does it)
set -euo pipefail

report="${1:?usage: check_report_browser.sh REPORT.html [SCREENSHOT.png]}"
shot="${2:-}"
browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then browser="$b"; break; fi
done
if [[ -z $browser ]]; then
  echo "check_report_browser: no Chromium on this machine (apt-get install chromium); skipped" >&2
  exit 77
fi
[[ -f $report ]] || { echo "check_report_browser: no such file: $report" >&2; exit 1; }
abs="$(cd "$(dirname "$report")" && pwd)/$(basename "$report")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --user-data-dir="$tmp/profile"
       --enable-logging=stderr --v=0 --virtual-time-budget=2000)
# The DOM after parsing and layout: what the browser made of the page.
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$abs" >"$tmp/dom.html" 2>"$tmp/console.log" || {
  echo "check_report_browser: $browser failed on $report:" >&2
  tail -20 "$tmp/console.log" >&2
  exit 1
}
if [[ -n $shot ]]; then
  timeout 120 "$browser" "${flags[@]}" --window-size=1280,3000 --screenshot="$shot" "file://$abs" >/dev/null 2>&1 || true
fi

fail=0
# Console errors (a script error, a resource that failed to load, an SVG the parser rejected).
if grep -E "CONSOLE\(|Uncaught|Failed to load|ERROR:.*(svg|xml|html)" "$tmp/console.log" >"$tmp/errors.txt"; then
  echo "check_report_browser: console errors:" >&2
  cat "$tmp/errors.txt" >&2
  fail=1
fi
dom="$tmp/dom.html"
if ! grep -q "<h1>" "$dom"; then
  echo "check_report_browser: the rendered page has no heading (empty DOM?)" >&2
  fail=1
fi
# Every plot drew something: each svg.plot has a polyline with at least two points or a dot.
plots=$(grep -o '<svg class="plot"' "$dom" | wc -l)
empty=$(grep -c 'no finite points to draw' "$dom" || true)
lines=$(grep -oE '<polyline class="series"[^>]* points="[0-9.-]+,[0-9.-]+ [0-9.-]+,[0-9.-]+' "$dom" | wc -l)
if [[ $plots -eq 0 ]]; then
  echo "check_report_browser: no plots in the page" >&2
  fail=1
fi
if [[ $empty -gt 0 ]]; then
  echo "check_report_browser: $empty of $plots plots are empty ('no finite points to draw')" >&2
  fail=1
fi
if [[ $lines -eq 0 ]]; then
  echo "check_report_browser: no plot has a line of two or more points" >&2
  fail=1
fi
heat=$(grep -o '<svg class="heatmap"' "$dom" | wc -l)
echo "check_report_browser: $report: $plots plots ($lines lines drawn), $heat heat maps, $(grep -c 'CONSOLE' "$tmp/console.log" || true) console messages"
exit "$fail"
