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
#                      the kernels are the installed libraries whatever they
#                      say, but an option that changes a shared type (e.g.
#                      -DLLAMA_SUBPROCESS=OFF) must be exported here as for pip.
#         XDG_CACHE_HOME  cache root (default ~/.cache).
#
# Cache:  ${XDG_CACHE_HOME:-$HOME/.cache}/logitlab/llama-tools/<version>-<key>/bin/
#         <key> = first 12 hex digits of the SHA-256 of the CMake flags, the C++
#         compiler's version line, the SHA-256 of each installed llama/ggml
#         library (a cache hit runs byte-identical kernels) and of
#         scripts/llama-tools/CMakeLists.txt; lib/ holds those libraries.
#         A `.stamp` file is written last; when it is there (and the four binaries are), a run is a
#         no-op that prints nothing.  `logitlab.tools.llama_tools_dir()` finds the
#         newest stamped folder for the installed version whose lib/ copies are the installed libraries.
# Output: one line when it builds and one when done; on failure the tail of the
#         build log on stderr and a non-zero exit status.
#
# How they are built: against the shared libraries
# llama-cpp-python already built and installed, not from a second copy of ggml.
#   * pip builds llama-cpp-python with BUILD_SHARED_LIBS=On and LLAMA_BUILD_COMMON=ON
#     (its top-level CMakeLists.txt), so it installs libllama, libggml{,-base,-cpu},
#     libllama-common and libmtmd into site-packages/lib (the ones it loads itself
#     are byte-identical copies in site-packages/llama_cpp/lib; checked here).
#   * Those libraries are copied into the cache folder's lib/, and
#     scripts/llama-tools/CMakeLists.txt compiles only the four tools' own sources
#     (tools/server, perplexity, llama-bench, quantize, cpp-httplib and the Web UI
#     stub) from the same release's vendor/llama.cpp against them, with RPATH
#     $ORIGIN/../lib.  So a peer runs the very kernels the llamacpp engine runs
#     (same ggml build, same -march, same repack and llamafile paths) and the
#     build takes ~2 min on 2 cores instead of 13-20.
#   * The options that change the layout of a type the tools share with
#     libllama-common are mirrored: LLAMA_OPENSSL from whether that library needs
#     libssl (cpp-httplib's classes differ with CPPHTTPLIB_OPENSSL_SUPPORT) and
#     LLAMA_SUBPROCESS at llama.cpp's default (ON on Linux; CMAKE_ARGS may say
#     otherwise, as for pip).
# Same kernels also need the same run-time options: llama.cpp's tools default to
# flash attention "auto" (on, for the CPU) while llama-cpp-python defaults to off;
# pass `-fa off` to a tool that must match llama-cpp-python bit for bit.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYBIN="${1:-${PY:-}}"
if [ -z "$PYBIN" ]; then
    if [ -x .venv/bin/python ]; then PYBIN=.venv/bin/python; else PYBIN=python3; fi
fi
VERSION="$("$PYBIN" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null)" || {
    echo "build-llama-tools: llama-cpp-python is not installed for $PYBIN (run: make setup)" >&2
    exit 2
}
# site-packages/llama_cpp/lib (what llama-cpp-python loads) and site-packages/lib (all it installed).
PKGLIB="$("$PYBIN" -c 'import importlib.util as u, os; print(os.path.join(list(u.find_spec("llama_cpp").submodule_search_locations)[0], "lib"))')"
LIBSRC="$(dirname "$(dirname "$PKGLIB")")/lib"
LIBS="libggml-base libggml-cpu libggml libllama libllama-common libmtmd"
for l in $LIBS; do
    if [ ! -e "$LIBSRC/$l.so" ]; then
        echo "build-llama-tools: llama-cpp-python $VERSION installed no $LIBSRC/$l.so: the tools are built against" \
             "its libraries (llama-cpp-python 0.3.36 installs them there)" >&2
        exit 2
    fi
done
for f in "$PKGLIB"/lib*.so.*; do
    [ -L "$f" ] && continue
    if ! cmp -s "$f" "$LIBSRC/$(basename "$f")"; then
        echo "build-llama-tools: $f differs from $LIBSRC/$(basename "$f"): the tools would not run the" \
             "libraries llama-cpp-python loads (reinstall llama-cpp-python)" >&2
        exit 2
    fi
