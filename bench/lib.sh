# shellcheck shell=bash
# lib.sh: helpers shared by the mount benchmarks (mount_bench.sh, load_bench.sh); source it.
# Times come from `date +%s.%N`; arithmetic and medians from python3. The registry helpers keep
# their state in REG (host:port) and REG_PID; the caller's cleanup must call stop_registry.

now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }
median() { python3 -c "import sys,statistics; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }
# ratio BASELINE_S MODELFS_S: baseline time / modelfs time (above 1.0: modelfs is faster).
ratio() { python3 -c "import sys; b,m=map(float,sys.argv[1:]); print(f'{b/m:.2f}x' if m>0 else 'n/a')" "$1" "$2"; }
mbps() { python3 -c "import sys; n,t=map(float,sys.argv[1:]); print(f'{n/t/1e6:.0f}' if t>0 else 'n/a')" "$1" "$2"; }
human() {  # human BYTES: 1.5 GiB, 12.0 MiB, ...
  python3 -c "import sys
n=float(sys.argv[1]); u=['B','KiB','MiB','GiB','TiB']; i=0
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

free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }

# start_registry DIR: a docker-registry on a free loopback port with its storage under DIR.
start_registry() {
  local dir=$1 port
  port=$(free_port)
  REG="127.0.0.1:$port"
  mkdir -p "$dir"
  cat > "$dir/config.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/storage
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $REG
EOF
  docker-registry serve "$dir/config.yml" > "$dir/log" 2>&1 &
  REG_PID=$!
  for _ in $(seq 200); do
    curl -fs "http://$REG/v2/" > /dev/null && return 0
    sleep 0.05
  done
  echo "docker-registry did not start:" >&2
  cat "$dir/log" >&2
  exit 1
}
stop_registry() {
  if [[ -n "${REG_PID:-}" ]]; then
    kill "$REG_PID" 2>/dev/null || true
    wait "$REG_PID" 2>/dev/null || true
    REG_PID=""
  fi
}

# --- modelfs mounts (as root the live counters are in /run/modelfs/mounts) -------------------
stats_file() { echo "/run/modelfs/mounts/$(realpath -m "$1" | tr / _).json"; }
stat_field() {  # stat_field DIR FIELD
  "$MODELFS" stats "$1" --json | python3 -c "import sys,json; print(json.load(sys.stdin)['$2'])"
}
# Waits until the daemon has rewritten its counters (about once a second) after now.
fresh_stat() {
  local t f
  t=$(now)
  f=$(stats_file "$1")
  for _ in $(seq 100); do
    if [[ -f "$f" ]] && python3 -c "import os,sys; sys.exit(0 if os.stat(sys.argv[1]).st_mtime > float(sys.argv[2]) else 1)" "$f" "$t"; then
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
