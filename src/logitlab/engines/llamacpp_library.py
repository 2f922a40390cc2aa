"""Which llama.cpp library a llamacpp engine loads, and the identity of the one it loaded.

llama-cpp-python loads its shared library once, when ``llama_cpp`` is imported (from
``$LLAMA_CPP_LIB_PATH``, else its own ``llama_cpp/lib``), so a process holds one build. The engine's
``lib=DIR`` option names another build: a library folder of ``logitlab build llamacpp``
(:mod:`logitlab.engines.llamacpp_build`: ``DIR/lib`` and, built from a llama-cpp-python release,
``DIR/python/llama_cpp``, the bindings of that release) or any folder holding ``libllama.so`` and its ggml
libraries (loaded with the installed bindings). :func:`importing` imports ``llama_cpp`` for that library in a
process that has not imported it yet (a supervised engine's worker: every variant has its own); a process that
already loaded another library refuses (:func:`check_loaded`) instead of running the wrong one.

A library whose C API the bindings do not match lacks a function they declare: importing them fails with
``undefined symbol``, which :func:`importing` reports in one line before any run. A change of a struct's layout
with no function added or removed cannot be seen before a run; a crash of such a run is reported as a crash.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from logitlab.errors import EngineError

__all__ = ["LibraryFolder", "library_folder", "importing", "check_loaded", "loaded_library", "library_identity"]

_ENV = "LLAMA_CPP_LIB_PATH"


@dataclass(frozen=True)
class LibraryFolder:
    """A llama.cpp build to load.

    Attributes:
        path: the folder the user named (absolute).
        lib_dir: the folder holding ``libllama.so`` (``path/lib`` or ``path``).
        bindings: the folder to put first on ``sys.path`` (holds ``llama_cpp/``), or None: the installed bindings.
    """

    path: Path
    lib_dir: Path
    bindings: Path | None


def library_folder(value: Any) -> str:
    """The ``lib`` option's converter: an existing folder holding ``libllama.so`` (or ``lib/libllama.so``), as an
    absolute path.

    Raises:
        ValueError: no such folder, or no ``libllama.so`` in it (the message says how to build one).
    """
    path = Path(str(value)).expanduser().resolve()
    if not path.is_dir():
        raise ValueError(f"{value} is not a folder (build one: logitlab build llamacpp SRC -o {value})")
    resolve(str(path))
    return str(path)


def resolve(path: str) -> LibraryFolder:
    """The :class:`LibraryFolder` at ``path`` (absolute).

    Raises:
        ValueError: no ``libllama.so`` in ``path`` or ``path/lib``.
    """
    root = Path(path)
    for lib_dir in (root / "lib", root):
        if (lib_dir / "libllama.so").exists():
            bindings = root / "python"
            return LibraryFolder(root, lib_dir, bindings if (bindings / "llama_cpp" / "llama_cpp.py").is_file()
                                 else None)
    raise ValueError(f"no libllama.so in {root} nor {root / 'lib'} (a folder of `logitlab build llamacpp` "
                     "or a llama.cpp build's folder of shared libraries)")


def loaded_library() -> Path | None:
    """The folder the imported ``llama_cpp`` loaded ``libllama.so`` from; None when it is not imported."""
    module = sys.modules.get("llama_cpp.llama_cpp")
    base = getattr(module, "_base_path", None)
    return Path(base).resolve() if base is not None else None


def check_loaded(folder: LibraryFolder | None) -> None:
    """Raise unless the library this process loaded is ``folder``'s (None: llama-cpp-python's own).

    Raises:
        EngineError: this process already loaded another library (one build per process).
    """
    loaded = loaded_library()
    if loaded is None:
        return
    module = sys.modules["llama_cpp"]
    wanted = folder.lib_dir.resolve() if folder else Path(os.environ.get(_ENV) or
                                                           Path(module.__file__).parent / "lib").resolve()
    bindings_ok = folder is None or folder.bindings is None or \
        Path(module.__file__).resolve().parent == (folder.bindings / "llama_cpp").resolve()
    if loaded != wanted or not bindings_ok:
        asked = f"lib={folder.path}" if folder else "llama-cpp-python's own library"
        raise EngineError(f"this process already loaded the llama.cpp library in {loaded}; {asked} needs a process "
                          "of its own (one build per process): run it supervised (the default of every command) "
                          "or at --isolation process")


@contextmanager
def importing(folder: LibraryFolder | None) -> Iterator[Any]:
    """``import llama_cpp`` for ``folder`` (None: as installed), yielding the module.

    In a process that has not imported ``llama_cpp`` yet, ``$LLAMA_CPP_LIB_PATH`` is set to ``folder.lib_dir``
    for the import and ``folder.bindings`` goes first on ``sys.path``.

    Raises:
        EngineError: another library is loaded already (:func:`check_loaded`); the library does not match the
            bindings' C API (a function they declare is missing: ``undefined symbol``) or cannot be loaded.
    """
    if folder is None or "llama_cpp" in sys.modules:
        check_loaded(folder)
        import llama_cpp

        yield llama_cpp
        return
    saved = os.environ.get(_ENV)
    os.environ[_ENV] = str(folder.lib_dir)
    if folder.bindings is not None:
        sys.path.insert(0, str(folder.bindings))
    try:
        import llama_cpp
    except (AttributeError, OSError, RuntimeError) as exc:
        for name in [m for m in sys.modules if m == "llama_cpp" or m.startswith("llama_cpp.")]:
            del sys.modules[name]
        bindings = "its own bindings" if folder.bindings else _installed_bindings()
        raise EngineError(f"the llama.cpp library in {folder.path} does not match {bindings}: {exc}; build it "
                          "from the llama-cpp-python release of those bindings (logitlab build llamacpp "
                          "--llama-cpp-python VERSION carries its bindings)") from None
    finally:
        if saved is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = saved
    yield llama_cpp


def _installed_bindings() -> str:
    try:
        import importlib.metadata

        return f"the installed bindings (llama-cpp-python {importlib.metadata.version('llama-cpp-python')})"
    except Exception:  # noqa: BLE001 - only a message
        return "the installed bindings"


def _c_string(lib: Any, name: str) -> str | None:
    try:
        func = getattr(lib, name)
    except AttributeError:
        return None
    func.restype, func.argtypes = ctypes.c_char_p, []
    value = func()
    return value.decode("utf-8", "replace") if value else None


def library_identity(llama_cpp: Any, folder: LibraryFolder | None) -> dict[str, Any]:
    """What a run loaded: the library folder, the SHA-256 of each shared object in it, ggml's version and commit
    (``ggml_version()`` / ``ggml_commit()``, where the library has them), the bindings and, for a folder of
    ``logitlab build llamacpp``, what built it (its ``logitlab.json``).

    Returns:
        ``{"path", "sha256": {file name: hex}, "digest", "ggml_version", "ggml_commit", "bindings",
        "bindings_version", "built"}``; ``digest`` is SHA-256 over the sorted (name, sha256) pairs.
    """
    from logitlab.engines.build_cache import read_meta
    from logitlab.models import file_sha256

    lib_dir = loaded_library() or (folder.lib_dir if folder else None)
    sums: dict[str, str] = {}
    if lib_dir is not None:
        files = [p for p in sorted(lib_dir.glob("lib*.so*")) if p.is_file() and not p.is_symlink()
                 and p.name.startswith(("libllama", "libggml"))]
        names = {p.name for p in files}
        for path in files:  # libllama.so.0.5.0 only, where libllama.so and .so.0 are copies of it
            if not any(other.startswith(path.name + ".") for other in names):
                sums[path.name] = file_sha256(str(path))
    lib = getattr(getattr(llama_cpp, "llama_cpp", None), "_lib", None)
    return {
        "path": str(lib_dir) if lib_dir else None,
        "sha256": sums,
        "digest": hashlib.sha256("".join(f"{k}\0{v}\n" for k, v in sorted(sums.items())).encode()).hexdigest(),
        "ggml_version": _c_string(lib, "ggml_version") if lib is not None else None,
        "ggml_commit": _c_string(lib, "ggml_commit") if lib is not None else None,
        "bindings": str(Path(llama_cpp.__file__).parent),
        "bindings_version": getattr(llama_cpp, "__version__", None),
        "built": read_meta(folder.path) if folder else None,
    }
