#!/usr/bin/env bash
# Writes the screenshots of docs/explore.md: the explorer's pages (gradsleuth explore) opened in
# headless Chromium, each in the state a URL fragment sets (#view=..., the page's test hook).
#   scripts/explore_screenshots.sh GRADSLEUTH_BINARY OUT_DIR     (docs: OUT_DIR = docs/images)
# Exit status: 0 when every PNG was written and is a PNG, 1 otherwise.
set -euo pipefail
cli="${1:?usage: explore_screenshots.sh GRADSLEUTH_BINARY OUT_DIR}"
out="${2:?usage: explore_screenshots.sh GRADSLEUTH_BINARY OUT_DIR}"
browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then browser="$b"; break; fi
done
[[ -n $browser ]] || { echo "explore_screenshots: no Chromium (scripts/setup.sh installs it)" >&2; exit 1; }
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$cli" explore --example twice --out "$tmp/twice.html" 2>/dev/null
"$cli" explore --example shape-error --out "$tmp/shape.html" 2>/dev/null
"$cli" explore --model mlp --bug B18 --steps 150 --quiet --out "$tmp/mlp.html" 2>/dev/null
flags=(--headless --disable-gpu --disable-dev-shm-usage --no-first-run --hide-scrollbars --user-data-dir="$tmp/profile"
       --virtual-time-budget=3000 --window-size=1280,760)
[[ $(id -u) -eq 0 ]] && flags+=(--no-sandbox)
shot() {  # shot NAME PAGE FRAGMENT
  timeout 120 "$browser" "${flags[@]}" --screenshot="$out/$1.png" "file://$tmp/$2#view=$3" >/dev/null 2>&1 || true
  if [[ ! -s $out/$1.png ]] || [[ "$(head -c 4 "$out/$1.png" | tail -c 3)" != PNG ]]; then
    echo "explore_screenshots: $1.png was not written" >&2
    return 1
  fi
  echo "explore_screenshots: $out/$1.png"
}
fail=0
shot explore_twice twice.html "theme:light;backward:a" || fail=1
shot explore_graph mlp.html "theme:light;mode:forward;finding:0" || fail=1
shot explore_backward mlp.html "theme:light;expand:4;backward:1.weight" || fail=1
shot explore_replay mlp.html "theme:dark;replay:50:1.weight" || fail=1
shot explore_failure shape.html "theme:light;failure" || fail=1
exit "$fail"
