"""Build llama.cpp's libraries from a source tree with given CMake flags, once, into a cached library folder.

A library folder is what the llamacpp engine's ``lib=DIR`` option loads (:mod:`logitlab.engines.llamacpp_library`)::

    DIR/lib/             libllama.so, libggml.so, libggml-base.so, libggml-cpu.so (RUNPATH $ORIGIN)
    DIR/python/llama_cpp the llama-cpp-python bindings of the same release, when built from one
    DIR/logitlab.json    what built it: source, source digest, flags, compiler, seconds

Only the ``llama`` target and what it links are built (no tools, tests or examples, no ``common``): 1 min 34 s
on 2 cores (AMD EPYC) for the llama.cpp that llama-cpp-python 0.3.36 vendors, against 13-20 min for the whole tree. The folder is cached under
``$LOGITLAB_CACHE/llama-builds/<key>`` where ``<key>`` hashes the source tree's files, the flags and the
compiler's version line, so the same sources and flags are built once (a second ``logitlab build`` or a
``bisect --build`` over commits already visited is a cache hit).

Sources: a llama.cpp tree (``CMakeLists.txt`` and ``include/llama.h``), a llama-cpp-python tree (its
``vendor/llama.cpp`` and ``llama_cpp/``: the library is built with the bindings it was released with), or a
llama-cpp-python release from the package index (``--llama-cpp-python 0.3.35``: its sdist ships both).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from logitlab.engines.build_cache import building, cache_root, exclusive, publish, read_meta
from logitlab.errors import EngineError, InputError
from logitlab.tools import llama_tools_cache

__all__ = ["BASE_FLAGS", "SourceTree", "BuildResult", "find_source", "release_source", "source_digest", "build_key",
           "build_library", "builds_root"]

#: CMake flags every build gets: shared libraries whose RUNPATH finds each other (``$ORIGIN``), nothing but them.
BASE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_TESTS=OFF",
              "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_SERVER=OFF",
              "-DLLAMA_BUILD_COMMON=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
              "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN")
#: The CMake target built; it links ggml, ggml-base and the CPU backend.
TARGET = "llama"
#: Folders of a source tree that are not sources (a build folder inside it, version control).
_SKIP_DIRS = frozenset({".git", "build", ".logitlab-lib", "__pycache__", "node_modules"})
_NINJA_STEP = re.compile(rb"^\[(\d+)/(\d+)\]")

OnProgress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class SourceTree:
    """Sources to build a library folder from.

    Attributes:
        llama_cpp: the llama.cpp tree (holds ``CMakeLists.txt`` and ``include/llama.h``).
        bindings: the ``llama_cpp`` Python package of the same release (None: a bare llama.cpp tree; the library
            is then loaded with the installed bindings, which must match its C API).
        release: the llama-cpp-python version the sources come from, when known.
        origin: what the user named (a path, or ``llama-cpp-python==VERSION``).
    """

    llama_cpp: Path
    bindings: Path | None
    release: str | None
    origin: str


@dataclass(frozen=True)
class BuildResult:
    """A built (or cached) library folder.

    Attributes:
        folder: the library folder (``lib/``, maybe ``python/``, ``logitlab.json``).
        key: the cache key (12 hex digits of SHA-256 over source digest, flags and compiler).
        cached: True when no build ran (the folder was in the cache).
        seconds: wall time of the build (s); 0.0 when cached.
        meta: the folder's ``logitlab.json``.
        waited: True when another process was building the same key and this one waited for its folder
            (then ``cached`` is True too: this process built nothing).
    """

    folder: Path
    key: str
    cached: bool
    seconds: float
    meta: dict
    waited: bool = False


def builds_root() -> Path:
    """Where library folders are cached: ``$LOGITLAB_CACHE/llama-builds`` (default ``~/.cache/logitlab``)."""
    return cache_root() / "llama-builds"


def _is_llama_tree(path: Path) -> bool:
    return (path / "CMakeLists.txt").is_file() and (path / "include" / "llama.h").is_file()


def _release_of(bindings: Path) -> str | None:
    text = (bindings / "__init__.py").read_text(errors="replace") if (bindings / "__init__.py").is_file() else ""
    found = re.search(r"__version__\s*=\s*[\"']([^\"']+)[\"']", text)
    return found.group(1) if found else None


def find_source(path: str | os.PathLike) -> SourceTree:
    """The sources at ``path``: a llama.cpp tree, or a llama-cpp-python tree (``vendor/llama.cpp`` + ``llama_cpp/``).

    Raises:
        InputError: ``path`` is neither (the message says what was looked for).
    """
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise InputError(f"source {path} is not a folder: give a llama.cpp tree or a llama-cpp-python tree")
    if _is_llama_tree(root):
        return SourceTree(root, None, None, str(root))
    vendored = root / "vendor" / "llama.cpp"
    if _is_llama_tree(vendored):
        bindings = root / "llama_cpp"
        if not (bindings / "llama_cpp.py").is_file():
            bindings = None
        return SourceTree(vendored, bindings, _release_of(bindings) if bindings else None, str(root))
    raise InputError(f"{path} is not a llama.cpp tree (no CMakeLists.txt and include/llama.h) nor a "
                     "llama-cpp-python tree (no vendor/llama.cpp)")


def release_source(version: str, *, python: str | None = None) -> SourceTree:
    """The sources of llama-cpp-python ``version`` from the package index (its sdist), downloaded and unpacked once.

    The sdist is kept under :func:`builds_root` ``/sdist`` and unpacked under ``src/<version>``.

    Raises:
        InputError: the version is malformed, or pip could not download it (offline, no such release).
    """
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", version):
        raise InputError(f"bad llama-cpp-python version {version!r}: expected e.g. 0.3.35")
    root = builds_root()
    unpacked = root / "src" / version
    if read_meta(unpacked) is None:
        with exclusive(unpacked, "the llama.cpp build cache"):
            if read_meta(unpacked) is None:  # not unpacked by a process this one waited for
                _unpack_release(version, root, unpacked, python)
    tree = find_source(unpacked)
    return SourceTree(tree.llama_cpp, tree.bindings, version, f"llama-cpp-python=={version}")


def _unpack_release(version: str, root: Path, unpacked: Path, python: str | None) -> None:
    """:func:`release_source`'s download and unpacking, under its lock."""
    sdist_dir = root / "sdist"
    sdist = sdist_dir / f"llama_cpp_python-{version}.tar.gz"
    tools_sdist = llama_tools_cache() / "sdist" / sdist.name  # make tools downloads the installed release's
    if not sdist.is_file() and tools_sdist.is_file():
        sdist = tools_sdist
    if not sdist.is_file():
        sdist_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([python or sys.executable, "-m", "pip", "download", "--quiet", "--no-binary",
                               ":all:", "--no-deps", f"llama-cpp-python=={version}", "-d", str(sdist_dir)],
                              capture_output=True, text=True, errors="replace")
        if proc.returncode != 0 or not sdist.is_file():
            said = " ".join((proc.stderr or proc.stdout).split())[-300:]
            raise InputError(f"could not download the llama-cpp-python {version} sources: {said}")
    with building(unpacked, f".src-{version}-", "the llama.cpp build cache") as tmp:
        with tarfile.open(sdist) as tar:
            prefix = f"llama_cpp_python-{version}/"
            members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
            for member in members:
                member.name = member.name[len(prefix):]
            tar.extractall(tmp, members=[m for m in members if m.name], filter="data")
        publish(tmp, unpacked, {"llama-cpp-python": version, "sdist": str(sdist)})


