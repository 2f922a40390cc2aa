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

Only the standard library, :mod:`logitlab.errors` and (for the libraries' digests) :mod:`logitlab.models`
are imported here.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

from logitlab.errors import InputError

__all__ = ["TOOLS", "ENV_VAR", "BUILD_HINT", "llama_cpp_python_version", "llama_tools_cache", "llama_tools_dir",
           "llama_tool", "installed_library_sums", "built_library_sums"]

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
    llama-cpp-python version (a build is complete once its ``.stamp`` exists)
    whose library copies include, byte-identical, every library installed in
    ``llama_cpp/lib`` (:func:`installed_library_sums`; a llama-cpp-python rebuilt
    since the tools were built makes new bytes, and the tools must be built again).

    Returns
    -------
    pathlib.Path
        An existing folder.

    Raises
    ------
    InputError
        If ``$LOGITLAB_LLAMA_TOOLS`` is not a folder, or no completed build
        exists for this llama-cpp-python version, or none of them was built
        against the installed libraries; the message says how to build.
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
    installed = installed_library_sums()
    if installed:  # the build whose library copies are the bytes the engine loads, not merely the newest
        stamps = [s for s in stamps if installed <= built_library_sums(s.parent)]  # (it has libllama-common too)
        if not stamps:
            raise InputError(f"the llama.cpp tools in {root} were built against other libraries than the "
                             f"llama-cpp-python {version} installed now (it was rebuilt since): {BUILD_HINT}")
    return stamps[-1].parent / "bin"


def installed_library_sums() -> frozenset[tuple[str, str]]:
    """(SHA-256, file name) of each versioned shared library llama-cpp-python installed in ``llama_cpp/lib``
    (``lib*.so.*.*``, as the build script records them); empty where that folder is not found."""
    import importlib.util

    from logitlab.models import file_sha256

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
    return frozenset((file_sha256(str(f)), f.name) for f in lib.glob("lib*.so.*.*") if f.is_file())


def built_library_sums(folder: Path) -> frozenset[tuple[str, str]]:
    """The (SHA-256, file name) lines the build script wrote into ``folder/flags.txt`` (``sha256sum``'s
    format) for the libraries it built against; empty when there are none."""
    try:
        lines = (folder / "flags.txt").read_text().splitlines()
    except OSError:
        return frozenset()
    sums = (line.split(None, 1) for line in lines)
    return frozenset((parts[0], parts[1].strip()) for parts in sums
                     if len(parts) == 2 and len(parts[0]) == 64 and all(c in "0123456789abcdef" for c in parts[0]))


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
