#!/usr/bin/env bash
# Opens an HTML report in headless Chromium (Debian package `chromium`) and fails when
# the browser logs a console error, when a plot in the rendered page is empty, or when the
# laid-out page breaks what a reader relies on (measured in the browser by a script run on a
# copy of the page; the report itself has no script):
#   - text with line breaks (a model summary, a multi-line cause) renders on several lines;
#   - no two <text> labels of a plot or heat map overlap (their bounding boxes, pairwise);
#   - the lead's plots include the series of the parameters or module the lead names;
#   - with Graphviz installed, the graph is an SVG picture, not the DOT fallback.
#   scripts/check_report_browser.sh REPORT.html [SCREENSHOT.png]
# Exit status: 0 good, 1 a problem (printed), Chromium missing included.
# Install the browser with: apt-get install chromium   (scripts/setup.sh does it)
set -euo pipefail

report="${1:?usage: check_report_browser.sh REPORT.html [SCREENSHOT.png]}"
shot="${2:-}"
browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then browser="$b"; break; fi
done
if [[ -z $browser ]]; then
  echo "check_report_browser: no Chromium on this machine: install it with scripts/setup.sh (apt-get install chromium)" >&2
  exit 1
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

# The layout checks: a copy of the page with a script that measures it and writes one line per
# problem (or "OK ...") into <pre id="gs-layout">, read back from the dumped DOM.
cat >"$tmp/layout.js" <<'JS'
(function () {
  var out = [];
  // 1. Line breaks: for each newline inside a text node with text on both sides, the character
  //    after it sits on a lower line than the one before it.
  var breaks = 0;
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (var n = walker.nextNode(); n; n = walker.nextNode()) {
    var el = n.parentElement;
    if (!el || el.closest('svg, script, style, #gs-layout') || el.tagName === 'PRE') continue;
    var t = n.data;
    for (var i = t.indexOf('\n'); i >= 0; i = t.indexOf('\n', i + 1)) {
      var a = i - 1, b = i + 1;
      while (a >= 0 && /\s/.test(t[a])) a--;
      while (b < t.length && /\s/.test(t[b])) b++;
      if (a < 0 || b >= t.length || t.lastIndexOf('\n', b - 1) !== i || t.indexOf('\n', a + 1) !== i) continue;
      var r1 = document.createRange(), r2 = document.createRange();
      r1.setStart(n, a); r1.setEnd(n, a + 1);
      r2.setStart(n, b); r2.setEnd(n, b + 1);
      var q1 = r1.getBoundingClientRect(), q2 = r2.getBoundingClientRect();
      if (q1.height === 0 || q2.height === 0) continue;  // not rendered (a closed <details>)
      breaks++;
      if (!(q2.top >= q1.bottom - 1))
        out.push('FAIL line break lost in <' + el.tagName.toLowerCase() + '>: "' +
                 t.slice(Math.max(0, a - 30), a + 1) + '" and "' + t.slice(b, b + 30) + '" are on one line');
    }
  }
  out.push('OK line breaks checked: ' + breaks);
  // 2. No overlapping labels in the plots and heat maps.
  var svgs = document.querySelectorAll('svg.plot, svg.heatmap'), labels = 0;
  for (var s = 0; s < svgs.length; s++) {
    var texts = svgs[s].querySelectorAll('text'), boxes = [];
    for (var k = 0; k < texts.length; k++) {
      if (!texts[k].textContent.trim()) continue;
      var r = texts[k].getBoundingClientRect();
      if (r.width > 0 && r.height > 0) boxes.push([r, texts[k].textContent]);
    }
    labels += boxes.length;
    var title = svgs[s].getAttribute('aria-label');
    for (var p = 0; p < boxes.length; p++)
      for (var q = p + 1; q < boxes.length; q++) {
        var A = boxes[p][0], B = boxes[q][0], e = 0.5;
        if (A.left < B.right - e && B.left < A.right - e && A.top < B.bottom - e && B.top < A.bottom - e)
          out.push('FAIL overlapping labels in "' + title + '": "' + boxes[p][1] + '" and "' + boxes[q][1] + '"');
      }
  }
  out.push('OK labels checked: ' + labels + ' in ' + svgs.length + ' figures');
  // 3. The lead's plots show what it names, first: one of its plots starts with the series of
  //    its parameter, or of its module (the layer's own series "2 (ReLU)", or a parameter inside
  //    it, "1.weight"; a module without parameters stands for the nearest earlier sibling with some,
  //    the layer that feeds it), as debug::names_series picks them.
  var lead = document.querySelector('section.lead');
  if (lead) {
    var param = lead.getAttribute('data-parameter') || '', mod = lead.getAttribute('data-module') || '';
    var path = mod.split(' (')[0];
    var names = [], firsts = [];
    lead.querySelectorAll('svg.plot').forEach(function (svg) {
      var pls = svg.querySelectorAll('polyline.series');
      for (var k = 0; k < pls.length; k++) names.push(pls[k].getAttribute('data-name'));
      if (pls.length) firsts.push(pls[0].getAttribute('data-name'));
    });
    var inside = function (nm, m) { return nm.indexOf(m + '.') === 0 && nm.length > m.length + 1; };
    var dot = path.lastIndexOf('.'), parent = dot >= 0 ? path.slice(0, dot + 1) : '', own = path.slice(parent.length);
    var feeder = -1;
    if (/^[0-9]+$/.test(own) && !names.some(function (nm) { return inside(nm, path); }))
      names.forEach(function (nm) {
        if (nm.indexOf(parent) !== 0) return;
        var m = /^([0-9]+)\./.exec(nm.slice(parent.length));
        if (m && +m[1] < +own) feeder = Math.max(feeder, +m[1]);
      });
    var named = function (nm) {
      if (param && nm === param) return true;
      if (!path || path === '(model)') return false;
      return nm.split(' (')[0] === path || inside(nm, path) || (feeder >= 0 && inside(nm, parent + feeder));
    };
    if ((param || (path && path !== '(model)')) && !firsts.some(named))
      out.push('FAIL the lead names ' + (param || mod) + ' but none of its plots starts with its series (first: ' +
               firsts.join(', ') + '; all: ' + names.join(', ') + ')');
    else
      out.push('OK lead ' + lead.getAttribute('data-check') + ' (' + (param || mod || 'names nothing') + '): ' +
               firsts.join(', ') + ' first, of ' + names.length + ' series in its plots');
  }
  var pre = document.createElement('pre');
  pre.id = 'gs-layout';
  pre.textContent = out.join('\n');
  document.body.appendChild(pre);
})();
JS
sed 's#</body>#<script src="layout.js"></script></body>#' "$report" >"$tmp/page.html"
timeout 120 "$browser" "${flags[@]}" --window-size=1280,3000 --allow-file-access-from-files --dump-dom \
  "file://$tmp/page.html" >"$tmp/layout_dom.html" 2>"$tmp/layout_console.log" || true
