#!/usr/bin/env bash
# The lab_grade_all_hostile test: a class of lab 1 submissions that attack `gradsleuth lab grade-all`
# (one attack each, in Task 1.2) graded with the sandbox scripts/setup.sh installs (bubblewrap). Each
# gets the status of its kind, the batch finishes with a row for everyone, and nothing outside the
# submissions changed (a checksum of a decoy tree, modes included), no process outlives the batch, no
# connection reaches the host, a full disk or a closed stdout stays the submission's own, and no
# feedback shows the instructor's seed, another student's code or /etc/shadow. Then two of them
# again in a folder only its owner may enter (as root: a pids cgroup instead of a uid per job).
# With `fallback`, the attacks the fallback (Landlock, seccomp, the write guard) is to stop, graded
# with --sandbox fallback: forging, killing, truncate and chmod outside, a daemon, a fork bomb.
#   hostile_class.sh GRADSLEUTH SOURCE_ROOT [fallback]   (KEEP=1 keeps its temporary folder, to look at)
set -euo pipefail
cli="$1" src="$2" mode="${3:-bwrap}"
starter="$src/tutorials/lab1_tensors/lab1.cpp" solution="$src/tutorials/lab1_tensors/solution/lab1.cpp"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/gs_hostile.XXXXXX")"
listener=""
cleanup() {
  [[ -n $listener ]] && kill "$listener" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
[[ -n ${KEEP:-} ]] && trap - EXIT
chmod 755 "$tmp"
class="$tmp/class" decoy="$tmp/decoy" instructor="$tmp/instructor"
mkdir -p "$class" "$decoy/sub" "$instructor" "$tmp/out"
echo "the instructor's notes" > "$decoy/a.txt"
echo "more notes" > "$decoy/b.txt"
echo "deeper notes" > "$decoy/sub/c.txt"
seed=918273645
echo "$seed" > "$instructor/grader_seed"
marker="OTHER_STUDENT_MARKER_7f3a9c"
sum_tree() { (cd "$1" && find . -printf '%p %m %s %T@\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum); }

# A host listener: a connection from a submission would be recorded in $tmp/connections.
port=$((20000 + RANDOM % 20000))
python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
while True:
    c, a = s.accept(); open(sys.argv[2], "a").write("connection from %s\n" % (a,)); c.close()
' "$port" "$tmp/connections" &
listener=$!

task1='  Strides s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;'
headers='#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <string>'
# The starter with Task 1.1 written and Task 1.2's body replaced by $1 (which ends by failing the task).
# (Through the environment: awk -v would turn the \n of C strings into newlines.)
hostile() {
  T1="$task1" T2="$1" H="$headers" awk '
    /#include "core\/ops.h"/ { print; print ENVIRON["H"]; next }
    /not implemented: lab 1 task 1 / { print ENVIRON["T1"]; next }
    /not implemented: lab 1 task 2 / { print ENVIRON["T2"]; print "  throw Error(\"lab 1\", \"done attacking\");"; next }
    { print }' "$starter"
}
student() { mkdir -p "$class/$1"; cat > "$class/$1/lab1.cpp"; }

cp "$solution" "$class/a_correct.lab1.tmp"
{ echo "// $marker"; cat "$class/a_correct.lab1.tmp"; } | student a_correct
rm "$class/a_correct.lab1.tmp"
hostile '  std::fprintf(stderr, "@task-done 1.1 1000 10 passed\n@task-done 1.9 500 10 passed\n");
  std::printf("@task-done 1.1 1000 10 passed\n@end 1500 100\nlab 1: 1500/100 points\n");
  std::fflush(stdout);' | student forge_print
hostile '  for (int fd = 3; fd < 1024; ++fd) {
    const char* line = "@task-done 1.1 1000 10 passed\n";
    (void)!write(fd, line, std::strlen(line));
  }' | student forge_channel
hostile '  kill(getppid(), SIGKILL);
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      std::string cmd, path = std::string("/proc/") + e->d_name + "/cmdline";
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        for (int c; (c = std::fgetc(f)) != EOF;) cmd += c ? char(c) : char(32);
        std::fclose(f);
      }
      if (cmd.find("grade-all") != std::string::npos) kill(std::atoi(e->d_name), SIGKILL);
    }
    closedir(d);
  }' | student kill_grader