def _files(folder: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("build"))
        out.extend(Path(dirpath) / name for name in sorted(filenames)
                   if not name.endswith(".pyc") and name != ".git")  # a submodule's pointer file
    return out


def source_digest(tree: SourceTree) -> str:
    """SHA-256 (hex) over every source file's relative path and bytes, the llama.cpp tree and the bindings.

    Folders named ``build*``, ``.git``, ``__pycache__`` and ``node_modules`` and a ``.git`` file (a submodule's
    pointer) are left out: a build inside the tree does not change the key, and a checkout of the same files in
    a repository has the key of the unpacked release.
    """
    digest = hashlib.sha256()
    for label, folder in (("llama.cpp", tree.llama_cpp), ("bindings", tree.bindings)):
        if folder is None:
            continue
        for path in _files(folder):
            digest.update(f"{label}/{path.relative_to(folder).as_posix()}\0".encode())
            with open(path, "rb") as handle:
                digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def _compiler_line() -> str:
    try:
        out = subprocess.run([os.environ.get("CXX") or "c++", "--version"], capture_output=True, text=True)
        return out.stdout.splitlines()[0] if out.stdout else ""
    except OSError:
        return ""


def build_key(digest: str, flags: Sequence[str], compiler: str) -> str:
    """12 hex digits of SHA-256 over the source digest, the flags (in order) and the compiler's version line."""
    text = "\n".join([digest, *BASE_FLAGS, *flags, compiler])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def normalize_flags(flags: Sequence[str]) -> list[str]:
    """``-D NAME=VALUE`` / ``NAME=VALUE`` / ``-DNAME=VALUE`` as ``-DNAME=VALUE``.

    Raises:
        InputError: a flag that is not ``NAME=VALUE``.
    """
    out = []
    for flag in flags:
        text = flag[2:] if flag.startswith("-D") else flag
        name, sep, value = text.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(:[A-Z]+)?", name):
            raise InputError(f"bad CMake flag {flag!r}: expected NAME=VALUE, e.g. -D GGML_NATIVE=OFF")
        out.append(f"-D{name}={value}")
    return out


