"""What each registered engine needs, and whether this installation has it (``logitlab doctor``).

For every engine of the registry (and every third-party engine of the
``logitlab.engines`` entry point): its adapter imports or not, the Python
libraries it drives (distribution, version, whether the import works and, if
not, why), the abilities it declares, and what the library says about the
machine where that is cheap to ask — llama.cpp's system-info line (the CPU
features and backends the build uses), its GPU offload support, the CPU's
instruction-set classes and whether weight repacking is active for the
embedded model (a load of it, no evaluation: about a second); torch's
version, threads and devices; ONNX Runtime's execution providers.

Importing a library can take seconds (torch); nothing here runs at import time.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass, field
from typing import Callable

from logitlab.engines import ALIASES, ENGINES, _load_entry_points

__all__ = ["LIBRARIES", "EXTRAS", "LibraryStatus", "EngineStatus", "library_status", "engine_inventory"]

#: Engine -> the libraries its adapter drives, as (distribution, import name); the first one is the engine itself.
LIBRARIES: dict[str, tuple[tuple[str, str], ...]] = {
    "llamacpp": (("llama-cpp-python", "llama_cpp"),),
    "hf": (("torch", "torch"), ("transformers", "transformers"), ("gguf", "gguf"), ("accelerate", "accelerate")),
    "ortgenai": (("onnxruntime-genai", "onnxruntime_genai"), ("onnxruntime", "onnxruntime")),
    "openai": (),  # an HTTP client of the standard library
    "cmd": (),  # runs a command
}
#: Engine -> the pip extra of logitlab that installs its libraries.
EXTRAS: dict[str, str] = {"llamacpp": "llamacpp", "hf": "hf", "ortgenai": "ortgenai", "openai": "server"}


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


def _llamacpp_details() -> dict[str, str]:
    import llama_cpp

    details = {"system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()}
    for label, name in (("gpu_offload", "llama_supports_gpu_offload"), ("max_devices", "llama_max_devices")):
        func = getattr(llama_cpp, name, None)
        if callable(func):
            details[label] = str(func())
    from logitlab.engines.llamacpp_repack import describe_machine
    from logitlab.errors import LogitlabError
    from logitlab.models import default_model_path

    try:
        model: str | None = str(default_model_path())
    except LogitlabError:
        model = None
    details.update(describe_machine(model))
    return details


def _torch_details() -> dict[str, str]:
    import torch

    details = {"torch": f"{torch.__version__} (CUDA build {torch.version.cuda or 'none'}), "
                        f"{torch.get_num_threads()} threads"}
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i} {torch.cuda.get_device_name(i)} (sm{''.join(map(str, torch.cuda.get_device_capability(i)))})"
                    for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    details["devices"] = ", ".join(devices)
    return details


def _ort_details() -> dict[str, str]:
    import onnxruntime

    return {"providers": ", ".join(onnxruntime.get_available_providers())}


#: Engine -> what its library tells about this machine (called only when the libraries import).
_DETAILS: dict[str, Callable[[], dict[str, str]]] = {
    "llamacpp": _llamacpp_details, "hf": _torch_details, "ortgenai": _ort_details,
}


def _engine_status(name: str, target: str) -> EngineStatus:
    aliases = tuple(sorted(a for a, n in ALIASES.items() if n == name))
    libraries = tuple(library_status(dist, module) for dist, module in LIBRARIES.get(name, ()))
    module_name, class_name = target.split(":")
    abilities: tuple[str, ...] = ()
    error = None
    try:
        adapter = getattr(importlib.import_module(module_name), class_name)
        abilities = tuple(sorted(getattr(adapter, "ABILITIES", ())))
    except Exception as exc:  # noqa: BLE001 - a third-party adapter may raise anything on import
        error = _error_text(exc)
    ready = error is None and all(lib.imports for lib in libraries)
    details: dict[str, str] = {}
    if ready and name in _DETAILS:
        try:
            details = _DETAILS[name]()
        except Exception as exc:  # noqa: BLE001 - a library that imports but cannot answer is a finding
            details = {"error": _error_text(exc)}
    return EngineStatus(name=name, aliases=aliases, target=target, ready=ready, abilities=abilities,
                        libraries=libraries, extra=EXTRAS.get(name), details=details, error=error)


def engine_inventory(names: list[str] | None = None) -> list[EngineStatus]:
    """The status of every registered engine (or of ``names``), in registry order.

    Imports each adapter and its libraries (torch takes seconds); loads the embedded model once for llama.cpp (its weight repacking), evaluates nothing.
    """
    _load_entry_points()
    chosen = [n for n in ENGINES if names is None or n in names]
    return [_engine_status(name, ENGINES[name]) for name in chosen]

