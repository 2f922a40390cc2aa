"""``logitlab ab``: counterbalanced A/B of two engine variants."""

from __future__ import annotations

from typing import Any

import click

from logitlab.cli.auto_options import sequential_options
from logitlab.cli.common import (EXIT_CHECK_FAILED, EXIT_OK, REQUIRE_CHOICES, finish, handle_errors, require_exit_code,
                                 run_experiment)
from logitlab.cli.options import (check_memory, detection_option, memory_check_option, positions_from,
                                  positions_option, prompt_from, prompt_inputs, prompt_options, run_log_path,
                                  threshold_options, thresholds_from, variant_pair, variant_pair_options)
from logitlab.cli.outputs import check_output_paths, report_paths
from logitlab.cli.recording import logged_run_options, record_target
from logitlab.errors import InputError, check_at_least
from logitlab.experiments.isolation_levels import ISOLATION_LEVELS
from logitlab.experiments.speed_designs import SPEED_DESIGNS



@click.command()
@variant_pair_options(
    engine_help="Engine of both variants: NAME, or NAME:TARGET for 'cmd:COMMAND TEMPLATE' and "
                "'openai:http://HOST:PORT/v1'.",
    candidate_help="Candidate spec, same form (default: same as the control: an A/A).",
    slots="{side} slots")
@click.option("--control-model", default=None, help="Model of the control only (openai: the served model name).")
@click.option("--candidate-model", default=None, help="Model of the candidate only.")
@prompt_options("a built-in prose prompt")
@click.option("--tokens", "n_decode", type=int, default=64, show_default=True, help="Greedy decode steps.")
@positions_option
@sequential_options("--repeats", default=5, each="slots", called="decode tokens/s",
                    noise="a saved ab A/A (ab --json, no --candidate)")
@click.option("--warmup", type=int, default=1, show_default=True, help="Untimed runs per variant first.")
@click.option("--speed-design", type=click.Choice(SPEED_DESIGNS), default="runs", show_default=True,
              help="runs: each run is a slot of an ABBA/BAAB block (verdict and speed from the same runs). "
                   "interleaved: one block of runs for the A/A, the verdict and prefill; the decode speed from "
                   "--repeats blocks whose two arms alternate decode steps, a new pair of engines each block "
                   "(thread CPU time on one pinned CPU where both decode on one thread): 24 blocks resolved 1.7 %% "
                   "(MDE) in 116 s on a 2-core machine loaded 2x. Engines with sessions (not openai).")
@click.option("--isolation", type=click.Choice(ISOLATION_LEVELS), default="session", show_default=True,
              help="session: fresh session per slot on one engine per variant; engine: fresh engine object per "
                   "slot; process: each slot in its own subprocess — the only honest level for environment "
                   "knobs and options an engine reads at start-up.")
@click.option("--slot-timeout", type=float, default=None, metavar="SECONDS",
              help="With --isolation process: a slot still running after this is killed (its whole process "
                   "group) and the run stops with an error naming the slot; what ran is kept.")
@click.option("--randomize", is_flag=True, help="Seeded, balanced random order of block patterns.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --randomize and the bootstrap.")
@click.option("--no-escalate", is_flag=True, help="Do not repeat a failing A/A at stronger isolation.")
@click.option("--localize", is_flag=True,
              help="When not bit-exact, dump both sides of the first differing pair (llamacpp, hf) and report the "
                   "first divergent tensor (layer, name, position).")
@click.option("--explain", "explain", is_flag=True,
              help="When the A/B flips a token or moves a position outside its noise floor, run the controls of "
                   "`logitlab explain` on the pair and name one cause per position (with --localize: also the "
                   "first divergent tensor).")
@click.option("--explain-positions", type=int, default=None,
              help="--explain: at most this many positions (default 8).")
@click.option("--self-check", is_flag=True,
              help="After the blocks, run the candidate once more with the prompt's last token planted: its logits "
                   "must change there and nowhere before; if not, the A/B is vacuous (exit 1 with --require).")
@detection_option("the verdict's candidate run", "about a second on the embedded model")
@memory_check_option
@threshold_options
@click.option("--margin", type=float, default=None,
              help="Equivalence margin δ for the speed call, as a fraction (0.02 = 2 %). Default: from the A/A "
                   "(--repeats auto: --noise, else 2 %).")
@click.option("--require", type=click.Choice(REQUIRE_CHOICES), default=None,
              help="Exit 1 when the A/B verdict (or the A/A) is worse than this.")