layout="$(sed -n '/<pre id="gs-layout">/,/<\/pre>/p' "$tmp/layout_dom.html" | sed -e 's/<[^>]*>//g' \
           -e 's/&quot;/"/g; s/&lt;/</g; s/&gt;/>/g; s/&#39;/'"'"'/g; s/&amp;/\&/g')"
[[ -n $layout ]] || layout="FAIL the layout script wrote no result (see $tmp/layout_console.log)"
echo "$layout" | sed 's/^/check_report_browser: /'
if grep -q '^FAIL' <<<"$layout"; then fail=1; fi
# Graphviz installed (scripts/setup.sh): the graph is a picture, never the DOT fallback.
if command -v dot >/dev/null 2>&1 && grep -q 'class="dot-fallback"' "$dom"; then
  echo "check_report_browser: Graphviz is installed but the report shows the DOT fallback instead of an SVG graph" >&2
  fail=1
fi
if ! grep -q "<h1>" "$dom"; then
  echo "check_report_browser: the rendered page has no heading (empty DOM?)" >&2
  fail=1
fi
# Every plot drew something: each svg.plot has a polyline with at least two points or a dot.
plots=$(grep -o '<svg class="plot"' "$dom" | wc -l || true)
empty=$(grep -c 'no finite points to draw' "$dom" || true)
lines=$(grep -oE '<polyline class="series"[^>]* points="[0-9.-]+,[0-9.-]+ [0-9.-]+,[0-9.-]+' "$dom" | wc -l || true)
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
heat=$(grep -o '<svg class="heatmap"' "$dom" | wc -l || true)
echo "check_report_browser: $report: $plots plots ($lines lines drawn), $heat heat maps, $(grep -c 'CONSOLE' "$tmp/console.log" || true) console messages"
exit "$fail"
