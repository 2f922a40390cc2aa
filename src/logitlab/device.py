"""The device key: which processor computed a set of logits, as a short stable name.

Bits of a floating-point result depend on the instructions the kernels ran
(AVX-512 or AVX2 dot products, FMA contraction, tensor cores), so a golden
recorded on one machine is bit-exact only on a machine of the same kind.
:func:`device_info` describes the device that computes; its ``key``
(``cpu-intel-xeon-processor-3f9a1c2e``, ``cuda-nvidia-h200-sm90-5e0b7d11``)
names it: the model name, and a hash of everything that can change the
kernels' bits — for a CPU its architecture and the instruction-set flags
that numeric kernels use (the SIMD, FMA and matrix extensions, read from
``/proc/cpuinfo``; other flags, e.g. security mitigations a hypervisor shows
or hides, are left out so that they cannot split a key), for a GPU its
compute capability and driver version.

Only the standard library (and torch, when a GPU is asked for) is used.
"""

from __future__ import annotations

import hashlib
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from logitlab.errors import InputError

__all__ = ["Device", "available_memory", "device_info", "cpu_flags", "kernel_flags", "isa_classes", "ISA_CLASSES", "slug"]

#: Instruction-set flags (``/proc/cpuinfo``: x86 ``flags``, Arm ``Features``) that numeric kernels use.
_X86_FLAGS = re.compile(r"^(sse\w*|ssse3|avx\w*|fma\w*|f16c|bmi\d|amx\w*|popcnt|gfni|vaes|vpclmulqdq|aes|sha_ni"
                        r"|movbe|abm)$")
_ARM_FLAGS = re.compile(r"^(fp|fphp|asimd\w*|sve\w*|sme\w*|i8mm|bf16|dotprod|neon|vfp\w*)$")

#: The instruction-set classes that choose llama.cpp's CPU kernels (``ggml-cpu``: its AVX2, AVX-512, VNNI, BF16 and
#: AMX paths; Arm's dot-product, i8mm and SVE paths), as (label, the ``/proc/cpuinfo`` flag that shows it).
ISA_CLASSES = (("AVX2", "avx2"), ("AVX-VNNI", "avx_vnni"), ("AVX-512", "avx512f"), ("AVX-512 VNNI", "avx512_vnni"),
               ("AVX-512 BF16", "avx512_bf16"), ("AVX-512 FP16", "avx512_fp16"), ("AMX-INT8", "amx_int8"),
               ("AMX-BF16", "amx_bf16"), ("NEON", "asimd"), ("DOTPROD", "asimddp"), ("I8MM", "i8mm"), ("SVE", "sve"))


@dataclass(frozen=True)
class Device:
    """The processor that computed a run's logits.

    Attributes:
        key: the short stable name (folder name of a golden): ``<kind>-<model slug>-<8 hex of the details>``.
        kind: ``"cpu"`` or ``"cuda"`` (another GPU: torch's device type).
        name: CPU model name or GPU name.
        arch: machine architecture (``x86_64``, ``aarch64``).
        flags: the kernel-relevant instruction-set flags (CPU), sorted.
        capability: GPU compute capability (``"9.0"``), else None.
        driver: GPU driver version, else None.
        details: what else was recorded (GPU memory, CUDA runtime version); not part of the key.
    """

    key: str
    kind: str
    name: str
    arch: str
    flags: tuple[str, ...] = ()
    capability: str | None = None
    driver: str | None = None
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["flags"] = list(self.flags)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Device":
        """Rebuild from :meth:`to_dict`.

        Raises:
            InputError: a missing field.
        """
        try:
            return cls(key=str(data["key"]), kind=str(data["kind"]), name=str(data["name"]), arch=str(data["arch"]),
                       flags=tuple(data.get("flags") or ()), capability=data.get("capability"),
                       driver=data.get("driver"), details=dict(data.get("details") or {}))
        except (KeyError, TypeError) as exc:
            raise InputError(f"device description lacks {exc}") from None