def build_library(tree: SourceTree, flags: Sequence[str] = (), *, jobs: int | None = None,
                  on_progress: OnProgress | None = None, on_wait: Callable[[], None] | None = None) -> BuildResult:
    """The library folder of ``tree`` built with ``flags``: from the cache, else built now and cached.

    Args:
        tree: the sources (:func:`find_source`, :func:`release_source`).
        flags: CMake flags added after :data:`BASE_FLAGS` (``-DGGML_NATIVE=OFF``; see :func:`normalize_flags`).
        jobs: parallel compile jobs (default: the CPUs).
        on_progress: called with (steps done, steps in all, the step's line) as the build tool reports them.
        on_wait: called once when another process is building the same key: this one waits for it
            (:func:`~logitlab.engines.build_cache.exclusive`) and then returns its folder, cached.

    Raises:
        InputError: a malformed flag.
        EngineError: CMake or the compiler failed (the message ends with the log's last lines and names the log),
            or the build made no ``libllama``; a cache folder that cannot be written.
    """
    flags = normalize_flags(flags)
    digest = source_digest(tree)
    compiler = _compiler_line()
    key = build_key(digest, flags, compiler)
    folder = builds_root() / key
    meta = read_meta(folder)
    if meta is not None and (folder / "lib" / "libllama.so").exists():
        return BuildResult(folder, key, True, 0.0, meta)
    waited = []

    def waiting() -> None:
        waited.append(True)
        if on_wait is not None:
            on_wait()

    with exclusive(folder, "the llama.cpp build cache", waiting):
        meta = read_meta(folder)  # built by the process this one waited for
        if meta is not None and (folder / "lib" / "libllama.so").exists():
            return BuildResult(folder, key, True, 0.0, meta, waited=bool(waited))
        return _build(tree, flags, digest, compiler, key, folder, jobs, on_progress)


def _build(tree: SourceTree, flags: list[str], digest: str, compiler: str, key: str, folder: Path,
           jobs: int | None, on_progress: OnProgress | None) -> BuildResult:
    """:func:`build_library`'s build itself, under its lock: configure, compile, copy the libraries, publish."""
    start = time.monotonic()
    with building(folder, f".build-{key}-", "the llama.cpp build cache") as tmp:
        log_path = Path(tempfile.gettempdir()) / f"logitlab-build-{key}.log"
        build_dir = tmp / "cmake-build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        with open(log_path, "wb") as log:
            _step(["cmake", "-S", str(tree.llama_cpp), "-B", str(build_dir), *generator, *BASE_FLAGS, *flags],
                  log, log_path, "cmake configure", None)
            _step(["cmake", "--build", str(build_dir), "--config", "Release", "-j", str(jobs or os.cpu_count() or 1),
                   "--target", TARGET], log, log_path, "cmake build", on_progress)
        lib = tmp / "lib"
        lib.mkdir()
        for produced in sorted(build_dir.rglob("lib*.so*")):
            if produced.parent.name != "CMakeFiles" and not (lib / produced.name).exists():
                shutil.copy2(produced, lib / produced.name, follow_symlinks=False)
        if not (lib / "libllama.so").exists():
            raise EngineError(f"the build of {tree.origin} made no libllama.so (log: {log_path})")
        shutil.rmtree(build_dir)
        if tree.bindings is not None:
            shutil.copytree(tree.bindings, tmp / "python" / "llama_cpp",
                            ignore=shutil.ignore_patterns("__pycache__", "lib"))
        meta = {"kind": "llama.cpp library", "source": tree.origin, "llama_cpp_tree": str(tree.llama_cpp),
                "llama-cpp-python": tree.release, "bindings": tree.bindings is not None, "source_sha256": digest,
                "flags": [*BASE_FLAGS, *flags], "compiler": compiler, "key": key,
                "built_s": round(time.monotonic() - start, 1)}
        publish(tmp, folder, meta)
    log_path.unlink(missing_ok=True)
    return BuildResult(folder, key, False, time.monotonic() - start, read_meta(folder) or meta)


def _end_step(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """End a build step started in a session of its own: SIGTERM to the session, SIGKILL after ``grace`` s.

    SIGTERM first, not SIGKILL: ninja starts each compile job in a process group of its own, which a signal to
    the step's group does not reach; on SIGTERM ninja ends them itself (make's jobs stay in its group).
    Killed outright, it would leave them compiling into a folder already removed.
    """
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def _step(cmd: list[str], log, log_path: Path, what: str, on_progress: OnProgress | None) -> None:
    """Run one build step, its output into ``log``; progress lines (``[n/N] ...``) to ``on_progress``.

    The step runs in a session of its own, ended with its compile jobs on Ctrl-C or any error here
    (:func:`_end_step`), also when the SIGINT reached this process alone (``kill -INT``).
    """
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        raise EngineError(f"{what} could not start ({exc}): is cmake installed?") from exc
    try:
        for line in proc.stdout:
            log.write(line)
            found = _NINJA_STEP.match(line)
            if found and on_progress is not None:
                on_progress(int(found.group(1)), int(found.group(2)), line.decode(errors="replace").strip())
        code = proc.wait()
    except BaseException:
        _end_step(proc)
        raise
    if code != 0:
        log.flush()
        tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-5:])[-600:]
        raise EngineError(f"{what} failed (exit {code}; log: {log_path}): {tail}")