@logged_run_options("ab")
@handle_errors
def ab(**opts: Any) -> None:
    """Counterbalanced A/B of two engine variants: bit-exactness, verdict, speed.

    Runs an untimed warmup per variant, then ABBA/BAAB blocks. The first
    measured control run decodes greedily and is the reference; every other run
    replays its tokens and is compared with it on every logit. Control runs give
    the A/A (does the control reproduce itself?), candidate runs the verdict,
    and the slot timings a paired speed ratio with a 95 % CI.

    \b
    Examples:
      logitlab ab --candidate flash_attn=1
      logitlab ab --model my.gguf --control n_ubatch=512 --candidate n_ubatch=4 --json out.json
      logitlab ab --candidate-env GGML_SOME_KNOB=1 --isolation process
      logitlab ab --engine 'cmd:./my-engine --tokens {tokens} --logits {logits}' --candidate-env MY_KNOB=1
      logitlab ab --engine openai:http://127.0.0.1:8080/v1 --control-model a --candidate-model b
      logitlab ab --engine 'cmd:./build/engine --tokens {tokens} --logits {logits}' --record --repo .
      logitlab ab --prompt-file long.txt --tokens 1 --positions last
    """
    from logitlab.experiments.ab import AbConfig

    control, candidate = variant_pair(opts)
    if opts["explain_positions"] is not None and not opts["explain"]:  # as --max-repeats without --repeats auto
        raise InputError("--explain-positions is a setting of --explain: add --explain, or drop it")
    explain_positions = 8 if opts["explain_positions"] is None else opts["explain_positions"]
    check_at_least("--explain-positions", explain_positions, 1)  # as explain --max-positions
    config = AbConfig(
        control=control,
        candidate=candidate,
        prompt=prompt_from(opts, "ab"),
        n_decode=opts["n_decode"], repeats=opts["repeats"], warmup=opts["warmup"],
        **_auto_budget(opts),
        isolation=opts["isolation"], slot_timeout=opts["slot_timeout"], randomize=opts["randomize"],
        seed=opts["seed"],
        escalate=not opts["no_escalate"], localize=opts["localize"], top_k=opts["top_k"], margin=opts["margin"],
        explain=explain_positions if opts["explain"] else 0, detection=opts["detection"], self_check=opts["self_check"],
        thresholds=thresholds_from(opts), positions=positions_from(opts), speed_design=opts["speed_design"],
    )
    log_path = run_log_path(opts, "ab")
    check_output_paths(**report_paths(opts),
                       log=log_path,
                       inputs=[control.model, candidate.model, *prompt_inputs(opts)])
    check_memory(opts, "ab", [control, candidate], [config.prompt], config.n_decode, selected=config.positions)
    target = record_target(opts)
    result, error = _run(config, log_path, opts["quiet"])
    finish(result, error, opts, target=target, log_path=log_path,
           interrupted="the runs measured so far are in the reports and the log",
           exit_code=lambda r: _require_exit_code(r, opts["require"]))


def _auto_budget(opts: dict[str, Any]) -> dict[str, Any]:
    """--max-repeats / --max-time / --noise, which only --repeats auto takes (--noise's file read and checked)."""
    from logitlab.experiments.ab_calibration import ab_calibration
    from logitlab.perf.autostop import check_auto_budget
    from logitlab.perf.prereg import preregister

    if opts["repeats"] != "auto":
        for flag, key in (("--max-repeats", "max_repeats"), ("--max-time", "max_time")):
            if opts[key] is not None:
                raise InputError(f"{flag} is the budget of --repeats auto; with --repeats {opts['repeats']} "
                                 f"drop it")
        if opts["noise_path"]:
            raise InputError(f"--noise is the pre-registered δ of --repeats auto; with --repeats {opts['repeats']} "
                             "drop it (or give --margin)")
        return {}
    budget = 12 if opts["max_repeats"] is None else opts["max_repeats"]
    check_auto_budget(budget, opts["max_time"])
    calibration = (ab_calibration(opts["noise_path"], budget, n_decode=opts["n_decode"], isolation=opts["isolation"],
                                  speed_design=opts["speed_design"]) if opts["noise_path"] else None)
    preregister(opts["margin"], calibration)  # --margin with what the files measured: refused before any run
    return {"max_repeats": budget, "max_time": opts["max_time"], "calibration": calibration}


def _run(config: Any, log_path: str, quiet: bool) -> tuple[Any, BaseException | None]:
    from logitlab.experiments.ab import AbExperiment

    return run_experiment(AbExperiment, config, quiet=quiet, describe=_progress, log_path=log_path)


def _progress(kind: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """The progress bar's update for one event of :class:`~logitlab.experiments.ab.AbExperiment`."""
    if kind == "start":
        return {"total": data["slots"], "description": "ab slots"}
    if kind == "slot":
        slot = data["slot"]
        return {"advance": 1, "description": f"ab {slot.variant:9s} {slot.pattern}"}
    if kind == "interleaved":
        return {"total": data["blocks"], "completed": 0, "description": "ab interleaved speed blocks"}
    if kind == "interleaved block":
        record = data["record"]
        return {"advance": 1, "description": f"ab interleaved {record.pattern} ({record.load_seconds:.1f} s load)"}
    if kind == "localize":
        return {"description": f"dumping {' vs '.join(data['pair'])} to localize"}
    if kind == "look" and data["decision"].stop:
        return {"description": f"ab stop: {data['decision'].stop_reason}"}
    if kind == "explain":
        return {"description": f"explain: {data.get('what', 'controls per position')}"}
    if kind == "self-check":
        return {"description": "self-check: the candidate with a planted token"}
    if kind == "escalate":
        return {"description": f"A/A at {data['isolation']} isolation"}
    return None


def _require_exit_code(result: Any, require: str | None) -> int:
    """Exit 1 when the A/A or the A/B verdict is worse than ``require``."""
    if require is None:
        return EXIT_OK
    if require == "bit-exact" and result.control_reproducible is False:
        click.echo("require bit-exact: the control does not reproduce itself", err=True)
        return EXIT_CHECK_FAILED
    code = require_exit_code(result.verdict_word, require)
    if code == EXIT_OK and result.vacuous:
        click.echo(f"error: the A/B is vacuous: {result.vacuous}", err=True)
        return EXIT_CHECK_FAILED
    return code