def slug(text: str, limit: int = 40) -> str:
    """``"Intel(R) Xeon(R) Platinum 8488C CPU @ 2.40GHz"`` → ``"intel-xeon-platinum-8488c"``."""
    text = re.sub(r"\((r|tm|c)\)", "", text, flags=re.I)
    text = re.sub(r"@.*$", "", text)
    text = re.sub(r"\bcpu\b", "", text, flags=re.I)
    text = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return text[:limit].rstrip("-") or "unknown"


def _cpuinfo() -> dict[str, str]:
    """The first value of each field of ``/proc/cpuinfo`` (empty off Linux)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() and key.strip() not in fields:
                    fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_flags() -> list[str]:
    """Every instruction-set flag the CPU reports (``/proc/cpuinfo`` ``flags`` or ``Features``), sorted."""
    info = _cpuinfo()
    return sorted(set((info.get("flags") or info.get("Features") or "").split()))


def kernel_flags(flags: list[str] | tuple[str, ...], arch: str | None = None) -> tuple[str, ...]:
    """The flags that numeric kernels use (SIMD, FMA, matrix extensions), sorted; ``arch`` default: this machine's."""
    arch = (arch or platform.machine()).lower()
    pattern = _ARM_FLAGS if arch.startswith(("arm", "aarch")) else _X86_FLAGS
    return tuple(sorted(f for f in flags if pattern.match(f)))


def isa_classes(flags: list[str] | tuple[str, ...] | None = None) -> list[str]:
    """The :data:`ISA_CLASSES` a CPU has, in that order (``flags`` default: this CPU's), e.g.
    ``["AVX2", "AVX-512", "AVX-512 VNNI", "AVX-512 BF16"]``; ``[]`` where ``/proc/cpuinfo`` cannot be read."""
    have = set(cpu_flags() if flags is None else flags)
    return [label for label, flag in ISA_CLASSES if flag in have]


def _cpu_name(info: dict[str, str]) -> str:
    for key in ("model name", "Processor", "cpu model", "Model"):
        if info.get(key):
            return info[key]
    if info.get("CPU implementer"):  # Arm without a model name: implementer and part
        return f"arm-{info['CPU implementer']}-{info.get('CPU part', '?')}"
    return platform.processor() or platform.machine() or "unknown"


def _hash(*parts: Any) -> str:
    return hashlib.sha256("\n".join(map(str, parts)).encode()).hexdigest()[:8]


def _nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else None


def _gpu(device: str) -> Device:
    try:
        import torch
    except ImportError:
        raise InputError(f"the engine runs on {device!r} but torch is not installed to describe it") from None
    kind = device.split(":", 1)[0]
    if kind != "cuda" or not torch.cuda.is_available():
        return Device(key=f"{kind}-{_hash(kind, platform.machine())}", kind=kind, name=kind, arch=platform.machine())
    index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    capability = f"{props.major}.{props.minor}"
    driver = _nvidia_driver()
    key = f"cuda-{slug(props.name)}-sm{props.major}{props.minor}-{_hash(props.name, capability, driver)}"
    return Device(key=key, kind="cuda", name=props.name, arch=platform.machine(), capability=capability, driver=driver,
                  details={"memory_bytes": int(props.total_memory), "cuda_runtime": torch.version.cuda})


def device_info(device: str = "cpu") -> Device:
    """Describe the device named ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``; the engine's device).

    Returns:
        A :class:`Device`; for the CPU its key hashes the architecture, the
        model name and :func:`kernel_flags`; for a CUDA GPU (through torch)
        the name, compute capability and driver version (``nvidia-smi``).

    Raises:
        InputError: a GPU was asked for and torch is not installed.
    """
    if device and device.split(":", 1)[0] != "cpu":
        return _gpu(device)
    info = _cpuinfo()
    name = _cpu_name(info)
    arch = platform.machine()
    flags = kernel_flags(cpu_flags(), arch)
    return Device(key=f"cpu-{slug(name)}-{_hash(arch, name, ' '.join(flags))}", kind="cpu", name=name, arch=arch,
                  flags=flags)


def available_memory(meminfo: str = "/proc/meminfo") -> int | None:
    """The memory this machine can give a new workload without swapping, in bytes: Linux's ``MemAvailable``
    (free memory plus the page cache and reclaimable slabs it can drop; ``proc(5)``). None where it cannot be
    read (not Linux, a kernel before 3.14).
    """
    try:
        with open(meminfo, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
