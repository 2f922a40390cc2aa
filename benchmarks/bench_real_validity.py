"""Real A/A false-call rate of logitlab's speed calls on the embedded model, quiet and under a bounded CPU load.

``bench_validity.py`` checks the statistics on simulated machines. This one runs the real thing: the
same variant on both sides (an A/A, so every ``faster`` or ``slower`` is a false call), many times per
configuration, and prints the rate of false calls with its Clopper-Pearson 95 % interval beside the
nominal 5 %, the MDE the runs reached (with ``--repeats auto``, the MDE of the repeated CI at the stop,
which is wider than a fixed run's) and the blocks they used. Configurations:

- ``session``, ``engine``, ``process``: ``logitlab ab`` on the llamacpp engine at each ``--isolation``
  (calls on decode and prefill tokens/s: two calls a run);
- ``cmd``: ``logitlab ab`` on the ``cmd`` engine (``examples/llamacpp_cmd_engine.py``, a process a slot);
- ``interleaved``: ``logitlab ab --speed-design interleaved`` on the llamacpp engine (decode: ``--repeats``
  interleaved blocks, a new pair of engines each; prefill: one block of runs, so no prefill call);
- ``bench-run``: ``logitlab bench run --aa`` on a real command (``llama-bench -n TOKENS -r 1``; the
  metric is its decode tokens/s);
- anchors judged by their usual readings, on the same workload: ``llama-bench`` (two invocations of
  ``-r REPS``: a call where the mean ± sd intervals do not overlap, and where Welch's t-test on the two
  sets of samples gives p < 0.05) and ``hyperfine`` (the same command twice, ``--runs REPS``: a call
  where hyperfine's "ran R ± s times faster" excludes 1).

Machine states: ``quiet`` (nothing else should run: the benchmark cannot check that) and ``load`` (the
benchmark starts ``--load-factor`` × cores busy-loop processes, each ending by itself after
``--load-seconds`` at the latest, and stops them at the end of the state).

A second table takes the instance effects apart (issue #36 item 2): per configuration and metric, the
one-way random-effects ANOVA of the runs' block log ratios (``logitlab.perf.between_run_variance``): the sd
``tau`` of a run's fixed offset (at ``session`` isolation: the two engine objects' difference), the F test of
``tau = 0``, how much wider a run's CI should be and the false-call rate that predicts, beside the same
analysis of the control's own slots (one object). Each run's slots (variant, block, position, seconds) are
kept in its record.

``--part detect`` measures the other side: the candidate is the ``cmd`` engine with
``LLAMACPP_CMD_SLOWDOWN=F`` (it busy-waits F × each call's wall time: exactly (1 + F)× slower), and the
share of runs that call decode ``slower`` is printed with its interval and the time to a decision
(``--repeats auto`` by default there). With ``--detect-design interleaved`` the runs are ``ab --speed-design
interleaved`` on the llamacpp engine instead, the candidate's decode steps busy-waiting F × their own time
(``AbExperiment(plant=F)``: exactly (1 + F)× in the thread's CPU time), in a child process as the CLI runs,
with ``--repeats`` as given (default 4).

Runs are interleaved across configurations (run i of every configuration before run i + 1), so that a
drift of the machine reaches them alike. Every run's record is appended to ``--out`` (JSON lines) as it
ends, so an interrupted benchmark keeps what it measured; ``--resume`` reads it back and runs only what
is missing. Source of the interval: Clopper & Pearson (1934), via ``scipy.stats.binomtest``.

    python benchmarks/bench_real_validity.py [--runs 60] [--states quiet,load] [--configs session,engine,...]
        [--tokens 16] [--repeats 4] [--load-factor 2] [--out out/real_validity.jsonl] [--resume]
    python benchmarks/bench_real_validity.py --part detect --states load --slowdown 0.03 --runs 30
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
LOGITLAB = [sys.executable, "-m", "logitlab"]
CMD_ENGINE = f"cmd:{shlex.quote(sys.executable)} {ROOT / 'examples' / 'llamacpp_cmd_engine.py'} " \
             "--tokens {tokens} --logits {logits} --n-prompt {n_prompt} --n-decode {n_decode}"
AA_CONFIGS = ("session", "engine", "process", "cmd", "interleaved", "bench-run", "llama-bench", "hyperfine")
#: a child process that runs ``ab --speed-design interleaved`` as the CLI would, with a planted slowdown:
#: argv plant, tokens, repeats, max-repeats, seed, out (JSON)
PLANTED_INTERLEAVED = """
import json, sys
from logitlab.engines.variant import parse_variant
from logitlab.experiments.ab import AbConfig, AbExperiment
from logitlab.experiments.prompts import one_prompt
plant, tokens, repeats, max_repeats, seed, out = sys.argv[1:]
config = AbConfig(control=parse_variant("", "control", default_engine="llamacpp"),
                  candidate=parse_variant("", "candidate", default_engine="llamacpp"),
                  prompt=one_prompt(command="ab"), n_decode=int(tokens),
                  repeats=repeats if repeats == "auto" else int(repeats), max_repeats=int(max_repeats),
                  seed=int(seed), speed_design="interleaved")
