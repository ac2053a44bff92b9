#!/usr/bin/env bash
# Builds the ThreadSanitizer tree (./build-tsan): the unit tests and the FUSE tests, compiled with
# clang -fsanitize=thread, each registered with the ctest label "tsan". Debian's libabsl is not
# instrumented, and absl::Mutex synchronizes inside it where TSan cannot see (every access under
# a Mutex would be reported), so abseil is built into the tree from Debian's own source of the
# installed version (apt-get source; scripts/install-deps.sh adds the deb-src entry). gRPC links
# Debian's libabsl, so the tree leaves out the gRPC parts (snapshots service, daemon binary).
# Usage: scripts/tsan.sh [extra cmake args...]; then
#   TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan -L tsan
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
JOBS=${JOBS:-$(nproc)}

version=$(dpkg-query -W -f='${Version}' libabsl-dev)
src="$PWD/$BUILD_DIR/abseil-src"
if [ "$(cat "$src/.modelfs-debian-version" 2>/dev/null)" != "$version" ]; then
  echo "tsan.sh: fetching Debian's abseil source $version"
  rm -rf "$src" "$BUILD_DIR/abseil-dl"
  mkdir -p "$BUILD_DIR/abseil-dl"
  # apt checks the .dsc against the signed Sources index; dpkg-source checks the tarballs
  # against the .dsc and applies Debian's patches, as the package was built.
  if ! (cd "$BUILD_DIR/abseil-dl" && apt-get source --download-only -qq "abseil=$version"); then
    echo "tsan.sh: cannot fetch Debian's source of abseil $version;" \
         "run scripts/install-deps.sh as root (it adds the deb-src entry)" >&2
    exit 2
  fi
  dpkg-source -x "$BUILD_DIR"/abseil-dl/abseil_*.dsc "$src" >/dev/null
  echo "$version" > "$src/.modelfs-debian-version"
  rm -rf "$BUILD_DIR/abseil-dl"
fi

# shellcheck source=scripts/ccache-launcher.sh
source scripts/ccache-launcher.sh
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # -O1: TSan's advice (fast enough, exact stacks); about a quarter less compile time than -O2.
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
    -DMODELFS_TSAN=ON -DMODELFS_WERROR=ON -DMODELFS_ABSL_SOURCE_DIR="$src" "${launcher[@]}" "$@"
fi
cmake --build "$BUILD_DIR" --target modelfs_tsan_tests -j "$JOBS"
