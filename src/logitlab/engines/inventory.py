"""What each registered engine needs, and whether this installation has it (``logitlab doctor``).

For every engine of the registry (and every third-party engine of the
``logitlab.engines`` entry point): its adapter imports or not, the Python
libraries it drives (distribution, version, whether the import works and, if
not, why), the abilities it declares, and what the library says about the
machine where that is cheap to ask — llama.cpp's system-info line (the CPU
features and backends the build uses), its GPU offload support, the CPU's
instruction-set classes and whether weight repacking is active for the
embedded model (a load of it, no evaluation: about a second); torch's
version, threads and devices; ONNX Runtime's execution providers. Those facts
are the adapter's (:class:`~logitlab.engines.base.Engine`'s ``LIBRARIES``,
``EXTRA`` and ``library_details``), so that a new engine brings its own.

Importing a library can take seconds (torch); nothing here runs at import time.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass, field

from logitlab.engines import ALIASES, ENGINES, _load_entry_points

__all__ = ["LibraryStatus", "EngineStatus", "library_status", "engine_inventory"]


@dataclass(frozen=True)
class LibraryStatus:
    """One Python library: installed (``version``), and whether ``import`` works (``error`` says why not).

    Attributes:
        distribution: the name pip knows (``llama-cpp-python``).
        module: the import name (``llama_cpp``).
        version: the installed distribution's version, None when not installed.
        imports: ``import module`` worked in this process.
        error: the exception of a failed import (``ModuleNotFoundError: ...``), else None.
    """

    distribution: str
    module: str
    version: str | None = None
    imports: bool = False
    error: str | None = None


@dataclass(frozen=True)
class EngineStatus:
    """One engine of the registry on this installation.

    Attributes:
        name: the canonical engine name (``--engine NAME``).
        aliases: other names for it.
        target: the adapter, ``"module:Class"``.
        ready: the adapter and every library import.
        abilities: what the adapter declares (``Engine.ABILITIES``), empty when it does not import.
        libraries: the libraries it drives.
        extra: ``pip install 'logitlab[EXTRA]'`` installs them (None: nothing to install, or third party).
        details: facts the library gives cheaply, as labelled lines (``system_info``, ``devices``, ...).
        error: why the adapter does not import, else None.
    """

    name: str
    aliases: tuple[str, ...]
    target: str
    ready: bool
    abilities: tuple[str, ...] = ()
    libraries: tuple[LibraryStatus, ...] = ()
    extra: str | None = None
    details: dict[str, str] = field(default_factory=dict)
    error: str | None = None


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]


def library_status(distribution: str, module: str, *, try_import: bool = True) -> LibraryStatus:
    """Version and importability of one library (``try_import=False``: only whether it is installed)."""
    try:
        version: str | None = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        version = None
    if not try_import:
        return LibraryStatus(distribution, module, version, imports=version is not None)
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - a broken install raises anything (OSError of a missing .so, ...)
        return LibraryStatus(distribution, module, version, imports=False, error=_error_text(exc))
    return LibraryStatus(distribution, module, version, imports=True)


def _engine_status(name: str, target: str) -> EngineStatus:
    """One engine's status; its libraries, extra and details are the adapter class's (``LIBRARIES``, ``EXTRA``,
    ``library_details``: :class:`~logitlab.engines.base.Engine`), read without importing the libraries first."""
    aliases = tuple(sorted(a for a, n in ALIASES.items() if n == name))
    module_name, class_name = target.split(":")
    adapter = None
    error = None
    try:
        adapter = getattr(importlib.import_module(module_name), class_name)
    except Exception as exc:  # noqa: BLE001 - a third-party adapter may raise anything on import
        error = _error_text(exc)
    abilities = tuple(sorted(getattr(adapter, "ABILITIES", ())))
    libraries = tuple(library_status(dist, module) for dist, module in getattr(adapter, "LIBRARIES", ()))
    ready = error is None and all(lib.imports for lib in libraries)
    details: dict[str, str] = {}
    if ready and hasattr(adapter, "library_details"):
        try:
            details = adapter.library_details()
        except Exception as exc:  # noqa: BLE001 - a library that imports but cannot answer is a finding
            details = {"error": _error_text(exc)}
    return EngineStatus(name=name, aliases=aliases, target=target, ready=ready, abilities=abilities,
                        libraries=libraries, extra=getattr(adapter, "EXTRA", None), details=details, error=error)


def engine_inventory(names: list[str] | None = None) -> list[EngineStatus]:
    """The status of every registered engine (or of ``names``), in registry order.

    Imports each adapter and its libraries (torch takes seconds); loads the embedded model once for llama.cpp (its weight repacking), evaluates nothing.
    """
    _load_entry_points()
    chosen = [n for n in ENGINES if names is None or n in names]
    return [_engine_status(name, ENGINES[name]) for name in chosen]

