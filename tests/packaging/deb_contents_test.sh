#!/usr/bin/env bash
# Builds the modelfs .deb with CPack from an existing build directory into a temporary
# directory and checks what dpkg would install: binaries (runnable after stripping), the
# systemd unit pointing at the installed daemon, the config as a conffile, the maintainer
# scripts, containerd snippets and docs, and the package metadata.
# Usage: deb_contents_test.sh BUILD_DIR PREFIX CONFIG_DIR HAS_DAEMON(ON|OFF) MODELFS_BIN [DAEMON_BIN]
# Exit 0 pass, 1 fail, 77 skip (binaries not built yet).
set -euo pipefail
BUILD=$1 PREFIX=$2 CONFDIR=$3 HAS_DAEMON=$4 MODELFS_BIN=$5 DAEMON_BIN=${6:-}

[ -x "$MODELFS_BIN" ] || { echo "SKIP: $MODELFS_BIN is not built"; exit 77; }
if [ "$HAS_DAEMON" = ON ] && [ ! -x "$DAEMON_BIN" ]; then
  echo "SKIP: $DAEMON_BIN is not built"; exit 77
fi

WORK=$(mktemp -d /tmp/modelfs-deb-test.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
  if grep -qF " $WORK/state/mnt " /proc/self/mounts; then umount -l "$WORK/state/mnt" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

(cd "$BUILD" && cpack -G DEB --config CPackConfig.cmake -B "$WORK/out") >"$WORK/cpack.log" 2>&1 ||
  { cat "$WORK/cpack.log"; echo "FAIL: cpack"; exit 1; }
shopt -s nullglob
debs=("$WORK"/out/modelfs_*.deb)
[ ${#debs[@]} -eq 1 ] || { cat "$WORK/cpack.log"; echo "FAIL: expected one modelfs_*.deb, got ${#debs[@]}"; exit 1; }
DEB=${debs[0]}
echo "built $DEB ($(stat -c %s "$DEB") bytes)"

P=.${PREFIX%/}
dpkg-deb -c "$DEB" | awk '{print $1, $NF}' >"$WORK/contents"
missing=0
has() {  # has MODE PATH: the package holds PATH with exactly this mode string
  grep -qxF -- "$1 $2" "$WORK/contents" || { fail "missing $2 with mode $1"; missing=1; }
}
has -rwxr-xr-x "$P/bin/modelfs"
if [ "$HAS_DAEMON" = ON ]; then has -rwxr-xr-x "$P/bin/modelfs-snapshotter"; fi
has -rw-r--r-- "$P/lib/systemd/system/modelfs-snapshotter.service"
has -rw-r--r-- ".$CONFDIR/snapshotter.toml"
for doc in install.md troubleshooting.md publishing.md snapshotter.md signing.md cli.md volume-image.md \
    cache-format.md design.md tensor-index.md tensor-names.md modelfs-alerts.rules.yml containerd/containerd-1.x.toml containerd/containerd-2.x.toml; do
  has -rw-r--r-- "$P/share/doc/modelfs/$doc"
done
if [ $missing -ne 0 ]; then echo "package holds:"; cat "$WORK/contents"; fi

# Metadata.
field() { dpkg-deb -f "$DEB" "$1"; }
[ "$(field Package)" = modelfs ] || fail "Package is '$(field Package)'"
[ "$(field Architecture)" = "$(dpkg --print-architecture)" ] || fail "Architecture is '$(field Architecture)'"
depends=$(field Depends)
for dep in fuse3 libfuse3-3 libsqlite3-0 libcurl4 libssl3; do
  grep -qE "(^|, )$dep( |,|$)" <<<"$depends" || fail "Depends lacks $dep: $depends"
done
if [ "$HAS_DAEMON" = ON ] && ! grep -qE "libgrpc\+\+1\.51" <<<"$depends"; then fail "Depends lacks libgrpc++1.51: $depends"; fi
[ "$(field Recommends)" = containerd ] || fail "Recommends is '$(field Recommends)'"

# Control files: the config is a conffile; maintainer scripts are executable and reload systemd.
dpkg-deb -e "$DEB" "$WORK/control"
grep -qxF "$CONFDIR/snapshotter.toml" "$WORK/control/conffiles" || fail "conffiles: $(cat "$WORK/control/conffiles")"
for s in postinst prerm postrm; do
  [ -x "$WORK/control/$s" ] || fail "$s missing or not executable"
done
grep -q "systemctl daemon-reload" "$WORK/control/postinst" || fail "postinst does not reload systemd"
if grep -qE "^[[:space:]]*systemctl (enable|start|restart)" "$WORK/control/postinst"; then fail "postinst starts or enables the unit"; fi

# Installed files: runnable binaries, a unit naming the installed daemon, the default config.
dpkg-deb -x "$DEB" "$WORK/root"
version=$("$WORK/root${PREFIX%/}/bin/modelfs" --version 2>&1) || fail "packaged modelfs --version failed: $version"
echo "packaged modelfs --version: $version"
if [ "$HAS_DAEMON" = ON ]; then
  dversion=$("$WORK/root${PREFIX%/}/bin/modelfs-snapshotter" --version 2>&1) ||
    fail "packaged modelfs-snapshotter --version failed: $dversion"
  echo "packaged modelfs-snapshotter --version: $dversion"
fi
unit="$WORK/root${PREFIX%/}/lib/systemd/system/modelfs-snapshotter.service"
grep -qxF "ExecStart=${PREFIX%/}/bin/modelfs-snapshotter --config /etc/modelfs/snapshotter.toml --last-good-config /run/modelfs/snapshotter.last-good.toml" "$unit" ||
  fail "unit ExecStart: $(grep ExecStart= "$unit")"
cmp -s "$WORK/root$CONFDIR/snapshotter.toml" "$(dirname "$0")/../../packaging/snapshotter.toml" ||
  fail "packaged snapshotter.toml differs from packaging/snapshotter.toml"
if command -v systemd-analyze >/dev/null && [ "$HAS_DAEMON" = ON ]; then
  sed "s#^ExecStart=[^ ]*#ExecStart=$WORK/root${PREFIX%/}/bin/modelfs-snapshotter#" "$unit" \
    >"$WORK/modelfs-snapshotter.service"
  # The service requires its socket unit (socket activation); both are packaged side by side.
  socket_unit="$(dirname "$unit")/modelfs-snapshotter.socket"
  [ -f "$socket_unit" ] || fail "modelfs-snapshotter.socket is not packaged"
  cp "$socket_unit" "$WORK/modelfs-snapshotter.socket"
  out=$(cd "$WORK" && systemd-analyze verify ./modelfs-snapshotter.socket ./modelfs-snapshotter.service 2>&1) || fail "systemd-analyze verify: $out"
  [ -z "$out" ] || fail "systemd-analyze verify warns: $out"
fi

# The packaged daemon starts with the packaged config and stops cleanly on SIGTERM. Needs
# root and /dev/fuse (it mounts FUSE); state and socket go to the temporary directory.
if [ "$HAS_DAEMON" = ON ] && [ "$(id -u)" = 0 ] && [ -c /dev/fuse ]; then
  daemon="$WORK/root${PREFIX%/}/bin/modelfs-snapshotter"
  sock="$WORK/run/snapshotter.sock"
  mkdir -p "$WORK/run" "$WORK/state"
  "$daemon" --config "$WORK/root$CONFDIR/snapshotter.toml" --root "$WORK/state" \
    --address "$sock" >"$WORK/daemon.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do [ -S "$sock" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if [ -S "$sock" ]; then
    kill -TERM "$pid"
    rc=0; wait "$pid" || rc=$?
    pid=""
    [ $rc -eq 0 ] || fail "daemon exited $rc after SIGTERM: $(cat "$WORK/daemon.log")"
    if grep -qF " $WORK/state/mnt " /proc/self/mounts; then
      fail "daemon left $WORK/state/mnt mounted"
      umount -l "$WORK/state/mnt" || true
    fi
    echo "packaged daemon started with the packaged config and stopped cleanly"
  else
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
    fail "daemon did not create $sock within 20 s: $(cat "$WORK/daemon.log")"
  fi
else
  echo "skipping the daemon start/stop check (needs the daemon, root and /dev/fuse)"
fi

# Every doc the installed files point at is installed: relative links between the docs
# (`](page.md`) and absolute /usr/share/doc/modelfs/ paths in the docs, the config and the unit.
DOCS="$WORK/root${PREFIX%/}/share/doc/modelfs"
for f in "$DOCS"/*.md "$WORK/root$CONFDIR/snapshotter.toml" "$unit"; do
  for link in $(grep -oE '\]\([a-z0-9-]+\.md' "$f" | sed 's/^](//' | sort -u); do
    [ -f "$DOCS/$link" ] || fail "$(basename "$f") links to $link, which the package does not install"
  done
  for path in $(grep -oE '/usr/share/doc/modelfs/[A-Za-z0-9._/-]+[A-Za-z0-9]' "$f" | sort -u); do
    [ -e "$DOCS/${path#/usr/share/doc/modelfs/}" ] || fail "$(basename "$f") names $path, which the package does not install"
  done
done

if [ $failures -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo PASS
