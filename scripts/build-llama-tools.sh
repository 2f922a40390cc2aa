#!/usr/bin/env bash
# Build llama.cpp's own tools (llama-server, llama-perplexity, llama-bench,
# llama-quantize) from the sources of the installed llama-cpp-python release,
# once, into a cache outside the repository, so that tests can run them as
# real peers (DESIGN.md, "Real peers to test against").
#
# Usage:  scripts/build-llama-tools.sh [PYTHON]
#   PYTHON  the interpreter whose llama-cpp-python is mirrored
#           (default: $PY, else .venv/bin/python, else python3).
# Env:    CMAKE_ARGS   extra CMake flags, as for `pip install llama-cpp-python`:
#                      if you built llama-cpp-python with CMAKE_ARGS, export the
#                      same here so both builds run the same kernels.
#         XDG_CACHE_HOME  cache root (default ~/.cache).
#
# Cache:  ${XDG_CACHE_HOME:-$HOME/.cache}/logitlab/llama-tools/<version>-<key>/bin/
#         <key> = first 12 hex digits of the SHA-256 of the CMake flags, the C++
#         compiler's version line and, because GGML_NATIVE=ON compiles with
#         -march=native, the CPU's model name and flags.  A `.stamp` file is
#         written last; when it is there (and the four binaries are), a run is a
#         no-op that prints nothing.  `logitlab.tools.llama_tools_dir()` finds the
#         newest stamped folder for the installed version.
# Output: one line when it builds and one when done; on failure the tail of the
#         build log on stderr and a non-zero exit status.
#
# How llama-cpp-python 0.3.x configures ggml when pip builds it from source with
# default flags (read from its sdist's CMakeLists.txt and vendor/llama.cpp's):
#   * its top-level CMakeLists.txt sets BUILD_SHARED_LIBS=On, LLAMA_BUILD_COMMON=ON
#     and LLAMA_CURL=OFF, and on Linux touches no ggml CPU option at all (the
#     GGML_AVX*/F16C/FMA overrides are for Intel macOS, GGML_NATIVE/OPENMP=OFF
#     only for Emscripten); it then add_subdirectory()s vendor/llama.cpp;
#   * scikit-build-core builds it with CMAKE_BUILD_TYPE=Release (-O3 -DNDEBUG);
#   * so ggml's own defaults hold: GGML_NATIVE=ON (ggml/CMakeLists.txt turns it
#     OFF only when cross-compiling or when SOURCE_DATE_EPOCH is set), hence
#     -march=native and GGML_AVX/AVX2/FMA/F16C/... left to the compiler's view of
#     this CPU; GGML_OPENMP=ON (libgomp); GGML_LLAMAFILE=ON (llama.cpp's
#     CMakeLists.txt turns the sgemm kernels on unless told otherwise);
#     GGML_CPU_REPACK=ON; GGML_BLAS=OFF on Linux; GGML_BACKEND_DL=OFF;
#     GGML_CPU_ALL_VARIANTS=OFF.
#   * checked on the installed build: llama_cpp.llama_print_system_info() says
#     "AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 |
#     AVX512 = 1 | ... | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1" on a CPU with
#     AVX-512, i.e. a native build (tests/test_llama_peers.py compares that line
#     with llama-perplexity's own, and its PPL with ours on the same tokens).
# Same kernels also need the same run-time options: llama.cpp's tools default to
# flash attention "auto" (on, for the CPU) while llama-cpp-python defaults to off;
# pass `-fa off` to a tool that must match llama-cpp-python bit for bit.
# We mirror these explicitly (so a stray SOURCE_DATE_EPOCH cannot flip
# GGML_NATIVE here) and differ only where the kernels are not involved:
# BUILD_SHARED_LIBS=OFF (ggml and llama linked statically into each tool, no
# RPATH games), LLAMA_OPENSSL=OFF (no HTTPS; nothing is downloaded at run time),
# LLAMA_USE_PREBUILT_UI=OFF (no Web UI download at build time), no tests,
# examples or the unified app; only the four targets are built.
set -euo pipefail

PYBIN="${1:-${PY:-}}"
if [ -z "$PYBIN" ]; then
    if [ -x .venv/bin/python ]; then PYBIN=.venv/bin/python; else PYBIN=python3; fi
