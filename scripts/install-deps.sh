#!/usr/bin/env bash
# Installs every Debian bookworm package modelfs needs to build, test and benchmark.
# Idempotent: packages already present are left alone, and apt is only updated when needed.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang clang-format libclang-rt-14-dev
  # libraries
  libabsl-dev libssl-dev libcurl4-openssl-dev nlohmann-json3-dev libcli11-dev
  libtomlplusplus-dev libfuse3-dev fuse3 libsqlite3-dev zlib1g-dev libzstd-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libsystemd-dev
  libmicrohttpd-dev
  libgtest-dev libgmock-dev
  # real services and tools used by integration tests and benchmarks
  docker-registry containerd skopeo apache2-utils curl python3 util-linux procps
  # pause and reader images of the containerd 2.1 image-volume tests
  busybox-static
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run as root" >&2
  exit 2
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The registry and containerd packages ship services; tests start their own instances,
# so keep the package scripts from starting the system ones.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}"
