# shellcheck shell=bash
# lib.sh: helpers shared by the mount benchmarks (mount_bench.sh, load_bench.sh); source it.
# Times come from `date +%s.%N`; arithmetic and medians from python3. The registry helpers keep
# their state in REG (host:port) and REG_PID, nginx's in NG_PID; the caller's cleanup must call
# stop_registry and stop_nginx (and netns_destroy for a namespace it made, netns.sh).

# python3 resolved once to the interpreter itself: a version manager's shim (pyenv) costs a shell
# and several processes on every call, seconds each on a loaded machine.
PY=$(python3 -c 'import sys; print(sys.executable)')
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f\n", b - a}'; }
median() { "$PY" -c "import sys,statistics; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }
# ratio BASELINE_S MODELFS_S: baseline time / modelfs time (above 1.0: modelfs is faster).
ratio() { "$PY" -c "import sys; b,m=map(float,sys.argv[1:]); print(f'{b/m:.2f}x' if m>0 else 'n/a')" "$1" "$2"; }
mbps() {  # mbps BYTES SECONDS: decimal MB/s; n/a when either is not a number or the time is 0
  "$PY" -c "import sys
try:
    n,t=map(float,sys.argv[1:])
except ValueError:
    n,t=0,0
print(f'{n/t/1e6:.0f}' if t>0 else 'n/a')" "$1" "$2"
}
human() {  # human BYTES: 1.5 GiB, 12.0 MiB, ...; anything not a number (n/a) as it is
  "$PY" -c "import sys
try:
    n=float(sys.argv[1])
except ValueError:
    print(sys.argv[1]); sys.exit(0)
u=['B','KiB','MiB','GiB','TiB']; i=0
while n>=1024 and i<len(u)-1: n/=1024; i+=1
print(f'{n:.0f} {u[i]}' if i==0 else f'{n:.1f} {u[i]}')" "$1"
}

DROP_OK=1
# SETTLE_MIB: memory drop_caches touches and frees after dropping (0: none). On a VM whose host
# takes back guest memory that stays free for a few seconds (virtio-balloon free page
# reporting), a page touched for the first time costs several times a reused one, so a
# measure's time depends on how much memory the one before it left cached. Touching the same
# amount before every measure starts each one from the same state, closer to a machine whose
# memory stays backed. set_settle picks a default from the model size.
SETTLE_GIVEN=${SETTLE_MIB+1}
SETTLE_MIB=${SETTLE_MIB:-0}
drop_caches() {
  sync
  echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || DROP_OK=0
  if [[ $SETTLE_MIB -gt 0 ]]; then
    dd if=/dev/zero of=/dev/null bs="${SETTLE_MIB}M" count=1 iflag=fullblock status=none
  fi
}
# balloon_reporting: "yes" when this machine's virtio balloon reports free pages to its host.
balloon_reporting() {
  local f
  for f in /sys/bus/virtio/drivers/virtio_balloon/virtio*/features; do
    # feature bit 5: VIRTIO_BALLOON_F_FREE_PAGE_REPORTING (the string is bit 0 first)
    [[ -f $f && $(cut -c6 "$f") == 1 ]] && { echo yes; return; }
  done
  echo no
}
# set_settle MODEL_MIB: unless SETTLE_MIB was given, 3x the model plus 1 GiB where the balloon
# reports free pages (0 elsewhere), capped at what is available less 3 GiB.
set_settle() {
  [[ -n "$SETTLE_GIVEN" ]] && return
  local avail want
  [[ $(balloon_reporting) == yes ]] || { SETTLE_MIB=0; return; }
  avail=$(( $(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) / 1024 - 3072 ))
  want=$(( 3 * $1 + 1024 ))
  SETTLE_MIB=$(( want < avail ? want : avail ))
  [[ $SETTLE_MIB -gt 0 ]] || SETTLE_MIB=0
}

require_tools() {  # require_tools TOOL...: fails naming every missing one
  local missing=()
  for t in "$@"; do command -v "$t" > /dev/null || missing+=("$t"); done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "missing tools: ${missing[*]}" >&2
    exit 2
  fi
}
require_exec() {  # require_exec FILE HINT
  [[ -x "$1" ]] || { echo "missing $1 ($2)" >&2; exit 2; }
}

free_port() { "$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }

# shellcheck source=bench/netns.sh
source "$(dirname "${BASH_SOURCE[0]}")/netns.sh"

# start_registry DIR [--listen HOST:PORT] [--storage DIR] [--redirect BASEURL] [--netns NAME]
#                    [--accesslog]
# A docker-registry (Distribution 2.8) with its config and log under DIR; sets REG (host:port),
# REG_PID and REG_LOG. Defaults: a free loopback port, storage in DIR/storage, blobs served by
# the registry itself, access log off.
#   --redirect: blob GETs and HEADs answer 307 to BASEURL plus the blob's path in the storage, as
#     a registry on object storage does. Distribution 2.8's redirect middleware keeps only
#     BASEURL's scheme and host and appends /docker/registry/v2/blobs/sha256/<2>/<hex>/data.
#   --netns: the registry runs inside that namespace (netns.sh).
#   --accesslog: one combined-format line per request (status, bytes) on its stdout, in REG_LOG.
start_registry() {
  local dir=$1 listen="" storage="" redirect="" ns="" disabled=true
  shift
  while [[ $# -gt 0 ]]; do
    case $1 in
      --listen) listen=$2; shift 2 ;;
      --storage) storage=$2; shift 2 ;;
      --redirect) redirect=$2; shift 2 ;;
      --netns) ns=$2; shift 2 ;;
      --accesslog) disabled=false; shift ;;
      *) echo "start_registry: unknown option $1" >&2; exit 2 ;;
    esac
  done
  REG=${listen:-127.0.0.1:$(free_port)}
  mkdir -p "$dir"
  cat > "$dir/config.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: $disabled
