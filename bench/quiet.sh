# shellcheck shell=bash
# quiet.sh: every benchmark refuses a busy machine and says in its table what the load was.
# Sourced by lib.sh and by the benchmarks that do not use lib.sh.
# require_quiet NAME: refuses (exit 2) to start above a load average of 0.5 unless FORCE=1;
# sets LOAD_AT_START, and FORCED to the line every table then prints (empty when quiet).
require_quiet() {
  LOAD_AT_START=$(cut -d' ' -f1 /proc/loadavg)
  FORCED=""
  if "${PY:-python3}" -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0.5 else 1)' "$LOAD_AT_START"; then
    if [[ ${FORCE:-0} != 1 ]]; then
      echo "$1: load average $LOAD_AT_START is above 0.5: the machine is not quiet, so the" \
        "numbers would measure the other work too. Wait, or FORCE=1 to run anyway." >&2
      exit 2
    fi
    FORCED="FORCED at load average $LOAD_AT_START (above 0.5): these numbers include other work"
  fi
}

# load_line: the line a table prints under its heading: the load average at start, and whether
# the run was forced past a busy machine.
load_line() {
  echo "load average at start: $LOAD_AT_START ($([[ -z $FORCED ]] && echo "quiet, not forced" || echo "FORCED: these numbers include other work"))"
}
