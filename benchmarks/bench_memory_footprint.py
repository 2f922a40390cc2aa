"""Benchmark: how many run-sized logit arrays each command holds at its peak (F of experiments/memory.py).

Run:  PYTHONPATH=src python benchmarks/bench_memory_footprint.py [--long 1000] [--commands ab verify ...]

Each command runs twice on the embedded model (llama.cpp, 49,152 vocabulary): on a short prompt (~70 tokens)
and on a long one (``--long`` tokens, ``n_ctx=2048``), both with 16 decode tokens. While it runs, the summed
proportional set size (PSS, ``/proc/PID/smaps_rollup``) of the command and every process it started (the
supervised engine workers, whose shared logits buffer in ``/dev/shm`` is counted once) is sampled every 0.1 s
(less often where a sample takes over 2 ms: at most 2 % of a core goes to sampling).
``/usr/bin/time`` would report the largest single process instead, not the sum. F is the difference of the two
peaks over the difference of one run's logits (positions × 49,152 × 4 bytes):

    F = (peak_long - peak_short) / ((N_long - N_short) × V × 4)

The positions come from the embedded tokenizer. A busy machine changes the wall times, and, a little, the peaks:
the shared libraries' and model file's pages are shared out among every process that maps them, other logitlab
runs included (``--made`` leaves them out).
``--short N`` makes the short prompt N tokens long too, both at ``--n-ctx``: against a ~57-token prompt at the
default n_ctx, F also counts what grows only up to llama.cpp's ``n_batch`` (512) rows per engine worker — its
output buffer and the compute graph's logits tensor, ``n_batch × V × 4`` bytes each, alive for the worker's life —
and the KV cache's n_ctx; between two prompts past ``n_batch`` at one n_ctx, F is the slope that goes on
growing with N. ``--breakdown`` prints each process's PSS at the peak.
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


#: The sampling period of :func:`peak_pss` where a sample costs under 2 ms.
SAMPLE_SECONDS = 0.1


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


#: The smaps_rollup lines of the memory the processes made (``--made``): anonymous memory and shared memory
#: (/dev/shm), without the libraries', the model file's and other files' pages (page cache the kernel can drop,
#: whose proportional share falls as other processes — other logitlab runs on the machine — map the same files).
MADE = ("Pss_Anon:", "Pss_Shmem:")


def _pss(pid: int) -> tuple[int, int]:
    """(PSS, the part of it the process made: :data:`MADE`) of ``pid``, in bytes; zeros once it is gone."""
    pss = made = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
                elif line.startswith(MADE):
                    made += int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, made


def _role(pid: int, root: int) -> str:
    """``command`` for the command's own process, ``worker PID`` for an engine worker, else ``other PID``."""
    if pid == root:
        return "command"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return f"other {pid}"
    return f"worker {pid}" if b"logitlab.engines.supervised_worker" in words else f"other {pid}"


