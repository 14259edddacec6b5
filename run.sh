#!/usr/bin/env bash
# Sets up, builds (build/, Release) and runs the main job.
#   ./run.sh              runs MAIN_JOB below
#   ./run.sh ARGS...      runs build/bin/gradsleuth ARGS... instead
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

# The default main job: arguments for build/bin/gradsleuth. The bug zoo trains
# the clean reference and all 28 catalogued bugs on Fashion-MNIST with every
# check attached and prints the detection matrix (about 30 s on 2 cores).
MAIN_JOB=(zoo --quick)

# Idle OpenMP threads sleep instead of spinning (libgomp reads this only at start-up).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

scripts/setup.sh
scripts/build.sh

bin=build/bin/gradsleuth
if [[ ! -x "$bin" ]]; then
  echo "run: $bin was not built (the CLI in cli/ is not there yet)" >&2
  [[ $# -gt 0 ]] && exit 1
  exit 0
fi

if [[ $# -gt 0 ]]; then
  exec "$bin" "$@"
fi
echo "run: $bin ${MAIN_JOB[*]}"
exec "$bin" "${MAIN_JOB[@]}"
