"""``logitlab bench``: paired runs of two commands, and comparisons of benchmark tools' files."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import click

from logitlab.cli.auto_options import sequential_options
from logitlab.cli.common import EXIT_CHECK_FAILED, EXIT_OK, finish, handle_errors, run_with_progress
from logitlab.cli.options import SpelledOption, metric_name, metric_options, output_options, run_log_path, spelled
from logitlab.cli.outputs import STDOUT, check_output_paths, report_paths, show_report, write_reports
from logitlab.cli.recording import logged_run_options, record_options, record_result, record_target
from logitlab.errors import InputError

_FORMATS = ("gbench", "criterion", "pytest-benchmark", "pyperf", "hyperfine", "llama-bench")


@click.group()
def bench() -> None:
    """Paired, noise-calibrated performance comparison of commands and benchmark files.

    \b
      run        two shell commands in counterbalanced ABBA/BAAB blocks
      compare    two result files of gbench, criterion, pytest-benchmark, pyperf, hyperfine, llama-bench
      calibrate  per-scenario noise from A/A runs, for compare --noise
    """


@bench.command("run")
@click.option("--control", required=True, metavar="CMD", help="Shell command of the control (A).")
@click.option("--candidate", default=None, metavar="CMD", help="Shell command of the candidate (B).")
@click.option("--aa", is_flag=True, help="A/A: run the control on both sides; reports the false-positive rate "
                                         "and suggests δ.")
@sequential_options("--repeats", default=10, each="runs", called="the primary metric",
                    noise="a saved bench run --aa --json result or a bench calibrate profile", former="--blocks")
@click.option("--warmup", type=int, default=1, show_default=True, help="Untimed runs per variant first.")
@click.option("--randomize", is_flag=True, help="Seeded, balanced random order of block patterns.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --randomize and the bootstrap.")
@metric_options(example="tokens_per_second=([0-9.]+)")
@click.option("--margin", type=float, default=None,
              help="Equivalence margin δ as a fraction (0.02 = 2 %). Default: from the control's A/A slots "
                   "(--repeats auto: --noise, else 2 %).")
@click.option("--slot-timeout", "--timeout", "timeout", cls=SpelledOption, type=float, default=None,
              metavar="SECONDS",
              help="Seconds per timed run (slot), as ab's --slot-timeout; a run past it is killed and fails. "
                   "(--timeout: the same, its former name.)")
@click.option("--fail-on", type=click.Choice(["slower", "not-faster"]), default=None,
              help="Exit 1 when the call is slower (or anything but faster).")
@logged_run_options("bench-run")
@handle_errors
def run_cmd(**opts: Any) -> None:
    """Run two shell commands in randomised, counterbalanced ABBA/BAAB blocks and compare them.

    Per run: wall time, user and system CPU time, peak RSS (from os.wait4 on
    the child), exit status, and optionally a number parsed from the output.
    A block with a failed run is reported and left out. Decision:
    geometric-mean ratio with a 95 % paired-t CI over blocks, faster /
    slower / equivalent / inconclusive against δ, MDE, slot-position test.

    \b
    Examples:
      logitlab bench run --control './engine-old bench' --candidate './engine-new bench' --repeats 10
      logitlab bench run --control 'python decode.py -t 1' --candidate 'python decode.py -t 2' \\
          --metric 'tokens_per_second=([0-9.]+)' --higher-is-better --unit tokens/s
      logitlab bench run --control './engine bench' --aa
    """
    from logitlab.perf.commands import BenchRunConfig, bench_run

    log_path = run_log_path(opts, "bench-run")
    check_output_paths(**report_paths(opts),
                       log=log_path)
    target = record_target(opts)
    if opts["metric_regex"] and opts["higher_is_better"] is None:
        raise InputError("--metric needs a direction: add --higher-is-better (tokens/s) or --lower-is-better "
                         "(latency)")
    if opts["candidate"] is None and not opts["aa"]:
        raise InputError("give --candidate CMD, or --aa to run the control on both sides")
    if opts["candidate"] is not None and opts["aa"]:
        raise InputError("--aa runs the control on both sides: give --candidate CMD or --aa, not both")
    if opts["higher_is_better"] is not None and not opts["metric_regex"]:
        raise InputError("--higher-is-better/--lower-is-better is the direction of --metric: add --metric REGEX "
                         "(without it the metric is the wall time, lower is better)")
    names = _typed_names()
    config = BenchRunConfig(
        control=opts["control"], candidate=opts["control"] if opts["aa"] else opts["candidate"],
        **_blocks(opts, names), warmup=opts["warmup"], randomize=opts["randomize"], seed=opts["seed"],
        metric_regex=opts["metric_regex"], metric_name=opts["metric_name"] or metric_name(opts["metric_regex"]),
        metric_unit=opts["metric_unit"], higher_is_better=bool(opts["higher_is_better"]), aa=opts["aa"],
        margin=opts["margin"], timeout=opts["timeout"], names=names,
    )
    if opts["noise_path"]:  # read and checked before any run
        from logitlab.perf.prereg import preregister
        from logitlab.perf.run_calibration import bench_run_calibration

        if not config.auto:
            raise InputError(f"--noise is the pre-registered δ of {names['blocks']} auto; with {names['blocks']} "
                             f"{config.blocks} drop it (or give --margin)")
        config = dataclasses.replace(config, calibration=bench_run_calibration(opts["noise_path"], config),
                                     names=names)
        preregister(opts["margin"], config.calibration)  # --margin with what the files measured: refused here
    result, error = run_with_progress(lambda on_event: bench_run(config, on_event=on_event, log_path=log_path),
                                      quiet=opts["quiet"], first="bench run", describe=_run_progress)
    finish(result, error, opts, target=target, log_path=log_path,
           exit_code=lambda r: _fail_on_exit_code(r, opts["fail_on"]),
           interrupted="the runs measured so far are in the reports and the log")


def _run_progress(kind: str, data: dict[str, Any]) -> dict[str, Any] | None:
    if kind == "start":
        return {"total": data["slots"]}
    if kind == "look":
        return {"description": f"stop: {data['decision'].stop_reason}"} if data["decision"].stop else None
    run = data["run"]
    where = "warmup" if run.is_warmup else f"block {run.block} {run.pattern}"
    return {"advance": 1, "description": f"{run.variant:9s} {where}"}


def _fail_on_exit_code(result: Any, fail_on: str | None) -> int:
    """``--fail-on slower|not-faster``: :data:`EXIT_CHECK_FAILED` (with one line on stderr) when the call is that."""
    call = result.primary.call if result.primary else "inconclusive"
    if (fail_on == "slower" and call == "slower") or (fail_on == "not-faster" and call != "faster"):
        click.echo(f"fail-on {fail_on}: the call is {call}", err=True)
        return EXIT_CHECK_FAILED
    return EXIT_OK


def _typed_names() -> dict[str, str]:
    """``bench run``'s options whose former names still work (``--blocks``, ``--max-blocks``, ``--timeout``), as the
    command line spelled them, by :class:`~logitlab.perf.commands.BenchRunConfig` field: what its messages name."""
    return {"blocks": spelled("blocks"), "max_blocks": spelled("max_blocks"), "timeout": spelled("timeout")}


def _blocks(opts: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """--repeats N, or --repeats auto with its budget (--max-repeats, --max-time); --blocks, --max-blocks: their
    former names (``names``: as typed, for the messages)."""
    if opts["blocks"] != "auto":
        if opts["max_blocks"] is not None:
            raise InputError(f"{names['max_blocks']} is the budget of {names['blocks']} auto; with {names['blocks']} "
                             f"{opts['blocks']} drop it")
        return {"blocks": opts["blocks"], "max_time": opts["max_time"]}
    return {"blocks": 12 if opts["max_blocks"] is None else opts["max_blocks"], "auto": True,
            "max_time": opts["max_time"]}


def _read_pair(base: str, candidate: str | None, fmt: str | None, baseline: str | None,
               time: str = "real") -> tuple[Any, Any]:
    from logitlab.perf.readers import read_benchmark_file

    if candidate is None:
        if not Path(base).is_dir() or baseline is None:
            raise InputError("give two files (BASE CANDIDATE), or one criterion folder with --baseline NAME "
                             "(compared with its latest run, 'new')")
        return (read_benchmark_file(base, format=fmt, baseline=baseline, time=time),
                read_benchmark_file(base, format=fmt, baseline="new", time=time))
    return (read_benchmark_file(base, format=fmt, baseline=baseline or "new", time=time),
            read_benchmark_file(candidate, format=fmt, baseline="new", time=time))


@bench.command("compare")
@click.argument("base", type=str)
@click.argument("candidate", type=str, required=False)
@click.option("--baseline", default=None, help="criterion: the saved baseline of BASE (e.g. main); with one "
                                               "folder, compared with its latest run ('new').")
@click.option("--format", "fmt", type=click.Choice(_FORMATS), default=None, help="Input format (default: detect).")
@click.option("--time", type=click.Choice(("real", "cpu")), default="real", show_default=True,
              help="Wall-clock or CPU time, where the tool records both (Google Benchmark: cpu_time; hyperfine: "
                   "user + system). On a loaded machine CPU time can show what wall time hides.")
@click.option("--noise", "noise_path", default=None, help="Per-scenario margins from `bench calibrate`.")
@click.option("--margin", type=float, default=None, help="One margin δ for every scenario (0.05 = 5 %); "
                                                        "overrides --noise.")
@click.option("--confidence", type=float, default=0.95, show_default=True, help="CI level.")
@click.option("--bootstrap", "n_bootstrap", type=int, default=9999, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap.")
@click.option("--fail-on", type=click.Choice(["regressed", "inconclusive"]), default=None,
              help="Exit 1 when a scenario regressed (or regressed or is inconclusive).")
@output_options(json_help="Write the full comparison as JSON.")
@record_options()
@handle_errors
def compare_cmd(**opts: Any) -> None:
    """Compare a candidate's benchmark results with a base's, scenario by scenario.

    Reads Google Benchmark JSON, criterion folders, pytest-benchmark JSON,
    pyperf JSON, hyperfine --export-json and llama-bench JSON/JSONL. Per
    scenario: base, candidate, change, 95 % bootstrap CI of the ratio, and a
    status from the CI and the margin together; Holm's correction across
    scenarios; geometric mean over scenarios.

    \b
    Examples:
      logitlab bench compare base.json pr.json --markdown comment.md
      logitlab bench compare target/criterion --baseline main --markdown comment.md
      logitlab bench compare base.json pr.json --noise noise.json --fail-on regressed
    """
    from logitlab.perf.calibration import NoiseProfile
    from logitlab.perf.compare_files import compare_benchmarks
    from logitlab.perf.equivalence import check_margin

    check_output_paths(**report_paths(opts),
                       inputs=[opts["base"], opts["candidate"], opts["noise_path"]])
    if opts["margin"] is not None:
        check_margin(opts["margin"], option="--margin")
    target = record_target(opts)
    base, candidate = _read_pair(opts["base"], opts["candidate"], opts["fmt"], opts["baseline"], opts["time"])
    noise = None
    if opts["noise_path"]:
        noise = NoiseProfile.from_dict(_load_json(opts["noise_path"]), source=opts["noise_path"])
        if noise.format != base.format:
            raise InputError(f"--noise {opts['noise_path']} was calibrated on {noise.format} runs, but the files "
                             f"are {base.format}")
        if noise.time != base.time:
            raise InputError(f"--noise {opts['noise_path']} was calibrated on {noise.time} time, but --time is "
                             f"{base.time}: calibrate the clock you compare (bench calibrate --time {base.time})")
    result = compare_benchmarks(base, candidate, margin=opts["margin"], noise=noise, noise_path=opts["noise_path"],
                                confidence=opts["confidence"], n_bootstrap=opts["n_bootstrap"], seed=opts["seed"])
    write_reports(result, opts)
    if not opts["quiet"]:
        show_report(result)
    record_result(result, opts, target)
    bad = {"regressed": ("regressed",), "inconclusive": ("regressed", "inconclusive")}.get(opts["fail_on"] or "", ())
    hits = [s.name for s in result.scenarios if s.status in bad]
    if hits:
        click.echo(f"fail-on {opts['fail_on']}: {len(hits)} scenario(s): {', '.join(hits[:10])}", err=True)
        sys.exit(EXIT_CHECK_FAILED)
    sys.exit(EXIT_OK)


def _load_json(path: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path} does not exist")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON ({exc.msg}): give the file bench calibrate wrote") from None


@bench.command("calibrate")
@click.argument("runs", nargs=-1, required=True)
@click.option("-o", "--out", "--json", "json_path", required=True,
              help="Noise profile to write (JSON), for compare --noise. '-': to stdout (then the rest goes to "
                   "stderr).")
@click.option("--baseline", "baselines", multiple=True,
              help="criterion: read these saved baselines of one folder as the runs (repeat the option).")
@click.option("--format", "fmt", type=click.Choice(_FORMATS), default=None, help="Input format (default: detect).")
@click.option("--time", type=click.Choice(("real", "cpu")), default="real", show_default=True,
              help="Wall-clock or CPU time (as bench compare --time; calibrate the clock you compare).")
@click.option("--confidence", type=float, default=0.95, show_default=True,
              help="Share of A/A comparisons the margin must cover.")
@output_options(json=False)
@handle_errors
def calibrate_cmd(**opts: Any) -> None:
    """Per-scenario noise from two or more runs of the same code (A/A), for compare --noise.

    \b
    Examples:
      logitlab bench calibrate base-run1.json base-run2.json base-run3.json --out noise.json
      logitlab bench calibrate target/criterion --baseline aa1 --baseline aa2 --out noise.json
    """
    from logitlab.perf.calibration import calibrate_noise
    from logitlab.perf.readers import read_benchmark_file

    paths = report_paths(opts)
    out = paths.pop("json")
    check_output_paths(out=None if out == STDOUT else out, **paths, inputs=list(opts["runs"]))
    if opts["baselines"]:
        if len(opts["runs"]) != 1:
            raise InputError("--baseline reads several baselines of ONE criterion folder: give one path")
        files = [read_benchmark_file(opts["runs"][0], format=opts["fmt"], baseline=b, time=opts["time"])
                 for b in opts["baselines"]]
    else:
        files = [read_benchmark_file(p, format=opts["fmt"], time=opts["time"]) for p in opts["runs"]]
    profile = calibrate_noise(files, confidence=opts["confidence"])
    write_reports(profile, opts)
    if not opts["quiet"]:
        show_report(profile)
        click.echo(f"noise profile written to {'stdout' if out == STDOUT else out}", err=True)
    sys.exit(EXIT_OK)
