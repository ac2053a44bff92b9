# shellcheck shell=bash
# netns.sh: a network namespace behind a veth pair, shaped with tc tbf, for benchmarks that need
# a server reached over something like a NIC rather than over loopback; source it. Needs root
# and iproute2 (`ip`, `tc`). This kernel has tbf and htb but no netem, so only the rate is
# shaped, not delay or loss.
#
#   netns_create NAME [RATE]   creates namespace NAME and a veth pair into it, each end with a
#                              /30 address: prints "HOST_IP NS_IP" (the host side's address and
#                              the namespace side's). RATE (tc's units: 10gbit, 800mbit; empty
#                              or "none": unshaped) shapes both directions: a tbf on the egress
#                              of each end, so the host's downloads and its uploads each get
#                              RATE.
#   netns_exec NAME CMD...     runs CMD inside NAME (`ip netns exec`) and waits for it.
#   netns_spawn NAME CMD...    starts CMD inside NAME in the background and sets NETNS_PID to
#                              CMD's own pid (`ip netns exec` execs CMD in place), so the caller
#                              can stop it by pid. (`netns_exec NAME CMD &` would leave the pid
#                              of a subshell in $!.)
#   netns_destroy NAME         deletes the namespace; the veth pair goes with it. Safe to call
#                              twice or for a namespace that was never made. A process still
#                              inside (the caller's: no one else runs there) is named and
#                              stopped first, since it would keep the namespace alive.
#   netns_name PREFIX          prints PREFIX-<pid>-<n>, the first such name no namespace has
#                              (create it before asking for the next one).
#
# Addresses come from 10.213.0.0/16, one /30 per namespace: NETNS_NET (default 10.213) picks
# another /16. netns_create takes the first /30 with no route on the host, under a lock, so
# concurrent benchmarks (and several namespaces of one) never share a subnet. Interface names
# are short (a kernel limit of 15 bytes): mfv<n>h on the host, mfv<n>n in the namespace.
# NETNS_BURST overrides tbf's burst (default: 5 ms of RATE, at least 1 MiB, large enough that
# the bucket refills between timer ticks at 10-25 Gbit; with less, tbf throttles below RATE).
#
# The caller stops its servers first, then calls netns_destroy from its cleanup trap.

NETNS_NET=${NETNS_NET:-10.213}
NETNS_LOCK=${NETNS_LOCK:-/run/modelfs-netns.lock}

netns_name() {
  local n=1
  while [[ -e /run/netns/$1-$$-$n ]]; do n=$((n + 1)); done
  echo "$1-$$-$n"
}

# netns_rate_bytes RATE: RATE in bytes per second (tc units: bit, kbit, mbit, gbit, tbit, or
# bps, kbps, mbps, gbps for bytes; k/m/g are powers of 1000 in tc).
netns_rate_bytes() {
  python3 - "$1" <<'EOF'
import re, sys
m = re.fullmatch(r'([0-9.]+)\s*([kmgt]?)(bit|bps)', sys.argv[1].lower())
if not m:
    sys.exit(f"netns: cannot read the rate {sys.argv[1]!r} (want e.g. 10gbit, 800mbit)")
n = float(m.group(1)) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9, 't': 1e12}[m.group(2)]
print(int(n / 8 if m.group(3) == 'bit' else n))
EOF
}

# netns_shape DEV RATE [NAME]: a tbf at RATE on DEV's egress (inside namespace NAME if given).
netns_shape() {
  local dev=$1 rate=$2 ns=${3:-} bytes burst
  bytes=$(netns_rate_bytes "$rate") || return 2
  burst=${NETNS_BURST:-$((bytes / 200 > 1048576 ? bytes / 200 : 1048576))}
  if [[ -n $ns ]]; then
    tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms
  else
    tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms
  fi
}

netns_create() {
  local name=$1 rate=${2:-} out host ns hdev ndev
  [[ -n $name ]] || { echo "netns_create: no name" >&2; return 2; }
  if ! command -v ip > /dev/null || ! command -v tc > /dev/null; then
    echo "netns_create: needs ip and tc (iproute2)" >&2
    return 2
  fi
  ip netns add "$name" || return 1
  out=$(
    exec 9> "$NETNS_LOCK"
    flock 9
    for i in $(seq 0 16383); do
      net="$NETNS_NET.$((i / 64)).$(((i % 64) * 4))"
      [[ -z $(ip -4 route show "$net/30") ]] || continue
      hdev="mfv${i}h"
      ip link show "$hdev" > /dev/null 2>&1 && continue
      host="$NETNS_NET.$((i / 64)).$(((i % 64) * 4 + 1))"
      ns="$NETNS_NET.$((i / 64)).$(((i % 64) * 4 + 2))"
      ip link add "$hdev" type veth peer name "mfv${i}n" netns "$name" || exit 1
      ip addr add "$host/30" dev "$hdev" || exit 1
      ip link set "$hdev" up || exit 1
      echo "$host $ns $hdev mfv${i}n"
      exit 0
    done
    echo "netns_create: no free /30 in $NETNS_NET.0.0/16" >&2
    exit 1
  ) || { ip netns del "$name" 2> /dev/null; return 1; }
  read -r host ns hdev ndev <<< "$out"
  if ! ip -n "$name" addr add "$ns/30" dev "$ndev" || ! ip -n "$name" link set "$ndev" up ||
    ! ip -n "$name" link set lo up; then
    netns_destroy "$name"
    return 1
  fi
  if [[ -n $rate && $rate != none ]]; then
    # Downloads leave the namespace's end; uploads (requests, pushes) leave the host's end.
    if ! netns_shape "$ndev" "$rate" "$name" || ! netns_shape "$hdev" "$rate"; then
      netns_destroy "$name"
      return 1
    fi
  fi
  echo "$host $ns"
}

netns_exec() {
  local name=$1
  shift
  ip netns exec "$name" "$@"
}

# shellcheck disable=SC2034  # NETNS_PID is for the caller
netns_spawn() {
  local name=$1
  shift
  ip netns exec "$name" "$@" &
  NETNS_PID=$!
}

netns_destroy() {
  local name=${1:-} p
  [[ -n $name && -e /run/netns/$name ]] || return 0
  # A process left inside keeps the namespace, and its veth pair, alive after `ip netns del`.
  # Only the caller's processes run in its namespace; say which are left and stop them.
  for p in $(ip netns pids "$name" 2> /dev/null); do
    echo "netns_destroy: pid $p still runs in $name; stopping it" >&2
    kill "$p" 2> /dev/null || true
  done
  for _ in $(seq 50); do
    [[ -z $(ip netns pids "$name" 2> /dev/null) ]] && break
    sleep 0.1
  done
  ip netns del "$name" 2> /dev/null || true
}