def peak_pss(argv: list[str], cwd: str, made: bool = False) -> tuple[int, float, int, dict[str, int], int]:
    """(peak summed PSS in bytes, wall seconds, exit status, the peak's PSS per process by role, the peak of the
    summed memory made: :data:`MADE`) of ``argv`` and its descendants. ``made``: the first and fourth are of the
    memory made too."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak, parts, peak_made = 0, {}, 0
    while proc.poll() is None:
        sample = time.perf_counter()
        both = {_role(p, proc.pid): _pss(p) for p in _tree(proc.pid)}
        now = {role: values[1 if made else 0] for role, values in both.items()}
        peak_made = max(peak_made, sum(values[1] for values in both.values()))
        if sum(now.values()) > peak:
            peak, parts = sum(now.values()), now
        # Every 0.1 s, or less often where a sample is dear: reading smaps_rollup walks the page tables of every
        # mapping under the target's mmap lock — 14 ms for a 790 MB /dev/shm run file on the 2-core EPYC. Sampling
        # a supervised worker and the process that keeps its reference run every 0.1 s (24 ms a sample) slowed
        # the worker's 4k-position runs by 9.5 % and 6.3 % (two ABBA rounds against unsampled runs, 2026-12-06):
        # why ab's engine steps measured 12.6 % slower than the bare engine's in bench_scale.py (three such
        # processes) while side by side, unsampled, they measured the same (0.985). At most 2 % of a core now:
        # the peaks of these commands last for a run (seconds), not milliseconds.
        time.sleep(max(SAMPLE_SECONDS, 50 * (time.perf_counter() - sample)))
    return peak, time.perf_counter() - start, proc.returncode, parts, peak_made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", type=int, default=1000, help="tokens of the long prompt")
    parser.add_argument("--commands", nargs="*", default=list(COMMANDS), choices=list(COMMANDS))
    parser.add_argument("--short", type=int, default=None,
                        help="tokens of the short prompt (default: a ~57-token one at the default n_ctx); when given, "
                             "both prompts run at --n-ctx, so that the slope leaves out what does not grow with the "
                             "prompt past llama.cpp's n_batch (its output and compute buffers) or with n_ctx (the KV "
                             "cache)")
    parser.add_argument("--n-ctx", type=int, default=2048, help="n_ctx of the long prompt (and of --short's)")
    parser.add_argument("--made", action="store_true",
                        help="sum Pss_Anon + Pss_Shmem only: the memory the processes made, not the shared "
                             "libraries' and model file's pages (their share depends on other processes)")
    parser.add_argument("--breakdown", action="store_true",
                        help="print each process's PSS at the peak (the command, each engine worker)")
    args = parser.parse_args()

    from logitlab.engines.tokenizers import GgufTokenizer
    from logitlab.experiments.prompts import DEFAULT_PROMPT
    from logitlab.models import default_model_path

    tokenizer = GgufTokenizer(default_model_path())
    vocab = tokenizer.n_vocab
    def prompt_of(tokens: int) -> str:
        text, chapter = "", 0
        while len(tokenizer.tokenize(text)) < tokens:
            chapter += 1
            text += f" Chapter {chapter}. {DEFAULT_PROMPT}"
        return text

    short = DEFAULT_PROMPT[:300] if args.short is None else prompt_of(args.short)
    text = prompt_of(args.long)
    decode = 16
    n_short, n_long = len(tokenizer.tokenize(short)) + decode, len(tokenizer.tokenize(text)) + decode
    run_delta = (n_long - n_short) * vocab * 4
    print(f"positions {n_short} vs {n_long} × vocab {vocab}: one run's logits {n_short * vocab * 4 / 1e9:.3f} vs "
          f"{n_long * vocab * 4 / 1e9:.3f} GB")
    env_python = [sys.executable, "-m", "logitlab"]
    with tempfile.TemporaryDirectory() as work:
        Path(work, "long.txt").write_text(text)
        Path(work, "short.txt").write_text(short)
        for name in args.commands:
            words, ctx_option = COMMANDS[name]
            peaks = []
            short_prompt = ["--prompt", short] if args.short is None else ["--prompt-file", "short.txt"]
            for label, prompt in (("short", short_prompt), ("long", ["--prompt-file", "long.txt"])):
                # each golden command its own folders (a second record into the first's folder is refused: exit 2)
                extra = ["-o", f"{name.replace(' ', '_')}-{label}"] if name.startswith("golden record") else []
                plain = label == "short" and args.short is None  # the default n_ctx
                ctx = [] if plain else [ctx_option, f"n_ctx={args.n_ctx}"]
                words_now = [w.replace(",n_ctx=2048", "" if plain else f",n_ctx={args.n_ctx}") for w in words]
                argv = [*env_python, *words_now, *prompt, "--tokens", str(decode), *ctx, *extra, "--quiet"]
                if name == "invariance batch":
                    argv.remove("--tokens")
                    argv.remove(str(decode))
                peak, wall, code, parts, _ = peak_pss(argv, work, made=args.made)
                peaks.append(peak)
                print(f"  {name:24s} {label:5s} rc={code} wall {wall:6.1f} s  peak PSS {peak / 1e9:.3f} GB", flush=True)
                if args.breakdown:
                    print("      at the peak: " + ", ".join(f"{role} {pss / 1e9:.3f} GB"
                                                          for role, pss in sorted(parts.items())), flush=True)
            print(f"{name:26s} F = {(peaks[1] - peaks[0]) / run_delta:.2f}", flush=True)


if __name__ == "__main__":
    main()
