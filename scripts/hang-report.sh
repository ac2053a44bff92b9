#!/usr/bin/env bash
# Watches a ctest run for a test that takes far longer than it should and prints, once per
# process, what it and its descendants are waiting in: each thread's wchan and kernel stack, the
# process's open files, and a gdb backtrace of every thread when gdb is there. A hang that
# ctest's timeout ends leaves no trace of its cause; this leaves one in the CI log.
# Usage: scripts/hang-report.sh CTEST_PID SECONDS   (runs until CTEST_PID exits)
set -uo pipefail
ctest_pid=$1 limit=$2
declare -A reported=([$$]=1)
parent=$(ps -o ppid= -p "$ctest_pid" | tr -d ' ')
pipes_of() { ls -l /proc/"$1"/fd 2>/dev/null | grep -o 'pipe:\[[0-9]*\]' | sort -u; }
# ctest's ancestors (and this script) share the pipes it inherited: never them.
a=$ctest_pid
while a=$(ps -o ppid= -p "$a" 2>/dev/null | tr -d ' ') && [[ -n $a && $a -gt 1 ]]; do
  reported[$a]=1
done

descendants() {  # the pid, then every descendant of it
  echo "$1"
  local c
  for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do descendants "$c"; done
}

report() {
  local root=$1 p t
  echo "hang-report: $(readlink /proc/"$root"/exe) (pid $root) has run $(ps -o etimes= -p "$root") s"
  for p in $(descendants "$root"); do
    [[ -d /proc/$p ]] || continue
    echo "--- pid $p ($(ps -o stat=,cmd= -p "$p" | cut -c1-160))"
    for t in /proc/"$p"/task/*; do
      echo "  thread ${t##*/} $(cat "$t"/comm 2>/dev/null) state $(awk '{print $3}' "$t"/stat 2>/dev/null) wchan $(cat "$t"/wchan 2>/dev/null)"
      sed 's/^/    /' "$t"/stack 2>/dev/null | head -20
    done
    ls -l /proc/"$p"/fd 2>/dev/null | awk 'NR > 1 {print "  fd " $9 " -> " $11}' | head -40
    if command -v gdb > /dev/null; then
      timeout 60 gdb -p "$p" -batch -nx -ex 'thread apply all bt 25' 2>/dev/null |
        grep -E '^(Thread|#)' | sed 's/^/  /' | head -200
    fi
  done
}

# Every process that writes into one of ctest's pipes (a test, or anything it left running that
# still holds its output, which keeps ctest waiting as long as the test itself would). One ps per
# scan; only processes past the limit have their fds read.
while kill -0 "$ctest_pid" 2>/dev/null; do
  sleep 15
  # The pipes ctest made (to its tests), not those it inherited (its output may be a pipe that
  # test.sh, this script and other jobs share).
  pipes=$(comm -23 <(pipes_of "$ctest_pid") <(pipes_of "$parent"))
  [[ -n $pipes ]] || continue
  while read -r p age; do
    [[ $p == "$ctest_pid" || -n ${reported[$p]:-} || $age -lt $limit ]] && continue
    pipes_of "$p" | grep -qFxf <(echo "$pipes") || continue
    for c in $(descendants "$p"); do reported[$c]=1; done
    report "$p"
  done < <(ps -e -o pid=,etimes=)
done
