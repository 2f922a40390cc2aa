"""Benchmark: how many run-sized logit arrays each command holds at its peak (F of experiments/memory.py).

Run:  PYTHONPATH=src python benchmarks/bench_memory_footprint.py [--long 1000] [--commands ab verify ...]

Each command runs twice on the embedded model (llama.cpp, 49,152 vocabulary): on a short prompt (~70 tokens)
and on a long one (``--long`` tokens, ``n_ctx=2048``), both with 16 decode tokens. While it runs, the summed
proportional set size (PSS, ``/proc/PID/smaps_rollup``) of the command and every process it started (the
supervised engine workers, whose shared logits buffer in ``/dev/shm`` is counted once) is sampled every 0.1 s.
``/usr/bin/time`` would report the largest single process instead, not the sum. F is the difference of the two
peaks over the difference of one run's logits (positions × 49,152 × 4 bytes):

    F = (peak_long - peak_short) / ((N_long - N_short) × V × 4)

The positions come from the embedded tokenizer. A busy machine changes the wall times, not the peaks.
Not here: ``invariance prefill-decode`` (a prefill per position: a 1,000-token prompt takes hours on 2 cores;
its F was measured on 17- and 135-token prompts) and ``golden check`` (measured on the goldens that
``golden record`` wrote here, by hand).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
sys.path.insert(0, SRC)

#: command -> (its words, the option that sets n_ctx to KEY=VALUE, extra options)
COMMANDS = {
    "ab": (["ab", "--repeats", "2", "--warmup", "1"], "--control"),
    "ab --positions last": (["ab", "--repeats", "2", "--warmup", "1", "--positions", "last"], "--control"),
    "verify": (["verify", "--k", "1", "4", "--no-detection-limit"], "--options"),
    "explain": (["explain", "--candidate", "flash_attn=1,n_ctx=2048", "--no-dump"], "--control"),
    "golden record": (["golden", "record"], "--variant"),
    "golden record --store topk": (["golden", "record", "--store", "topk:64"], "--variant"),
    "invariance determinism": (["invariance", "determinism", "--runs", "3", "--no-detection-limit"], "--variant"),
    "invariance batch": (["invariance", "batch", "--batch", "1", "4", "--no-detection-limit"], "--variant"),
}


def _tree(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    out, i = [root], 0
    while i < len(out):
        out += kids.get(out[i], [])
        i += 1
    return out


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0


def peak_pss(argv: list[str], cwd: str) -> tuple[int, float, int]:
    """(peak summed PSS in bytes, wall seconds, exit status) of ``argv`` and its descendants."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, sum(_pss(p) for p in _tree(proc.pid)))
        time.sleep(0.1)
    return peak, time.perf_counter() - start, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", type=int, default=1000, help="tokens of the long prompt")
    parser.add_argument("--commands", nargs="*", default=list(COMMANDS), choices=list(COMMANDS))
    args = parser.parse_args()

    from logitlab.engines.tokenizers import GgufTokenizer
    from logitlab.experiments.prompts import DEFAULT_PROMPT
    from logitlab.models import default_model_path

    tokenizer = GgufTokenizer(default_model_path())
    vocab = tokenizer.n_vocab
    short = DEFAULT_PROMPT[:300]
    text, chapter = "", 0
    while len(tokenizer.tokenize(text)) < args.long:
        chapter += 1
        text += f" Chapter {chapter}. {DEFAULT_PROMPT}"
    decode = 16
    n_short, n_long = len(tokenizer.tokenize(short)) + decode, len(tokenizer.tokenize(text)) + decode
    run_delta = (n_long - n_short) * vocab * 4
    print(f"positions {n_short} vs {n_long} × vocab {vocab}: one run's logits {n_short * vocab * 4 / 1e9:.3f} vs "
          f"{n_long * vocab * 4 / 1e9:.3f} GB")
    env_python = [sys.executable, "-m", "logitlab"]
    with tempfile.TemporaryDirectory() as work:
        Path(work, "long.txt").write_text(text)
        for name in args.commands:
            words, ctx_option = COMMANDS[name]
            peaks = []
            for label, prompt in (("short", ["--prompt", short]), ("long", ["--prompt-file", "long.txt"])):
                # each golden command its own folders (a second record into the first's folder is refused: exit 2)
                extra = ["-o", f"{name.replace(' ', '_')}-{label}"] if name.startswith("golden record") else []
                ctx = [] if label == "short" else [ctx_option, "n_ctx=2048"]
                words_now = [w.replace(",n_ctx=2048", "") for w in words] if label == "short" else words
                argv = [*env_python, *words_now, *prompt, "--tokens", str(decode), *ctx, *extra, "--quiet"]
                if name == "invariance batch":
                    argv.remove("--tokens")
                    argv.remove(str(decode))
                peak, wall, code = peak_pss(argv, work)
                peaks.append(peak)
                print(f"  {name:24s} {label:5s} rc={code} wall {wall:6.1f} s  peak PSS {peak / 1e9:.3f} GB", flush=True)
            print(f"{name:26s} F = {(peaks[1] - peaks[0]) / run_delta:.2f}", flush=True)


if __name__ == "__main__":
    main()