fi
VERSION="$("$PYBIN" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null)" || {
    echo "build-llama-tools: llama-cpp-python is not installed for $PYBIN (run: make setup)" >&2
    exit 2
}

TARGETS="llama-server llama-perplexity llama-bench llama-quantize"
FLAGS="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
-DGGML_NATIVE=ON -DGGML_OPENMP=ON -DGGML_LLAMAFILE=ON -DGGML_CPU_REPACK=ON \
-DGGML_BLAS=OFF -DGGML_BACKEND_DL=OFF -DGGML_CCACHE=OFF \
-DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
-DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF ${CMAKE_ARGS:-}"
CXX_LINE="$(${CXX:-c++} --version 2>/dev/null | head -n1 || true)"
CPU_LINE="$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null || true) $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
KEY="$(printf '%s\n%s\n%s\n' "$FLAGS" "$CXX_LINE" "$CPU_LINE" | sha256sum | cut -c1-12)"

ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/logitlab/llama-tools"
DIR="$ROOT/$VERSION-$KEY"
STAMP="$DIR/.stamp"

have_all() {
    [ -f "$STAMP" ] || return 1
    for t in $TARGETS; do [ -x "$DIR/bin/$t" ] || return 1; done
}
have_all && exit 0

mkdir -p "$ROOT/sdist" "$DIR"
exec 9>"$DIR/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
have_all && exit 0     # another run built it while we waited for the lock

START=$(date +%s)
LOG="$DIR/build.log"
echo "build-llama-tools: building $TARGETS from llama-cpp-python $VERSION into $DIR (~20 min on 2 cores; log: $LOG)"

fail() {
    echo "build-llama-tools: $1 (last lines of $LOG follow)" >&2
    tail -n 40 "$LOG" >&2 || true
    exit 1
}

SDIST="$(ls "$ROOT"/sdist/llama_cpp_python-"$VERSION".tar.gz 2>/dev/null || true)"
if [ -z "$SDIST" ]; then
    "$PYBIN" -m pip download --quiet --no-binary :all: --no-deps \
        "llama-cpp-python==$VERSION" -d "$ROOT/sdist" >"$LOG" 2>&1 \
        || fail "pip download of the llama-cpp-python $VERSION sdist failed"
    SDIST="$ROOT/sdist/llama_cpp_python-$VERSION.tar.gz"
    [ -f "$SDIST" ] || fail "pip download left no $SDIST"
fi

SRC="$DIR/src"
BUILD="$DIR/build"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    rm -rf "$SRC" && mkdir -p "$SRC"
    tar -xzf "$SDIST" -C "$SRC" --strip-components=3 \
        "llama_cpp_python-$VERSION/vendor/llama.cpp" >>"$LOG" 2>&1 \
        || fail "could not extract vendor/llama.cpp from $SDIST"
fi

GEN=""
command -v ninja >/dev/null 2>&1 && GEN="-G Ninja"
# shellcheck disable=SC2086  # FLAGS and GEN are word lists
cmake -S "$SRC" -B "$BUILD" $GEN $FLAGS >>"$LOG" 2>&1 || fail "cmake configure failed"
# shellcheck disable=SC2086
cmake --build "$BUILD" --config Release -j "$(nproc)" --target $TARGETS >>"$LOG" 2>&1 \
    || fail "cmake build failed"

mkdir -p "$DIR/bin"
for t in $TARGETS; do
    install -m 0755 "$BUILD/bin/$t" "$DIR/bin/$t" || fail "the build made no $t"
done
# Statically linked: only system libraries (libc, libstdc++, libgomp, ...) may remain.
for t in $TARGETS; do
    if ldd "$DIR/bin/$t" 2>&1 | grep -E "not found|libllama|libggml|libmtmd" >>"$LOG"; then
        fail "$t needs a library outside the system (see ldd in the log)"
    fi
done
printf '%s\n' "llama-cpp-python=$VERSION" "flags=$FLAGS" "cxx=$CXX_LINE" \
    "built_s=$(( $(date +%s) - START ))" >"$DIR/flags.txt"
rm -rf "$BUILD" "$SRC"
touch "$STAMP"
echo "build-llama-tools: done in $(( ($(date +%s) - START) / 60 )) min $(( ($(date +%s) - START) % 60 )) s: $DIR/bin"