done
OPENSSL=OFF
if readelf -d "$LIBSRC/libllama-common.so" 2>/dev/null | grep -q 'NEEDED.*libssl'; then OPENSSL=ON; fi

TARGETS="llama-server llama-perplexity llama-bench llama-quantize"
FLAGS="-DCMAKE_BUILD_TYPE=Release -DLLAMA_OPENSSL=$OPENSSL -DLLAMA_SUBPROCESS=ON \
-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF ${CMAKE_ARGS:-}"
CXX_LINE="$(${CXX:-c++} --version 2>/dev/null | head -n1 || true)"
LIB_SUMS="$(cd "$LIBSRC" && sha256sum lib*.so.*.* 2>/dev/null)"
KEY="$(printf '%s\n%s\n%s\n%s\n' "$FLAGS" "$CXX_LINE" "$LIB_SUMS" "$(sha256sum "$HERE/llama-tools/CMakeLists.txt")" \
       | sha256sum | cut -c1-12)"

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
echo "build-llama-tools: building $TARGETS from llama-cpp-python $VERSION into $DIR (~2 min on 2 cores; log: $LOG)"
: >"$LOG"

fail() {
    echo "build-llama-tools: $1 (last lines of $LOG follow)" >&2
    tail -n 40 "$LOG" >&2 || true
    exit 1
}

SDIST="$(ls "$ROOT"/sdist/llama_cpp_python-"$VERSION".tar.gz 2>/dev/null || true)"
if [ -z "$SDIST" ]; then
    "$PYBIN" -m pip download --quiet --no-binary :all: --no-deps \
        "llama-cpp-python==$VERSION" -d "$ROOT/sdist" >>"$LOG" 2>&1 \
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

# The libraries the tools run: byte-identical copies (symlinks kept) of those llama-cpp-python installed.
rm -rf "$DIR/lib" && mkdir -p "$DIR/lib"
cp -a "$LIBSRC"/lib*.so* "$DIR/lib/" || fail "could not copy the libraries of $LIBSRC"

GEN=""
command -v ninja >/dev/null 2>&1 && GEN="-G Ninja"
# shellcheck disable=SC2086  # FLAGS and GEN are word lists
cmake -S "$HERE/llama-tools" -B "$BUILD" $GEN -DLLAMA_SRC="$SRC" -DLLAMA_LIB_DIR="$DIR/lib" $FLAGS >>"$LOG" 2>&1 \
    || fail "cmake configure failed"
# shellcheck disable=SC2086
cmake --build "$BUILD" --config Release -j "$(nproc)" --target $TARGETS >>"$LOG" 2>&1 \
    || fail "cmake build failed"

mkdir -p "$DIR/bin"
for t in $TARGETS; do
    install -m 0755 "$BUILD/bin/$t" "$DIR/bin/$t" || fail "the build made no $t"
done
# Every llama/ggml library must come from the copies in $DIR/lib, and nothing may be missing.
for t in $TARGETS; do
    LINKED="$(ldd "$DIR/bin/$t" 2>&1)" || fail "ldd $t failed: $LINKED"
    printf '%s\n' "$LINKED" >>"$LOG"
    if grep -E "not found" <<<"$LINKED" >>"$LOG" \
       || grep -E "lib(llama|ggml|mtmd)" <<<"$LINKED" | grep -v "=> $DIR/bin/../lib/" >>"$LOG"; then
        fail "$t needs a library that is missing or outside $DIR/lib (see ldd in the log)"
    fi
done
printf '%s\n' "llama-cpp-python=$VERSION" "libraries=$LIBSRC" "flags=$FLAGS" "cxx=$CXX_LINE" \
    "built_s=$(( $(date +%s) - START ))" "$LIB_SUMS" >"$DIR/flags.txt"
rm -rf "$BUILD" "$SRC"
touch "$STAMP"
echo "build-llama-tools: done in $(( ($(date +%s) - START) / 60 )) min $(( ($(date +%s) - START) % 60 )) s: $DIR/bin"
