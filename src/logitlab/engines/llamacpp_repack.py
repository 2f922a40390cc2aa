"""Weight repacking in llama.cpp ("extra buffer types"): the option, its default on this machine, what a load used.

At load time llama.cpp's CPU backend may copy the weights of some quantised
types into a layout that its matrix kernels read faster — the CPU backend's
*extra buffer types* (``llama_model_params.use_extra_bufts``, default on;
``src/llama-model.cpp`` ``make_cpu_buft_list``):

- ``CPU_REPACK`` (``ggml-cpu/repack.cpp``): Q4_0, Q4_K, IQ4_NL and MXFP4 on
  AVX2, Q2_K on AVX-512 (and their Arm/RISC-V forms). Q4_1 — the embedded
  model's type — is not repacked on x86 without AMX.
- ``AMX`` (``ggml-cpu/amx/``): Q4_0, Q4_1, Q8_0 and K-quants, on CPUs with
  AMX (``amx_int8`` in ``/proc/cpuinfo``) when the library was built with it
  (``AMX_INT8 = 1`` in ``llama_print_system_info()``).

The tools spell the switch ``--no-repack`` (``llama-server``,
``llama-perplexity``: ``common/arg.cpp``, env ``LLAMA_ARG_REPACK``) and
``--repack 0|1`` (``llama-bench``).

**The known crash.** In the llama.cpp that llama-cpp-python 0.3.36 vendors,
on an AMX CPU, any batched evaluation (more than one token per
``llama_decode``) of a model repacked into the AMX buffer type segfaults in
``ggml_backend_amx_mul_mat`` (llama.cpp issue 20824; PR 16315 notes the AMX
path "produces garbage with Q4_0 and Q4_1"). Single-token decode,
``n_ubatch=1`` or ``use_extra_bufts = false`` avoid it. So the llamacpp
engine's option ``use_extra_bufts`` defaults to ``auto``: llama.cpp's own
default (on) everywhere, except where the library has the AMX path and the
CPU has AMX — there off, the path machines without AMX take. ``1`` forces
llama.cpp's default, so "repacking on vs off" stays a variant to compare.

``llama_cpp.Llama`` builds its model parameters inside ``__init__`` from
``llama_model_default_params()`` with no hook; :func:`loading` replaces that
one function of llama-cpp-python's module for the duration of the load (under
a lock, as it also routes llama.cpp's log into a list to read the buffer types
the load used from its ``load_tensors: <TYPE> model buffer size`` lines).
"""

from __future__ import annotations

import ctypes
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from logitlab.device import cpu_flags

__all__ = ["AUTO", "EXTRA_BUFFER_TYPES", "CRASH_HINT", "RepackChoice", "parse_setting", "library_has_amx",
           "cpu_has_amx", "resolve", "buffer_types", "loading", "tool_args", "default_choice", "default_tool_args", "probe",
           "describe_machine"]

#: The option's value that lets logitlab choose (see the module docstring).
AUTO = "auto"
#: Names of the CPU backend's extra buffer types (``ggml_backend_buft_name``), as the load log prints them.
EXTRA_BUFFER_TYPES = ("CPU_REPACK", "AMX", "CPU_KLEIDIAI", "CPU_RISCV64_SPACEMIT", "CPU_HBM")
#: What to do when a repacked model crashes on an AMX CPU.
CRASH_HINT = ("llama.cpp's AMX weight-repack path crashes on batched evaluation on this CPU (llama.cpp issue "
              "20824): run with use_extra_bufts=0 (the tools: --no-repack), or n_ubatch=1")

_LOAD_LINE = re.compile(r"load_tensors:\s+(\S+) model buffer size\s*=\s*([0-9.]+) MiB")
_LOCK = threading.Lock()


@dataclass(frozen=True)
class RepackChoice:
    """Whether a llama.cpp load repacks weights, and why.

    Attributes:
        setting: what was asked: ``"auto"``, ``"1"`` or ``"0"``.
        use_extra_bufts: the value passed to ``llama_model_params.use_extra_bufts``.
        reason: one line: why this value (``auto``) or that it was set.
    """

    setting: str
    use_extra_bufts: bool
    reason: str


def parse_setting(value: Any) -> str:
    """The option's value as ``"auto"``, ``"1"`` or ``"0"`` (``1/0``, ``true/false``, ``on/off``, ``auto``).

    Raises:
        ValueError: anything else (``Engine.validate_options`` names the option).
    """
    text = str(value).strip().lower()
    if text == AUTO:
        return AUTO
    if text in ("1", "true", "on", "yes"):
        return "1"
    if text in ("0", "false", "off", "no"):
        return "0"
    raise ValueError("expected auto, 1/0, true/false, on/off")


def library_has_amx(system_info: str) -> bool:
    """Whether a llama.cpp build has the AMX kernels: ``AMX_INT8 = 1`` in its ``llama_print_system_info()`` line."""
    return re.search(r"\bAMX_INT8\s*=\s*1\b", system_info) is not None


def cpu_has_amx(flags: Sequence[str] | None = None) -> bool:
    """Whether the CPU reports AMX for int8 (``amx_int8`` in ``/proc/cpuinfo``; ``flags`` default: this CPU's)."""
    return "amx_int8" in (cpu_flags() if flags is None else flags)


