#!/usr/bin/env bash
# Installs every Debian bookworm package modelfs needs to build, test and benchmark.
# Idempotent: packages already present are left alone, and apt is only updated when needed.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang clang-format libclang-rt-14-dev
  # llvm-symbolizer on PATH: sanitizer reports name functions, and TSan suppressions match them
  llvm
  # libraries
  libabsl-dev libssl-dev libcurl4-openssl-dev nlohmann-json3-dev libcli11-dev
  libtomlplusplus-dev libfuse3-dev fuse3 libsqlite3-dev zlib1g-dev libzstd-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libsystemd-dev
  libmicrohttpd-dev
  libgtest-dev libgmock-dev
  # real services and tools used by integration tests and benchmarks
  docker-registry containerd skopeo apache2-utils curl python3 util-linux procps
  # bench/load_bench.sh: the blob store behind a redirect, and shaped network namespaces
  nginx-light iproute2
  # pause and reader images of the containerd 2.1 image-volume tests
  busybox-static
)

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

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ] && have_abseil_source; then
  echo "install-deps: all ${#PACKAGES[@]} packages present, abseil's source available"
  exit 0
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
add_deb_src
apt-get update -qq
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present; apt now knows Debian's sources"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
# The registry and containerd packages ship services; tests start their own instances,
# so keep the package scripts from starting the system ones.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}"
