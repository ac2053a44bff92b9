# Sourced by scripts/build.sh and scripts/tsan.sh (from the tree's root): sets `launcher` to the
# CMake arguments that compile through ccache, where it is installed (scripts/install-deps.sh
# installs it) and CCACHE is not 0, else to nothing. Paths are taken relative to the tree and the
# build directory is not hashed, so a fresh clone anywhere on a machine that built modelfs before
# compiles only what changed.
launcher=()
if command -v ccache > /dev/null && [ "${CCACHE:-1}" != 0 ]; then
  ccache_launcher="env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=true;ccache"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER="$ccache_launcher"
            -DCMAKE_CXX_COMPILER_LAUNCHER="$ccache_launcher")
fi
