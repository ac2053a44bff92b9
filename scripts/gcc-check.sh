#!/usr/bin/env bash
# Proves that Debian's own compiler (gcc 12) accepts modelfs, warnings as errors, without a second
# full build: every translation unit of an existing clang tree's compile_commands.json is run
# through `g++ -fsyntax-only` with that tree's flags (clang-only ones dropped). What it cannot
# catch is what only the optimizer or the linker sees; a plain `cmake -S . -B b && cmake --build b`
# with gcc is the full proof (README, "Development").
# Usage: scripts/gcc-check.sh [BUILD_DIR]   (default ./build, made by scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-${BUILD_DIR:-build}}
JOBS=${JOBS:-$(nproc)}
CXX_GCC=${CXX_GCC:-g++}
[ -f "$BUILD_DIR/compile_commands.json" ] || {
  echo "gcc-check: no $BUILD_DIR/compile_commands.json; run scripts/build.sh first" >&2
  exit 2
}
command -v "$CXX_GCC" >/dev/null || { echo "gcc-check: no $CXX_GCC" >&2; exit 2; }
echo "gcc-check: $("$CXX_GCC" --version | head -1), -fsyntax-only over $BUILD_DIR/compile_commands.json"
LOG_DIR=$(mktemp -d /tmp/modelfs-gcc-check.XXXXXX)
trap 'rm -rf "$LOG_DIR"' EXIT
# One shell command per translation unit, run in the build directory as CMake wrote it.
python3 - "$BUILD_DIR/compile_commands.json" "$CXX_GCC" "$LOG_DIR" > "$LOG_DIR/commands" <<'PY'
import json, os, shlex, sys
entries = json.load(open(sys.argv[1]))
gxx, log_dir = sys.argv[2], sys.argv[3]
clang_only = ("-Wthread-safety", "-fsanitize", "-gline-tables-only", "-fprofile-instr",
              "-fcoverage-mapping")
build = os.path.realpath(os.path.dirname(sys.argv[1]))
seen = set()
for i, e in enumerate(entries):
    # Our own code only: generated protobuf sources in the build tree are not checked.
    path = os.path.realpath(e["file"])
    if not e["file"].endswith((".cc", ".cpp")) or path.startswith(build + "/"):
        continue
    # Each file once: a source compiled into several targets (a fuzzer's copy of a parser)
    # differs there only in flags g++ checks nothing new for.
    if path in seen:
        continue
    seen.add(path)
    args = shlex.split(e["command"]) if "command" in e else e["arguments"]
    # Drop a compiler launcher (ccache) and the compiler, the output and -c.
    while args and not args[0].endswith(("++", "c++")):
        args.pop(0)
    out, skip = [gxx], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT"):
            skip = True
            continue
        if a in ("-c", "-MD") or a == e["file"] or a.startswith(clang_only):
            continue
        out.append(a)
    out += ["-fsyntax-only", e["file"]]
    log = f"{log_dir}/{i}.log"
    print(f"cd {shlex.quote(e['directory'])} && {shlex.join(out)} > {log} 2>&1 || "
          f"{{ echo {shlex.quote(e['file'])}; cat {log}; exit 1; }}")
PY
n=$(wc -l < "$LOG_DIR/commands")
if tr '\n' '\0' < "$LOG_DIR/commands" | xargs -0 -P "$JOBS" -n 1 bash -c > "$LOG_DIR/failures" 2>&1; then
  echo "gcc-check: $n translation units accepted by $CXX_GCC"
else
  echo "gcc-check: $CXX_GCC rejects modelfs:" >&2
  head -c 20000 "$LOG_DIR/failures" >&2
  exit 1
fi
