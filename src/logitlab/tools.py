"""Where llama.cpp's own tools (llama-server, llama-perplexity, llama-bench, llama-quantize) live.

They are built once from the llama.cpp sources that the installed
llama-cpp-python release ships (its sdist's ``vendor/llama.cpp``), against the
shared libraries that release built and installed (libllama, libggml*,
libllama-common, libmtmd; byte-identical copies in ``lib/`` beside ``bin/``),
by ``scripts/build-llama-tools.sh`` (``make tools``), into a cache outside the
repository::

    ${XDG_CACHE_HOME:-~/.cache}/logitlab/llama-tools/<version>-<key>/bin/

where ``<key>`` hashes the CMake flags, the compiler and the SHA-256 of each of
those libraries: a tool found here runs the llamacpp engine's own kernels. Tests use them as real peers:
another engine over the same kernels, llama.cpp's own perplexity/KLD, real
llama-bench files, more quantisations of the embedded model.

Same kernels also need the same run-time options: the tools default to flash
attention ``auto`` (on, for the CPU), llama-cpp-python to off; pass ``-fa off``
to a tool whose logits must match llama-cpp-python's.

Only the standard library and :mod:`logitlab.errors` are imported here.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

from logitlab.errors import InputError

__all__ = ["TOOLS", "ENV_VAR", "BUILD_HINT", "llama_cpp_python_version", "llama_tools_cache", "llama_tools_dir",
           "llama_tool"]

#: The tools the build script makes.
TOOLS = ("llama-server", "llama-perplexity", "llama-bench", "llama-quantize")
#: A folder holding the tools' binaries; overrides the cache when set.
ENV_VAR = "LOGITLAB_LLAMA_TOOLS"
#: What to do when they are missing.
BUILD_HINT = "run scripts/build-llama-tools.sh (or: make tools)"
_STAMP = ".stamp"


def llama_cpp_python_version() -> str:
    """The version of the installed llama-cpp-python distribution, e.g. ``'0.3.36'``.

    Raises
    ------
    InputError
        If llama-cpp-python is not installed.
    """
    try:
        return importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        raise InputError("llama-cpp-python is not installed: pip install 'logitlab[llamacpp]'") from None


def llama_tools_cache() -> Path:
    """The cache root the build script writes to: ``${XDG_CACHE_HOME:-~/.cache}/logitlab/llama-tools``.

    It may not exist yet.
    """
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "logitlab" / "llama-tools"


def llama_tools_dir() -> Path:
    """The folder holding the llama.cpp tools' binaries.

    ``$LOGITLAB_LLAMA_TOOLS`` when set (any folder of binaries, e.g. your own
    llama.cpp build's ``bin/``); else, under :func:`llama_tools_cache`, the
    ``bin/`` of the most recently completed build for the installed
    llama-cpp-python version (a build is complete once its ``.stamp`` exists).

    Returns
    -------
    pathlib.Path
        An existing folder.

    Raises
    ------
    InputError
        If ``$LOGITLAB_LLAMA_TOOLS`` is not a folder, or no completed build
        exists for this llama-cpp-python version; the message says how to build.
    """
    override = os.environ.get(ENV_VAR)
    if override:
        path = Path(override).expanduser()
        if not path.is_dir():
            raise InputError(f"${ENV_VAR}={override} is not a folder: point it at a folder of llama.cpp "
                             f"binaries, or unset it and {BUILD_HINT}")
        return path
    version = llama_cpp_python_version()
    root = llama_tools_cache()
    stamps = sorted(root.glob(f"{version}-*/{_STAMP}"), key=lambda p: p.stat().st_mtime) if root.is_dir() else []
    if not stamps:
        raise InputError(f"llama.cpp tools for llama-cpp-python {version} are not built (none in {root}): "
                         f"{BUILD_HINT}")
    return stamps[-1].parent / "bin"


def llama_tool(name: str) -> Path:
    """Path of one built llama.cpp tool, e.g. ``llama_tool("llama-bench")``.

    Parameters
    ----------
    name : str
        The binary's name; the build script makes those in :data:`TOOLS`.

    Returns
    -------
    pathlib.Path
        An executable file inside :func:`llama_tools_dir`.

    Raises
    ------
    InputError
        If the tools folder cannot be found, or holds no executable ``name``.
    """
    folder = llama_tools_dir()
    path = folder / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        known = ", ".join(TOOLS)
        raise InputError(f"no llama.cpp tool {name!r} in {folder} (the build makes {known}): {BUILD_HINT}")
    return path