with open(out, "w") as f:
    json.dump(AbExperiment(config, plant=float(plant)).run().to_dict(), f)
"""
STATES = ("quiet", "load")
NOMINAL = 0.05
TARGET_UPPER = 0.08  # issue #36: the rate's upper 95 % bound at 60 runs a configuration


@dataclass
class Run:
    """One real run of a configuration: its metric calls and what they rested on.

    Attributes:
        config, state: the configuration and the machine state.
        index: the run's number within (config, state), from 0.
        calls: metric name -> call (``faster``, ``slower``, ``equivalent``, ``inconclusive``; anchors:
            ``differ`` or ``same``).
        mde: metric name -> the minimum detectable effect of the run (fraction), where the tool gives one.
        blocks: ABBA/BAAB blocks (logitlab) or repetitions a side (anchors).
        seconds: the run's wall time (s), tool start-up and model loads included.
        detail: metric -> the figures the call rests on (ratio and CI, means and sds, p).
        error: why the run gave no calls (its last output line), else None.
    """

    config: str
    state: str
    index: int
    calls: dict[str, str] = field(default_factory=dict)
    mde: dict[str, float] = field(default_factory=dict)
    blocks: int = 0
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("aa", "detect"), default="aa")
    parser.add_argument("--runs", type=int, default=60, help="runs per configuration and state")
    parser.add_argument("--states", default="quiet,load", help="comma-separated: quiet, load")
    parser.add_argument("--configs", default=",".join(AA_CONFIGS), help="comma-separated, of: " + ", ".join(AA_CONFIGS))
    parser.add_argument("--tokens", type=int, default=16, help="decode tokens a run")
    parser.add_argument("--repeats", default="4", help="ab --repeats / bench run --blocks (N or auto)")
    parser.add_argument("--max-repeats", type=int, default=12, help="budget of blocks with --repeats auto")
    parser.add_argument("--margin", type=float, default=None, help="ab/bench --margin (default: theirs)")
    parser.add_argument("--reps", type=int, default=10, help="repetitions a side of the anchors")
    parser.add_argument("--load-factor", type=float, default=2.0, help="load: busy processes per core")
    parser.add_argument("--load-seconds", type=float, default=4 * 3600, help="a busy process ends by itself after")
    parser.add_argument("--slowdown", type=float, default=0.03, help="--part detect: the planted slowdown")
    parser.add_argument("--detect-design", choices=("runs", "interleaved"), default="runs",
                        help="--part detect: plant in the cmd engine's runs, or in ab --speed-design interleaved's "
                             "decode steps")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "real_validity.jsonl")
    parser.add_argument("--resume", action="store_true", help="keep the runs already in --out")
    args = parser.parse_args()
    states = _choices(args.states, STATES, "--states")
    configs = ("planted",) if args.part == "detect" else _choices(args.configs, AA_CONFIGS, "--configs")
    if args.part == "detect" and args.repeats == "4" and args.detect_design == "runs":
        args.repeats = "auto"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = _read(args.out) if args.resume else []
    if not args.resume:
        args.out.write_text("")
    runners = {name: _runner(name, args) for name in configs}
    print(f"bench_real_validity: part {args.part}, {args.runs} runs a configuration and state, "
          f"{args.tokens} decode tokens, repeats {args.repeats}, {os.cpu_count()} CPUs; records in {args.out}")
    started = time.perf_counter()
    try:
        for state in states:
            with _machine_state(state, args):
                for index in range(args.runs):
                    for config in configs:
                        if any(r.config == config and r.state == state and r.index == index for r in done):
                            continue
                        run = runners[config](state, index)
                        done.append(run)
                        with args.out.open("a") as f:
                            f.write(json.dumps(run.__dict__) + "\n")
                        _progress(run)
    except KeyboardInterrupt:
        print("interrupted: the table covers the runs measured so far", file=sys.stderr)
    print(f"\n{len(done)} runs in {time.perf_counter() - started:.0f} s\n")
    if args.part == "detect":
        status = _detect_table(done, args)
        _pattern_table(done)
        return status
    status = _aa_table(done)
    _instance_table(done)
    _pattern_table(done)
    return status


def _choices(text: str, valid: tuple[str, ...], option: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise SystemExit(f"error: {option} {text!r}: use a comma-separated list of {', '.join(valid)}")
    return names


def _read(path: Path) -> list[Run]:
    if not path.exists():
        return []
    return [Run(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def _progress(run: Run) -> None:
    calls = " ".join(f"{m}={c}" for m, c in run.calls.items()) or f"error: {run.error}"
    print(f"  {run.state:5s} {run.config:11s} #{run.index:<3d} {run.seconds:6.1f} s  {calls}", flush=True)


# --- machine states -----------------------------------------------------------------------------------


#: A busy process: it spins until ``seconds`` have passed or its parent is gone (checked every 0.5 s), so a
#: benchmark killed by a signal, which skips ``__exit__``, does not leave its load running.
_BUSY_LOOP = """import os, time
end = time.monotonic() + float("{seconds}")
check = 0.0
while (now := time.monotonic()) < end:
    if now > check:
        if os.getppid() != {parent}:
            break
        check = now + 0.5