hostile "  truncate(\"$decoy/a.txt\", 0);
  syscall(SYS_truncate, \"$decoy/sub/c.txt\", 0);" | student truncate_out
hostile "  chmod(\"$decoy/b.txt\", 0);
  syscall(SYS_chmod, \"$decoy/sub\", 0);" | student chmod_out
hostile '  if (fork() == 0) {
    setsid();
    if (fork() == 0) {
      execl("/bin/sleep", "sleep", "4242.5", (char*)nullptr);
      _exit(0);
    }
    _exit(0);
  }
  if (fork() == 0) execl("/bin/sleep", "sleep", "4242.5", (char*)nullptr);
  usleep(200000);' | student setsid_daemon
# Its sleeps carry this run's own number, so that a run beside this one (the fallback's) is not
# taken for a daemon of this one.
sleep_mark="4242.$$"
sed -i "s/4242\.5/$sleep_mark/g" "$class/setsid_daemon/lab1.cpp"
hostile '  int forked = 0;
  for (int i = 0; i < 400; ++i) {
    const pid_t p = fork();
    if (p == 0) {
      pause();
      _exit(0);
    }
    if (p < 0) break;
    ++forked;
  }
  std::fprintf(stderr, "forked %d\n", forked);
  for (;;) pause();' | student fork_bomb
hostile "  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons($port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int rc = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  std::fprintf(stderr, \"connect: %d\\n\", rc);" | student network
hostile "  for (const char* p : {\"$instructor/grader_seed\", \"$class/a_correct/lab1.cpp\", \"/proc/self/cmdline\", \"../../../gradebook.csv\", \"/etc/shadow\"}) {
    if (FILE* f = std::fopen(p, \"r\")) {
      std::string text;
      for (int c; (c = std::fgetc(f)) != EOF;) text += c ? char(c) : char(32);
      std::fclose(f);
      std::fprintf(stderr, \"read %s: %s\\n\", p, text.c_str());
    }
  }
  std::fprintf(stderr, \"seed: %s\\n\", getenv(\"GS_GRADER_SEED\") ? getenv(\"GS_GRADER_SEED\") : \"none\");" | student read_secrets
hostile '  close(1);
  close(2);' | student closes_stdout
hostile '  signal(SIGXFSZ, SIG_IGN);
  static char block[1 << 20];
  for (int k = 0; k < 8; ++k) {
    const std::string name = "fill" + std::to_string(k) + ".bin";
    const int fd = open(name.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    while (fd >= 0 && write(fd, block, sizeof block) == static_cast<ssize_t>(sizeof block)) {
    }
    if (fd >= 0) close(fd);
  }' | student fills_disk
mkdir -p "$class/symlink_solution" "$class/hardlink_solution"
ln -s "$solution" "$class/symlink_solution/lab1.cpp"
cp "$solution" "$instructor/lab1_copy.cpp"
ln "$instructor/lab1_copy.cpp" "$class/hardlink_solution/lab1.cpp"
ln -s symlink_loop "$class/symlink_loop"
mkdir -p "$class/fifo_file"
mkfifo "$class/fifo_file/lab1.cpp"

if [[ $mode == fallback ]]; then
  for d in "$class"/*; do
    case "$(basename "$d")" in
      a_correct | forge_channel | kill_grader | truncate_out | chmod_out | setsid_daemon | fork_bomb) ;;
      *) rm -rf "$d" ;;
    esac
  done
fi
students=$(find "$class" -mindepth 1 -maxdepth 1 | wc -l)
before_decoy="$(sum_tree "$decoy")" before_class="$(sum_tree "$class")" before_instructor="$(sum_tree "$instructor")"
set +e
"$cli" lab grade-all 1 "$class" --out "$tmp/out/gradebook.csv" -j 2 --timeout 6 --memory 2048 --sandbox "$mode" \
  --seed "$seed" > "$tmp/grade_all.log" 2>&1 <&-
rc=$?
set -e
cat "$tmp/grade_all.log"
fail=0
check() { if ! grep -qE "$2" <<<"$1"; then echo "FAIL: expected /$2/ in: $1"; fail=1; fi; }
[[ $rc == 0 ]] || { echo "FAIL: grade-all exited with status $rc"; fail=1; }
book="$tmp/out/gradebook.csv"
[[ -s $book ]] || { echo "FAIL: no gradebook"; exit 1; }
cat "$book"
row() { grep "^$1," "$book" || echo "(no row for $1)"; }
# Checks a student's row, when that student is in this run's class.
check_row() { [[ -e $class/$1 || -L $class/$1 ]] || return 0; check "$(row "$1")" "$2"; }
head -1 "$book" | grep -q '^student,Task 1.1,Task 1.2,Task 1.3,Task 1.4,Task 1.5,Task 1.6,Task 1.7,total,status$' ||
  { echo "FAIL: the gradebook's columns are not lab 1's tasks: $(head -1 "$book")"; fail=1; }
check_row a_correct ',100,graded$'
# Task 1.1 done (10 points), Task 1.2 attacks (the cases that expect an error pass), the rest not done.
part() { echo "^$1,10,[0-9]+,0,0,0,0,0,1[0-9],${2:-}"; }
check_row forge_print "$(part forge_print 'graded$')"
check_row forge_channel '^forge_channel,,,,,,,,,"?needs review: a line on the results channel without the grader.s token'
check_row kill_grader "$(part kill_grader 'graded$')"
check_row truncate_out "$(part truncate_out)"'"?tried to write outside its folder \('"$decoy"'/a.txt, refused\)'
check_row chmod_out "$(part chmod_out)"'"?tried to write outside its folder \('"$decoy"'/b.txt, refused\)'
check_row setsid_daemon "$(part setsid_daemon 'graded$')"
check_row fork_bomb '^fork_bomb,10,0,0,0,0,0,0,10,timed out in Task 1\.2 after 6 s$'
check_row network "$(part network 'graded$')"
check_row read_secrets "$(part read_secrets 'graded$')"
check_row closes_stdout "$(part closes_stdout 'graded$')"
check_row fills_disk "$(part fills_disk 'graded$')"
check_row symlink_solution ',0,"?refused: lab1.cpp is a symbolic link \(to .*solution/lab1.cpp\); hand in the file itself'
check_row hardlink_solution ',0,"?refused: lab1.cpp has 2 hard links'
check_row symlink_loop ',0,"?refused: the folder cannot be opened \(Too many levels of symbolic links; a symbolic link loop\)'
check_row fifo_file ',0,"?refused: lab1.cpp is a named pipe, not a source file'
rows=$(($(wc -l < "$book") - 1))
[[ $rows == "$students" ]] || { echo "FAIL: $rows rows in the gradebook for $students students"; fail=1; }
forked="$(grep -ho 'forked [0-9]*' "$tmp/out/gradebook.csv.feedback/fork_bomb.txt" || echo 'forked ?')"
[[ $forked =~ ^forked\ ([0-9]+)$ && ${BASH_REMATCH[1]} -lt 80 ]] || { echo "FAIL: the fork bomb: '$forked' (limit 64)"; fail=1; }
if pgrep -f "sleep $sleep_mark" >/dev/null; then
  echo "FAIL: a daemon outlived grade-all"
  for p in $(pgrep -f "sleep $sleep_mark"); do kill "$p"; done
  fail=1
fi
[[ "$(sum_tree "$decoy")" == "$before_decoy" ]] || { echo "FAIL: the decoy tree changed"; ls -laR "$decoy"; fail=1; }
[[ "$(sum_tree "$class")" == "$before_class" ]] || { echo "FAIL: the submissions changed"; fail=1; }
[[ "$(sum_tree "$instructor")" == "$before_instructor" ]] || { echo "FAIL: the instructor's folder changed"; fail=1; }
if [[ $mode == fallback ]]; then
  grep -q "sandbox: fallback" "$tmp/grade_all.log" || { echo "FAIL: the output does not say which protection ran"; fail=1; }
  [[ $fail == 0 ]] && echo "lab_grade_all_hostile_fallback: $students submissions, every status as expected, nothing outside changed"
  exit $fail
fi
grep -q "connect: -1" "$tmp/out/gradebook.csv.feedback/network.txt" || { echo "FAIL: network: connect did not fail"; fail=1; }
[[ ! -s $tmp/connections ]] || { echo "FAIL: a submission reached the host: $(cat "$tmp/connections")"; fail=1; }
if grep -rq "$seed" "$tmp/out"/gradebook.csv.feedback "$book"; then echo "FAIL: the seed is in the feedback"; fail=1; fi
if grep -q "$marker" "$tmp/out/gradebook.csv.feedback/read_secrets.txt"; then echo "FAIL: read another student's file"; fail=1; fi
grep -q "sandbox: bubblewrap" "$tmp/grade_all.log" || { echo "FAIL: the output does not say which sandbox ran"; fail=1; }
grep -q "^read /etc/shadow: root:" "$tmp/out/gradebook.csv.feedback/read_secrets.txt" && { echo "FAIL: read /etc/shadow"; fail=1; }

# Again in a folder only its owner may enter: run as root, grade-all cannot give each job a uid of
# its own there, so a pids cgroup holds the fork bomb and what others may not read stays hidden.
private="$tmp/private"
mkdir -p "$private/class" "$private/out"
chmod 700 "$private"
cp -r "$class/read_secrets" "$class/fork_bomb" "$private/class/"
"$cli" lab grade-all 1 "$private/class" --out "$private/out/gradebook.csv" -j 2 --timeout 6 --sandbox bwrap \
  --seed "$seed" > "$private/grade_all.log" 2>&1 || { echo "FAIL: grade-all in a private folder: status $?"; fail=1; }
grep "sandbox:" "$private/grade_all.log"
check "$(grep '^read_secrets,' "$private/out/gradebook.csv")" "$(part read_secrets 'graded$')"
check "$(grep '^fork_bomb,' "$private/out/gradebook.csv")" '^fork_bomb,10,0,0,0,0,0,0,10,timed out in Task 1\.2 after 6 s$'
forked="$(grep -ho 'forked [0-9]*' "$private/out/gradebook.csv.feedback/fork_bomb.txt" || echo 'forked ?')"
[[ $forked =~ ^forked\ ([0-9]+)$ && ${BASH_REMATCH[1]} -lt 80 ]] || { echo "FAIL: the fork bomb (private folder): '$forked'"; fail=1; }
grep -q "^read /etc/shadow: root:" "$private/out/gradebook.csv.feedback/read_secrets.txt" &&
  { echo "FAIL: read /etc/shadow (private folder)"; fail=1; }
grep -rq "$seed" "$private/out/gradebook.csv.feedback" "$private/out/gradebook.csv" &&
  { echo "FAIL: the seed is in the feedback (private folder)"; fail=1; }
[[ "$(sum_tree "$decoy")" == "$before_decoy" ]] || { echo "FAIL: the decoy tree changed"; fail=1; }
[[ $fail == 0 ]] && echo "lab_grade_all_hostile: 16 submissions, every status as expected, nothing outside changed"
exit $fail