def resolve(setting: str, system_info: str, flags: Sequence[str] | None = None) -> RepackChoice:
    """The ``use_extra_bufts`` value for a load, from the option's :func:`parse_setting` value.

    Args:
        setting: ``"auto"``, ``"1"`` or ``"0"``.
        system_info: the library's ``llama_print_system_info()`` line.
        flags: the CPU's flags (default: this CPU's).

    Returns:
        ``auto``: off when the library and the CPU both have AMX (the known crash), else on.
    """
    if setting == "1":
        return RepackChoice(setting, True, "use_extra_bufts=1 set: llama.cpp's default, weights repacked where a kernel has a repacked form")
    if setting == "0":
        return RepackChoice(setting, False, "use_extra_bufts=0 set: weights used as stored")
    if library_has_amx(system_info) and cpu_has_amx(flags):
        return RepackChoice(AUTO, False, "auto: off, because this CPU and library have AMX, whose repack path "
                                         "crashes on batched evaluation (llama.cpp issue 20824)")
    return RepackChoice(AUTO, True, "auto: llama.cpp's default (on): no AMX repack path here")


def buffer_types(log: str) -> dict[str, float]:
    """The model buffers a load allocated, from llama.cpp's log: buffer type name → MiB, in log order.

    Reads the ``load_tensors: <TYPE> model buffer size = <X> MiB`` lines (``src/llama-model.cpp``).
    The extra buffer types among them are those named in :data:`EXTRA_BUFFER_TYPES`.
    """
    out: dict[str, float] = {}
    for name, mib in _LOAD_LINE.findall(log):
        out[name] = out.get(name, 0.0) + float(mib)
    return out


@contextmanager
def loading(use_extra_bufts: bool) -> Iterator[list[str]]:
    """Load a ``llama_cpp.Llama`` inside this block with ``use_extra_bufts`` set; yields llama.cpp's log lines.

    Replaces ``llama_cpp.llama_cpp.llama_model_default_params`` (the function ``Llama.__init__`` takes its
    model parameters from) and llama.cpp's log callback until the block ends; both are restored after,
    also on an error. Loads in other threads wait for the block (one lock).
    """
    import llama_cpp
    import llama_cpp.llama_cpp as lib
    from llama_cpp import _logger

    lines: list[str] = []

    @lib.llama_log_callback
    def collect(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        lines.append(text.decode("utf-8", "replace"))

    original = lib.llama_model_default_params

    def default_params() -> Any:
        params = original()
        params.use_extra_bufts = use_extra_bufts
        return params

    with _LOCK:
        lib.llama_model_default_params = default_params
        llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
        try:
            yield lines
        finally:
            lib.llama_model_default_params = original
            llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


def tool_args(tool: str, use_extra_bufts: bool) -> list[str]:
    """Command-line arguments that give a llama.cpp tool the same repacking as an engine load.

    ``[]`` when on (the tools' default); ``["--repack", "0"]`` for ``llama-bench``; ``["--no-repack"]``
    for the tools of ``common/arg.cpp`` (``llama-server``, ``llama-perplexity``, ...). ``llama-quantize``
    evaluates nothing: ``[]``.
    """
    name = tool.rsplit("/", 1)[-1]
    if use_extra_bufts or name == "llama-quantize":
        return []
    return ["--repack", "0"] if name == "llama-bench" else ["--no-repack"]


def default_choice() -> RepackChoice:
    """:func:`resolve` of ``auto`` on this machine, for the installed llama-cpp-python's library."""
    import llama_cpp

    return resolve(AUTO, llama_cpp.llama_print_system_info().decode("utf-8", "replace"))


def default_tool_args(tool: str) -> list[str]:
    """:func:`tool_args` for the llamacpp engine's default (``auto``) on this machine and installed library."""
    return tool_args(tool, default_choice().use_extra_bufts)


def probe(model: str, use_extra_bufts: bool = True) -> dict[str, float]:
    """Load ``model`` (a GGUF path) briefly and return its model buffers (:func:`buffer_types`); evaluates nothing.

    Loading is safe where batched evaluation of repacked weights is not (the known AMX crash is in the matmul).

    Raises:
        ValueError: llama-cpp-python could not load the file.
    """
    import llama_cpp

    with loading(use_extra_bufts) as log:
        llama = llama_cpp.Llama(model_path=model, n_ctx=32, n_batch=32, verbose=False)
    llama.close()
    return buffer_types("".join(log))


def describe_machine(model: str | None) -> dict[str, str]:
    """``logitlab doctor``'s lines on repacking: the CPU's kernel classes, and what a load of ``model`` uses.

    Returns ``{"cpu_isa": ..., "weight_repacking": ...}``; the second line says which buffer types llama.cpp's
    default (repacking on) gives ``model`` and what the engine's ``auto`` chooses here (``model`` None: only that).
    """
    import llama_cpp

    from logitlab.device import isa_classes

    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    classes = isa_classes()
    amx = (f"AMX: {'in' if cpu_has_amx() else 'not in'} this CPU, "
           f"{'in' if library_has_amx(info) else 'not in'} the library's build")
    out = {"cpu_isa": f"{', '.join(classes) or 'none of AVX2/AVX-512/AMX/NEON'}; {amx}"}
    choice = default_choice()
    line = f"engine default use_extra_bufts={AUTO}: {'on' if choice.use_extra_bufts else 'off'} ({choice.reason})"
    if model:
        try:
            buffers = probe(model, True)
        except Exception as exc:  # noqa: BLE001 - a model that does not load is a finding of doctor's
            line = f"the embedded model did not load ({type(exc).__name__}: {exc}); {line}"
        else:
            extra = [name for name in buffers if name in EXTRA_BUFFER_TYPES]
            sizes = ", ".join(f"{name} {mib:.1f} MiB" for name, mib in buffers.items())
            line = (f"embedded model with repacking on (llama.cpp's default): weights to "
                    f"{', '.join(extra) or 'no extra buffer type'} ({sizes}); {line}")
    out["weight_repacking"] = line
    return out
