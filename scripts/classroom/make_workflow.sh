#!/usr/bin/env bash
# Prints the GitHub Classroom workflow for lab N (classroom.yml.in with one step per task),
# from the tasks and points in tutorials/labs.txt.
#   scripts/classroom/make_workflow.sh N [LABS_TXT]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lab="$1" list="${2:-$here/../../tutorials/labs.txt}"
[[ $lab =~ ^[0-9]+$ ]] || { echo "make_workflow: give a lab number, not '$lab'" >&2; exit 2; }
steps="" env="" runners=""
while read -r task points; do
  k="${task#*.}" id="task-$lab-$k"
  steps+="    - name: Task $task
      id: $id
      uses: classroom-resources/autograding-command-grader@v1
      with:
        test-name: Task $task
        command: build/tutorials/lab${lab}_grader check $lab --task $k --expect full
        timeout: 10
        max-score: $points
"
  env+="        $(tr 'a-z-' 'A-Z_' <<<"$id")_RESULTS: \"\${{steps.$id.outputs.result}}\"
"
  runners+="${runners:+,}$id"
done < <(sed -nE "s/^  Task ($lab\.[0-9]+) .* ([0-9]+) points  .*/\1 \2/p" "$list")
[[ -n $runners ]] || { echo "make_workflow: lab $lab has no tasks in $list" >&2; exit 2; }
awk -v steps="$steps" -v env="$env" -v runners="$runners" -v lab="$lab" '
  { gsub("@LAB@", lab) }
  /^@STEPS@$/ { printf "%s", steps; next }
  /^@ENV@$/ { printf "%s", env; next }
  { gsub("@RUNNERS@", runners); print }' "$here/classroom.yml.in"