storage:
  filesystem:
    rootdirectory: ${storage:-$dir/storage}
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $REG
EOF
  if [[ -n $redirect ]]; then
    cat >> "$dir/config.yml" <<EOF
middleware:
  storage:
    - name: redirect
      options:
        baseurl: $redirect
EOF
  fi
  REG_LOG=$dir/log
  if [[ -n $ns ]]; then
    netns_spawn "$ns" docker-registry serve "$dir/config.yml" > "$REG_LOG" 2>&1
    REG_PID=$NETNS_PID
  else
    docker-registry serve "$dir/config.yml" > "$REG_LOG" 2>&1 &
    REG_PID=$!
  fi
  for _ in $(seq 200); do
    curl -fs "http://$REG/v2/" > /dev/null && return 0
    sleep 0.05
  done
  echo "docker-registry did not start:" >&2
  cat "$REG_LOG" >&2
  exit 1
}
stop_registry() {
  stop_pid "${REG_PID:-}"
  REG_PID=""
}
# stop_pid PID: TERM, then wait until it is gone (KILL after 10 s).
stop_pid() {
  [[ -n ${1:-} ]] || return 0
  kill "$1" 2> /dev/null || return 0
  for _ in $(seq 200); do
    kill -0 "$1" 2> /dev/null || break
    sleep 0.05
  done
  kill -9 "$1" 2> /dev/null || true
  wait "$1" 2> /dev/null || true
}

# start_nginx DIR ROOT HOST:PORT [NETNS]: nginx (nginx-light) serving the files under ROOT with
# sendfile and Range, as an object store behind a registry's redirect does. Not a daemon: its
# config, pid file, temp dirs and logs are under DIR; it runs inside NETNS if given. Sets NG_PID
# (the master; its one worker is its child) and NG_LOG (the access log, combined format: status
# and bytes). Workers run as root, since DIR and ROOT may be private to root (mktemp -d).
start_nginx() {
  local dir=$1 root=$2 listen=$3 ns=${4:-} rc
  mkdir -p "$dir/tmp"
  NG_LOG=$dir/access.log
  cat > "$dir/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 1;
user root;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 1024; }
http {
  access_log $NG_LOG combined;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  default_type application/octet-stream;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  server {
    listen $listen;
    root $root;
    location / { }
  }
}
EOF
  if [[ -n $ns ]]; then
    netns_spawn "$ns" nginx -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" > "$dir/out" 2>&1
    NG_PID=$NETNS_PID
  else
    nginx -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" > "$dir/out" 2>&1 &
    NG_PID=$!
  fi
  for _ in $(seq 200); do
    rc=0
    curl -fs -o /dev/null "http://$listen/" 2> /dev/null || rc=$?
    [[ $rc == 0 || $rc == 22 ]] && return 0  # 22: an HTTP error (403 for /), so it answers
    sleep 0.05
  done
  echo "nginx did not start:" >&2
  cat "$dir/out" "$dir/error.log" >&2
  exit 1
}
stop_nginx() {
  stop_pid "${NG_PID:-}"
  NG_PID=""
}

