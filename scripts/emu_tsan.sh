#!/usr/bin/env bash
# Builds the CUDA emulator's race demo with ThreadSanitizer in build-emu-tsan/ and checks that TSan
# reports the kernel with a missing __syncthreads and stays quiet for the fixed kernel.
#   scripts/emu_tsan.sh        (not part of ./test.sh: a TSan build takes a few minutes)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=build-emu-tsan
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRADSLEUTH_OPENMP=OFF \
  -DGRADSLEUTH_BUILD_LABS=OFF -DGRADSLEUTH_BUILD_BENCH=OFF -DGRADSLEUTH_BUILD_CLI=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
cmake --build "$dir" -j2 --target emu_race_demo
exe="$dir/tests/emu_race_demo"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0 exitcode=66}"

run() {  # run MODE: prints the program's output; TSan on some kernels needs ASLR off (setarch -R)
  local out
  out=$("$exe" "$1" 2>&1) || true
  if grep -q "unexpected memory mapping" <<<"$out"; then
    out=$(setarch "$(uname -m)" -R "$exe" "$1" 2>&1) || true
  fi
  printf '%s\n' "$out"
}

status=0
fixed=$(run fixed)
if grep -q "WARNING: ThreadSanitizer" <<<"$fixed"; then
  printf '%s\n' "$fixed"
  echo "emu_tsan: FAIL: ThreadSanitizer reported the fixed kernel" >&2
  status=1
else
  echo "emu_tsan: fixed kernel: no report ($(grep 'block sums' <<<"$fixed"))"
fi
racy=$(run racy)
if grep -q "WARNING: ThreadSanitizer: data race" <<<"$racy"; then
  echo "emu_tsan: racy kernel: ThreadSanitizer reported the race, as expected:"
  grep -m4 -E "WARNING: ThreadSanitizer|#0 .*block_sum|Previous" <<<"$racy" | sed 's/^/  /'
else
  printf '%s\n' "$racy"
  echo "emu_tsan: FAIL: no ThreadSanitizer report for the kernel without its __syncthreads" >&2
  status=1
fi
exit "$status"
