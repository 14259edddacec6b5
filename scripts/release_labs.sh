#!/usr/bin/env bash
# Writes a student repository: the engine, the labs' starter code and READMEs and their graders,
# with no reference solution anywhere, as a new git repository with one commit (no history).
#   scripts/release_labs.sh OUT [--labs 1,2,...]      (also: gradsleuth lab release OUT [--labs ...])
# OUT must not exist or be empty. --labs picks the labs (default: all); the others are left out
# with their graders, and the released labs keep their numbers. Copies the files git tracks (and
# new files it does not ignore) from this checkout, as they are in the working tree. Lab N's
# GitHub Classroom workflow goes in OUT/.github/workflows/classroom.yml (scripts/classroom/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "lab release: $*" >&2; exit 2; }

out="" labs=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --labs) [[ $# -ge 2 ]] || die "--labs needs a list of lab numbers, e.g. --labs 1,2,3"; labs="$2"; shift ;;
    --labs=*) labs="${1#--labs=}" ;;
    -h|--help) sed -n '2,9p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) die "unknown option '$1' (try --help)" ;;
    *) [[ -z $out ]] || die "one output folder only (got '$out' and '$1')"; out="$1" ;;
  esac
  shift
done
[[ -n $out ]] || die "give the folder to write, e.g. scripts/release_labs.sh ../course-labs"
if [[ -L $out ]]; then
  [[ -e $out ]] || die "'$out' is a symbolic link to '$(readlink "$out")', which does not exist: remove the link or give a new folder"
  die "'$out' is a symbolic link (to '$(readlink "$out")'): give the folder itself, or a new one"
fi
parent="$(dirname "$out")"
mkdir -p "$parent" 2>/dev/null || die "cannot create the folder '$parent' that is to hold '$out'"
[[ -w $parent ]] || die "cannot write in '$parent' (checked before the release is built)"
if [[ -e $out && ( ! -d $out || -n "$(ls -A "$out")" ) ]]; then
  die "'$out' exists and is not an empty folder: give a new one (the release is a fresh repository)"
fi
command -v git >/dev/null || die "git is not installed (scripts/setup.sh installs it)"

# The lab folders in course order: GS_LABS in tutorials/CMakeLists.txt (lab N is the Nth).
mapfile -t all_labs < <(sed -n '/^set(GS_LABS/,/)/p' "$root/tutorials/CMakeLists.txt" | tr ' ()' '\n\n\n' |
                        grep -E '^lab[0-9]+_' )
[[ ${#all_labs[@]} -gt 0 ]] || die "found no lab folders in GS_LABS (tutorials/CMakeLists.txt)"
declare -A keep=()
if [[ -z $labs ]]; then
  for i in "${!all_labs[@]}"; do keep[$((i + 1))]=1; done
else
  [[ $labs =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--labs '$labs': give lab numbers separated by commas, e.g. --labs 1,2,3"
  IFS=, read -ra picked <<<"$labs"
  for n in "${picked[@]}"; do
    (( n >= 1 && n <= ${#all_labs[@]} )) || die "--labs: there is no lab $n; the labs are 1 to ${#all_labs[@]}"
    keep[$n]=1
  done
fi

# What is left out: every solution/ folder; the labs not picked, with their graders.
exclude_re='^tutorials/[^/]+/solution/'
for i in "${!all_labs[@]}"; do
  n=$((i + 1))
  [[ -n ${keep[$n]:-} ]] && continue
  exclude_re+="|^tutorials/${all_labs[$i]}/|^tutorials/grader/grade_lab${n}\\.cpp\$"
done

tmp="$(mktemp -d "${TMPDIR:-/tmp}/gs_release.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
stage="$tmp/repo"
mkdir -p "$stage"
(cd "$root" && git ls-files -co --exclude-standard -z | grep -zvE "$exclude_re" |
   while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
   tar --null -cf - -T -) | tar -xf - -C "$stage"

# The GitHub Classroom workflow: grades the first released lab (edit LAB in it for another).
first_lab=""
for i in "${!all_labs[@]}"; do
  if [[ -n ${keep[$((i + 1))]:-} ]]; then first_lab=$((i + 1)); break; fi
done
mkdir -p "$stage/.github/workflows"
"$root/scripts/classroom/make_workflow.sh" "$first_lab" "$root/tutorials/labs.txt" \
  > "$stage/.github/workflows/classroom.yml"
# The list of labs (tutorials/labs.txt) holds the released labs only.
awk -v keep=",$(IFS=,; echo "${!keep[*]}")," '
  /^lab [0-9]+: / { n = $2; sub(":", "", n); show = index(keep, "," n ",") > 0 }
  /^#/ || show' "$root/tutorials/labs.txt" > "$stage/tutorials/labs.txt"

# No solution may be left: no solution folder, no file named after one.
leak="$(cd "$stage" && find . \( -path '*/solution/*' -o -name '*_solution*' \) -print | head -5)"
[[ -z $leak ]] || die "internal error: solution files in the release: $leak"

git -C "$stage" init -q -b main
git -C "$stage" add -A
git -C "$stage" -c user.name="gradsleuth lab release" -c user.email="lab-release@localhost" \
    commit -q -m "Course labs: starter code, READMEs and graders"
mkdir -p "$(dirname "$out")"
if [[ -d $out ]]; then rmdir "$out"; fi
mv "$stage" "$out"
echo "lab release: wrote $out: labs $(for n in "${!keep[@]}"; do echo "$n"; done | sort -n | paste -sd, -)" \
     "($(git -C "$out" ls-files | wc -l) files, one commit, no solutions)"