# tree_cpu_seconds PID: CPU seconds (user + system) that PID and its live children (nginx's
# worker) have used so far.
tree_cpu_seconds() {
  local p ticks=0 c
  # shellcheck disable=SC2046  # one pid per word
  for p in "$1" $(cat /proc/"$1"/task/*/children 2> /dev/null); do
    c=$(sed 's/.*) //' "/proc/$p/stat" 2> /dev/null | awk '{print $12 + $13}') || continue
    ticks=$((ticks + ${c:-0}))
  done
  awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f\n", t / hz}'
}

# log_size FILE: its size in bytes now (0 if missing), to count the lines written after it.
log_size() { stat -c %s "$1" 2> /dev/null || echo 0; }
# log_statuses FILE OFFSET: the HTTP statuses of the combined-format access log lines (nginx's
# and the registry's) written after OFFSET, as "STATUS=COUNT ..." in order of status.
log_statuses() {
  "$PY" - "$1" "$2" <<'PY'
import collections, re, sys
with open(sys.argv[1], 'rb') as f:
    f.seek(int(sys.argv[2]))
    text = f.read().decode('utf-8', 'replace')
n = collections.Counter(m.group(1) for m in re.finditer(r'"[A-Z]+ \S+ HTTP/[0-9.]+" (\d{3}) ', text))
print(' '.join(f'{k}={n[k]}' for k in sorted(n)) or 'none')
PY
}

# sratio BASELINE_S MODELFS_S: ratio, or n/a when either is n/a.
sratio() { if [[ $1 == n/a || $2 == n/a ]]; then echo n/a; else ratio "$1" "$2"; fi; }

# umount_under DIR: lazily unmounts every mount at or below DIR, deepest first.
umount_under() {
  [[ -n "$1" ]] || return 0
  awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print length($5) " " $5}' /proc/self/mountinfo |
    sort -rn | cut -d' ' -f2- | while read -r m; do umount -l "$m" 2> /dev/null || true; done
}
# buildah_ ARGS...: Debian's buildah with its storage under $WORK/buildah (vfs), never the
# system's.
buildah_() {
  buildah --root "$WORK/buildah/root" --runroot "$WORK/buildah/run" --storage-driver vfs "$@"
}

# --- processes and memory ------------------------------------------------------------------------
# CPU seconds (user + system) a process has used so far.
cpu_seconds() {
  sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f\n", ($12 + $13) / hz}'
}
# The node's whole page cache (Cached in /proc/meminfo), in bytes.
page_cache_bytes() { echo $(( $(awk '/^Cached:/ {print $2}' /proc/meminfo) * 1024 )); }

# --- modelfs mounts (as root the live counters are in /run/modelfs/mounts) -------------------
stats_file() { echo "/run/modelfs/mounts/$(realpath -m "$1" | tr / _).json"; }
stat_field() {  # stat_field DIR FIELD
  "$MODELFS" stats "$1" --json | "$PY" -c "import sys,json; print(json.load(sys.stdin)['$2'])"
}
# Waits until the daemon has rewritten its counters (about once a second) after now.
fresh_stat() {
  local t f
  t=$(now)
  f=$(stats_file "$1")
  for _ in $(seq 100); do
    if [[ -f "$f" ]] && "$PY" -c "import os,sys; sys.exit(0 if os.stat(sys.argv[1]).st_mtime > float(sys.argv[2]) else 1)" "$f" "$t"; then
      break
    fi
    sleep 0.05
  done
  stat_field "$1" "$2"
}
umount_wait() {  # umount_wait DIR PID
  "$MODELFS" umount "$1" || fusermount3 -u -z "$1"
  for _ in $(seq 200); do kill -0 "$2" 2>/dev/null || return 0; sleep 0.05; done
  echo "mount daemon $2 did not exit" >&2
}
# The pid from `modelfs mount`'s "mounted REF at DIR (pid N)" line (on stdin).
mount_pid() { sed -n 's/.*(pid \([0-9]*\)).*/\1/p'; }

# --- results and a quiet machine, for every table-printing bench ---------------------------------
# R[key] collects one value per run; medians are taken when printing.
declare -gA R
add() { R[$1]="${R[$1]:-} $2"; }
# shellcheck disable=SC2086  # the values are split on purpose
med() { if [[ -n "${R[$1]:-}" ]]; then median ${R[$1]}; else echo n/a; fi; }
# calc EXPR ARG...: python arithmetic on numbers (a, b, c, ... are the ARGs); n/a in, n/a out.
calc() {
  "$PY" - "$@" <<'PY'
import sys
expr, args = sys.argv[1], sys.argv[2:]
try:
    env = {chr(ord('a') + i): float(v) for i, v in enumerate(args)}
    print(eval(expr, {'max': max, 'min': min, 'round': round, 'int': int}, env))
except (ValueError, ZeroDivisionError):
    print('n/a')
PY
}
# require_quiet and load_line: bench/quiet.sh.
# shellcheck source=bench/quiet.sh
source "$(dirname "${BASH_SOURCE[0]}")/quiet.sh"