"""


class _machine_state:
    """``quiet``: nothing; ``load``: busy-loop processes started here and stopped on exit (also on errors);
    they also stop by themselves when this process is gone (``_BUSY_LOOP``)."""

    def __init__(self, state: str, args: argparse.Namespace) -> None:
        self.state, self.args, self.procs = state, args, []

    def __enter__(self) -> None:
        if self.state == "load":
            count = max(1, round(self.args.load_factor * (os.cpu_count() or 1)))
            code = _BUSY_LOOP.format(seconds=self.args.load_seconds, parent=os.getpid())
            self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]
            print(f"load: {count} busy processes", flush=True)

    def __exit__(self, *exc: Any) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()


# --- runners --------------------------------------------------------------------------------------------


def _runner(name: str, args: argparse.Namespace) -> Callable[[str, int], Run]:
    if name in ("session", "engine", "process"):
        return lambda state, index: _ab(name, state, index, args, ["--isolation", name])
    if name == "cmd":
        return lambda state, index: _ab(name, state, index, args, ["--engine", CMD_ENGINE])
    if name == "interleaved":
        return lambda state, index: _ab(name, state, index, args, ["--speed-design", "interleaved"])
    if name == "planted" and args.detect_design == "interleaved":
        return lambda state, index: _planted_interleaved(state, index, args)
    if name == "planted":
        plant = ["--engine", CMD_ENGINE, "--candidate-env", f"LLAMACPP_CMD_SLOWDOWN={args.slowdown}"]
        return lambda state, index: _ab(name, state, index, args, plant)
    if name == "bench-run":
        return lambda state, index: _bench_run(state, index, args)
    if name == "llama-bench":
        return lambda state, index: _llama_bench(state, index, args)
    return lambda state, index: _hyperfine(state, index, args)


def _timed(cmd: list[str], timeout: float = 3600) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return proc, time.perf_counter() - start


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}"


def _speed_options(args: argparse.Namespace, blocks_option: str, budget_option: str) -> list[str]:
    out = [blocks_option, str(args.repeats)]
    if args.repeats == "auto":
        out += [budget_option, str(args.max_repeats)]
    if args.margin is not None:
        out += ["--margin", str(args.margin)]
    return out


def _ab(config: str, state: str, index: int, args: argparse.Namespace, extra: list[str]) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ab.json"
        cmd = [*LOGITLAB, "ab", "--tokens", str(args.tokens), *_speed_options(args, "--repeats", "--max-repeats"),
               "--seed", str(index), "--json", str(out), *extra]
        proc, seconds = _timed(cmd)
        run = Run(config, state, index, seconds=seconds)
        if not out.exists() or proc.returncode not in (0, 1):
            run.error = _last_line(proc)
            return run
        result = json.loads(out.read_text())
    for phase, comparison in (result.get("speed") or {}).items():
        if config != "interleaved" or phase == "decode":  # interleaved: prefill is one block of runs, no call
            _take(run, phase, comparison)
    if config == "interleaved":
        _keep_interleaved(run, result)
    # each measured slot, for effects of a slot's place (variant, block, position; seconds of each phase)
    run.detail["slots"] = [[r["variant"], r["block"], r["position"], r["prefill_seconds"], r["decode_seconds"]]
                           for r in result.get("runs") or [] if r.get("block") is not None and not r.get("crash")]
    return run


def _planted_interleaved(state: str, index: int, args: argparse.Namespace) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ab.json"
        proc, seconds = _timed([sys.executable, "-c", PLANTED_INTERLEAVED, str(args.slowdown), str(args.tokens),
                                str(args.repeats), str(args.max_repeats), str(index), str(out)])
        run = Run("planted", state, index, seconds=seconds)
        if not out.exists() or proc.returncode != 0:
            run.error = _last_line(proc)
            return run
        result = json.loads(out.read_text())
    for phase, comparison in (result.get("speed") or {}).items():
        _take(run, phase, comparison)
    _keep_interleaved(run, result)
    return run


def _keep_interleaved(run: Run, result: dict[str, Any]) -> None:
    """``--speed-design interleaved``: each block's load seconds (wall) and the arms' decode seconds (its clock)."""
    phase = result.get("interleaved") or {}
    run.detail["interleaved"] = {"clock": phase.get("clock"), "blocks": [
        [b["load_seconds"], b["control_seconds"], b["candidate_seconds"], b.get("wall_seconds"),
         b.get("first_loaded", "control"), b.get("pattern")] for b in phase.get("blocks") or []]}


def _take(run: Run, metric: str, comparison: dict[str, Any]) -> None:
    run.calls[metric] = comparison["call"]
    if comparison.get("mde") is not None:
        run.mde[metric] = comparison["mde"]
    run.blocks = max(run.blocks, int(comparison.get("n_blocks") or 0))
    run.detail[metric] = {k: comparison.get(k) for k in ("ratio", "ci_low", "ci_high", "margin", "margin_source",
                                                         "block_log_ratios", "aa_log_ratios")}


def _llama_bench_cmd(args: argparse.Namespace, reps: int, json_out: bool) -> list[str]:
    from logitlab.engines.llamacpp_repack import default_tool_args
    from logitlab.models import default_model_path
    from logitlab.tools import llama_tool

    cmd = [str(llama_tool("llama-bench")), *default_tool_args("llama-bench"), "-m", str(default_model_path()),
           "-p", "0", "-n", str(args.tokens), "-r", str(reps)]
    return cmd + (["-o", "json"] if json_out else [])


def _bench_run(state: str, index: int, args: argparse.Namespace) -> Run:
    command = shlex.join(_llama_bench_cmd(args, 1, False))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cmd = [*LOGITLAB, "bench", "run", "--control", command, "--aa",
               *_speed_options(args, "--blocks", "--max-blocks"), "--seed", str(index),
               "--metric", rf"tg{args.tokens} \|\s+([0-9.]+)", "--metric-name", "decode",
               "--higher-is-better", "--unit", "tokens/s", "--json", str(out)]
        proc, seconds = _timed(cmd)
        run = Run("bench-run", state, index, seconds=seconds)
        if not out.exists() or proc.returncode not in (0, 1):
            run.error = _last_line(proc)
            return run
        result = json.loads(out.read_text())
    _take(run, "decode", result["comparisons"]["decode"])
    return run


def _llama_bench(state: str, index: int, args: argparse.Namespace) -> Run:
    """Two invocations of ``llama-bench -r REPS`` (an A/A), judged as people read its table."""
    from scipy import stats

    samples, seconds = [], 0.0
    for _ in range(2):
        proc, took = _timed(_llama_bench_cmd(args, args.reps, True))
        seconds += took
        if proc.returncode != 0:
            return Run("llama-bench", state, index, seconds=seconds, error=_last_line(proc))
        samples.append([float(x) for x in json.loads(proc.stdout)[0]["samples_ts"]])
    (m1, s1), (m2, s2) = ((statistics.fmean(x), statistics.stdev(x)) for x in samples)
    p = float(stats.ttest_ind(samples[0], samples[1], equal_var=False).pvalue)
    run = Run("llama-bench", state, index, seconds=seconds, blocks=args.reps)
    run.calls["mean±sd"] = "differ" if abs(m1 - m2) > s1 + s2 else "same"
    run.calls["welch-t"] = "differ" if p < 0.05 else "same"
    run.detail = {"means": [m1, m2], "sds": [s1, s2], "p": p}
    return run


def _hyperfine(state: str, index: int, args: argparse.Namespace) -> Run:
    """hyperfine on the same llama-bench command twice (an A/A), judged by its "ran R ± s times faster"."""
    command = shlex.join(_llama_bench_cmd(args, 1, False))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "hyperfine.json"
        proc, seconds = _timed(["hyperfine", "--style", "none", "--warmup", "1", "--runs", str(args.reps),
                                "--export-json", str(out), "-n", "a", command, "-n", "b", command])
        if proc.returncode != 0 or not out.exists():
            return Run("hyperfine", state, index, seconds=seconds, error=_last_line(proc))
        results = json.loads(out.read_text())["results"]
    (m1, s1), (m2, s2) = ((r["mean"], r["stddev"] or 0.0) for r in results)
    ratio = max(m1, m2) / min(m1, m2)
    sigma = ratio * math.sqrt((s1 / m1) ** 2 + (s2 / m2) ** 2)  # hyperfine's own propagation of the two sds
    run = Run("hyperfine", state, index, seconds=seconds, blocks=args.reps)
    run.calls["ratio±σ"] = "differ" if ratio - sigma > 1.0 else "same"
    run.detail = {"means": [m1, m2], "sds": [s1, s2], "ratio": ratio, "sigma": sigma}
    return run


# --- tables ---------------------------------------------------------------------------------------------


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """Exact 95 % interval of a binomial rate k/n (Clopper & Pearson 1934; scipy's ``binomtest``)."""
    from scipy import stats

    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return float(ci.low), float(ci.high)


def _groups(runs: list[Run]) -> Iterator[tuple[str, str, list[Run]]]:
    keys = dict.fromkeys((r.config, r.state) for r in runs)
    for config, state in keys:
        yield config, state, [r for r in runs if r.config == config and r.state == state]


def _aa_table(runs: list[Run]) -> int:
    header = (f"{'configuration':12s} {'state':5s} {'runs':>4s} {'calls':>5s} {'false':>5s} {'rate':>6s} "
              f"{'95% CI':>13s} {'MDE med':>8s} {'blocks':>6s} {'s/run':>6s}")
    print(header + "\n" + "-" * len(header))
    ok = True
    for config, state, group in _groups(runs):
        measured = [r for r in group if r.calls]
        calls = [c for r in measured for c in r.calls.values()]
        false = sum(c in ("faster", "slower", "differ") for c in calls)
        if not calls:
            print(f"{config:12s} {state:5s} {len(group):4d} no calls: {group[-1].error}")
            ok = False
            continue
        low, high = clopper_pearson(false, len(calls))
        mdes = [m for r in measured for m in r.mde.values()]
        mde = f"{100 * statistics.median(mdes):7.1f}%" if mdes else f"{'—':>8s}"
        print(f"{config:12s} {state:5s} {len(group):4d} {len(calls):5d} {false:5d} {100 * false / len(calls):5.1f}% "
              f"{100 * low:5.1f}–{100 * high:5.1f}% {mde} {statistics.fmean(r.blocks for r in measured):6.1f} "
              f"{statistics.fmean(r.seconds for r in group):6.1f}")
        if config in ("session", "engine", "process", "cmd", "interleaved", "bench-run") and high > TARGET_UPPER:
            ok = False
    print(f"\nnominal false-call rate {100 * NOMINAL:.0f} %; target: logitlab's upper bound <= {100 * TARGET_UPPER:.0f} %"
          " at 60 runs a configuration (anchors are printed for comparison, not judged)")
    for config, state, group in _groups(runs):  # issue #36 item 4: a real A/A ends `equivalent`
        decode = [r for r in group if "decode" in r.calls]
        if decode and config in ("session", "engine", "process", "cmd", "interleaved", "bench-run"):
            equivalent = [r for r in decode if r.calls["decode"] == "equivalent"]
            low, high = clopper_pearson(len(equivalent), len(decode))
            used = [r.blocks for r in equivalent]
            blocks = f"; blocks to that call: median {statistics.median(used):g}, range {min(used)}–{max(used)}" \
                if used else ""
            print(f"{config} {state}: decode `equivalent` in {len(equivalent)} of {len(decode)} runs "
                  f"({100 * low:.1f}–{100 * high:.1f} %){blocks}")
    return 0 if ok else 1


def _instance_table(runs: list[Run]) -> None:
    """Instance effects (issue #36 item 2): do the runs' A/B estimates spread more than their blocks allow?

    Per configuration, state and metric, :func:`logitlab.perf.between_runs.between_run_variance` over the
    runs' block log ratios: ``A/B`` the two arms (at ``session`` isolation two engine objects, each loaded once
    a run), ``A/A`` the control's own slots within each block (one object). ``tau`` is the sd of a run's fixed
    offset (with ``tau+``, its upper 95 % bound), ``sigma`` a block's own noise; ``x CI`` how much wider than its
    own CI a run of the most blocks should be; ``pred.`` the share of runs whose CI that predicts to exclude 1
    (:meth:`~logitlab.perf.between_runs.BetweenRuns.false_call_rate`; only where every run has as many
    blocks), beside ``seen``, the share whose CI did (a call of ``faster``/``slower``, or an ``equivalent``
    whose CI also excludes 1).
    """
    from logitlab.errors import InputError
    from logitlab.perf.between_runs import between_run_variance

    header = (f"{'configuration':12s} {'state':5s} {'metric':7s} {'runs':>4s} {'A/B mean [95% CI]':>24s} "
              f"{'tau':>6s} {'tau+':>6s} {'sigma':>6s} {'F p':>7s} {'x CI':>5s} {'pred.':>6s} {'seen':>6s} "
              f"{'A/A tau':>7s} {'A/A p':>7s}")
    print("\ninstance effects: one-way random effects over runs (tau: sd of a run's offset; sigma: a block's noise)")
    print(header + "\n" + "-" * len(header))
    for config, state, group in _groups(runs):
        metrics = dict.fromkeys(m for r in group for m, d in r.detail.items()
                                if isinstance(d, dict) and d.get("block_log_ratios"))
        for metric in metrics:
            measured = [r for r in group if len((r.detail.get(metric) or {}).get("block_log_ratios") or []) >= 2]
            try:
                between = between_run_variance([r.detail[metric]["block_log_ratios"] for r in measured])
                aa = [r.detail[metric].get("aa_log_ratios") or [] for r in measured]
                aa_runs = between_run_variance(aa) if sum(len(x) >= 2 for x in aa) >= 2 else None
            except InputError as e:
                print(f"{config:12s} {state:5s} {metric:7s} {len(measured):4d} {e}")
                continue
            sizes = {len(r.detail[metric]["block_log_ratios"]) for r in measured}
            n = max(sizes)
            pred = f"{100 * between.false_call_rate(n):5.1f}%" if len(sizes) == 1 else f"{'—':>6s}"
            seen = statistics.fmean(not (r.detail[metric]["ci_low"] <= 1.0 <= r.detail[metric]["ci_high"])
                                    for r in measured)
            aa_text = f"{'—':>7s} {'—':>7s}"
            if aa_runs is not None:
                aa_p = f"{aa_runs.p_value:7.3f}" if aa_runs.p_value is not None else f"{'—':>7s}"
                aa_text = f"{100 * aa_runs.between_sd:6.2f}% {aa_p}"
            mean = (f"{math.exp(between.mean_log):.4f} [{math.exp(between.ci_low_log):.4f}–"
                    f"{math.exp(between.ci_high_log):.4f}]")
            p = f"{between.p_value:7.3f}" if between.p_value is not None else f"{'—':>7s}"
            bound = between.between_sd_upper()
            upper = f"{100 * bound:5.2f}%" if bound is not None else f"{'—':>6s}"
            print(f"{config:12s} {state:5s} {metric:7s} {between.n_runs:4d} {mean:>24s} "
                  f"{100 * between.between_sd:5.2f}% {upper} {100 * between.within_sd:5.2f}% {p} "
                  f"{between.run_sd_inflation(n):5.2f} {pred} {100 * seen:5.1f}% {aa_text}")


def _pattern_table(runs: list[Run]) -> None:
    """Interleaved runs: the decode log ratio of the ABBA blocks against the BAAB blocks of each run.

    Log ratios are log(candidate / control) of decode tokens/s. Where the pair's first-loaded engine is the
    pattern's first arm (``first_loaded``), that arm is also the one that decodes the block's first turn (right
    after the other engine's warm-up): an advantage ``e`` of that arm gives ABBA blocks ``-e`` and BAAB blocks
    ``+e``, so ``e`` = (BAAB - ABBA) / 2 is the load order and the first turn together. Where the control was
    always loaded first, the load order is instead the A/B offset, and (BAAB - ABBA) / 2 the first turn alone.
    Each run gives one difference (its BAAB mean minus its ABBA mean, the run's own offset cancelled); the
    interval is Student's t over runs. With ``--repeats auto`` a run that stops ``equivalent`` stops when its
    estimate is near 1, which pulls the mean A/B offset towards 0.
    """
    from scipy import stats

    title = "\nload order of interleaved runs (the pattern's first arm's advantage e = (BAAB - ABBA) / 2):"
    for config, state, group in _groups(runs):
        measured = [r for r in group if len((r.detail.get("decode") or {}).get("block_log_ratios") or []) >= 2
                    and "interleaved" in r.detail]
        if len(measured) < 2:
            continue
        if title:
            print(title)
            title = ""
        diffs, means, orders = [], [], set()
        for r in measured:
            logs, blocks = r.detail["decode"]["block_log_ratios"], r.detail["interleaved"]["blocks"]
            patterns = [b[5] if len(b) > 5 else ("ABBA", "BAAB")[i % 2] for i, b in enumerate(blocks)]
            by = {p: [v for v, q in zip(logs, patterns) if q == p] for p in ("ABBA", "BAAB")}
            diffs.append(statistics.fmean(by["BAAB"]) - statistics.fmean(by["ABBA"]))
            means.append(statistics.fmean(logs))
            orders.add(tuple(b[4] if len(b) > 4 else "control" for b in blocks[:2]))
        n, test = len(diffs), stats.ttest_1samp(diffs, 0.0)
        e, (e_low, e_high), p = statistics.fmean(diffs) / 2, (v / 2 for v in test.confidence_interval()), test.pvalue
        offset = [100 * (math.exp(v) - 1) for v in (statistics.fmean(means), *stats.ttest_1samp(means, 0.0)
                                                    .confidence_interval())]
        first = "first-loaded = pattern's first arm" if orders == {("control", "candidate")} else \
            "control always loaded first" if orders == {("control", "control")} else f"load orders {sorted(orders)}"
        print(f"{config} {state}: {n} runs ({first}); decode A/B offset, mean of the runs' means "
              f"{offset[0]:+.2f} % (95 % CI {offset[1]:+.2f} to {offset[2]:+.2f} %); (BAAB - ABBA) / 2 "
              f"{100 * e:+.2f} % (95 % CI {100 * e_low:+.2f} to {100 * e_high:+.2f} %, p {p:.3f}); "
              f"ABBA above BAAB in {sum(d < 0 for d in diffs)} of {n} runs")


def _detect_table(runs: list[Run], args: argparse.Namespace) -> int:
    ok = True
    for _, state, group in _groups(runs):
        measured = [r for r in group if "decode" in r.calls]
        if not measured:
            print(f"{state}: no run measured decode ({group[-1].error})")
            ok = False
            continue
        hits = sum(r.calls["decode"] == "slower" for r in measured)
        low, high = clopper_pearson(hits, len(measured))
        ratios = [r.detail["decode"]["ratio"] for r in measured]
        print(f"{state}: planted {100 * args.slowdown:.1f} % decode slowdown called slower in {hits} of "
              f"{len(measured)} runs ({100 * hits / len(measured):.1f} %, 95 % CI {100 * low:.1f}–{100 * high:.1f} %); "
              f"median ratio {statistics.median(ratios):.4f} (truth {1 / (1 + args.slowdown):.4f}); "
              f"blocks mean {statistics.fmean(r.blocks for r in measured):.1f}, time to a decision "
              f"median {statistics.median(r.seconds for r in measured):.0f} s")
        ok &= hits / len(measured) >= 0.9
    print("target: >= 90 % of runs call the planted slowdown at load 2x cores (issue #36)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
