"""Device keys (logitlab.device): stable, named after the processor, split only by kernel-relevant flags."""

from logitlab.device import Device, device_info, kernel_flags, slug


def test_slug_keeps_the_model_and_drops_the_noise():
    assert slug("Intel(R) Xeon(R) Platinum 8488C CPU @ 2.40GHz") == "intel-xeon-platinum-8488c"
    assert slug("AMD EPYC 7B13 64-Core Processor") == "amd-epyc-7b13-64-core-processor"
    assert slug("NVIDIA H200") == "nvidia-h200"
    assert slug("") == "unknown"


def test_kernel_flags_keep_simd_fma_and_matrix_extensions_only():
    x86 = ["fpu", "sse2", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "smep", "hypervisor", "md_clear", "f16c"]
    assert kernel_flags(x86, "x86_64") == ("amx_tile", "avx2", "avx512_bf16", "avx512f", "f16c", "fma", "sse2")
    arm = ["fp", "asimd", "asimddp", "sve", "sve2", "i8mm", "bf16", "cpuid", "atomics", "sme"]
    assert kernel_flags(arm, "aarch64") == ("asimd", "asimddp", "bf16", "fp", "i8mm", "sme", "sve", "sve2")


def test_cpu_device_key_is_stable_and_round_trips():
    a, b = device_info(), device_info("cpu")
    assert a == b and a.kind == "cpu" and a.key.startswith(f"cpu-{slug(a.name)}-") and len(a.key.rsplit("-", 1)[1]) == 8
    assert Device.from_dict(a.to_dict()) == a
