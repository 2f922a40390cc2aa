"""``logitlab verify``: speculative-decoding verify probe (M=1 vs M=K) and the near-tie guard."""

from __future__ import annotations

from typing import Any

import click

from logitlab.cli.common import (EXIT_CHECK_FAILED, REQUIRE_CHOICES, finish, handle_errors, require_exit_code,
                                 run_experiment)
from logitlab.cli.options import (MODEL_HELP, check_memory, detection_option, memory_check_option, positions_from,
                                  positions_option, prompt_inputs, prompt_options, prompts_from, run_log_path,
                                  threshold_options, thresholds_from)
from logitlab.cli.outputs import check_output_paths, report_paths
from logitlab.cli.recording import logged_run_options, record_target
from logitlab.engines import DEFAULT_ENGINE
from logitlab.engines.variant import parse_env, parse_variant
from logitlab.errors import InputError

FALLBACK_CHOICES = ("redecode", "resync", "both")


class MultiValueOption(click.Option):
    """An option that takes every following value up to the next option: ``--k 1 2 4 8``.

    ``--k 1,2,4`` and repeated ``--k 1 --k 2`` work too.
    """

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        for name in self.opts:
            option = parser._long_opt.get(name) or parser._short_opt.get(name)
            if option is None:
                continue
            process = option.process

            def greedy(value: Any, state: Any, _process=process) -> None:
                values = [value]
                while state.rargs and not str(state.rargs[0]).startswith("-"):
                    values.append(state.rargs.pop(0))
                _process(" ".join(values), state)

            option.process = greedy


def _ks(values: tuple[str, ...]) -> tuple[int, ...]:
    out = []
    for value in values:
        for part in value.replace(",", " ").split():
            try:
                out.append(int(part))
            except ValueError:
                raise InputError(f"--k takes integers >= 1 (e.g. --k 1 2 4 8), got {part!r}") from None
    return tuple(out)


def _guard(value: str | None) -> float | str | None:
    if value is None or value.strip().lower() in ("off", "none", ""):
        return None
    if value.strip().lower() == "auto":
        return "auto"
    try:
        return float(value)
    except ValueError:
        raise InputError(f"--guard takes a margin in logits (e.g. 0.5), 'auto' or 'off', got {value!r}") from None


def _guard_k(opts: dict) -> int:
    """``--guard-k`` (default 4); given without ``--guard``: InputError, as ``--require-identical`` is."""
    if opts["guard_k"] is not None and _guard(opts["guard"]) is None:
        raise InputError("--guard-k is the block size of the guarded loop: add --guard TAU or --guard auto, or "
                         "drop it")
    return 4 if opts["guard_k"] is None else opts["guard_k"]


@click.command()
@click.option("--model", type=str, default=None, help=MODEL_HELP)
@click.option("--engine", default=DEFAULT_ENGINE, show_default=True,
              help="Engine; its sessions must decode K tokens in one call (the M=K verify path).")
@click.option("--options", "options", default="", metavar="SPEC",
              help="Engine options KEY=VALUE[,KEY=VALUE], or a spec [ENGINE:][MODEL][?KEY=VALUE&...].")
@click.option("--env", "env", multiple=True, metavar="NAME[=VALUE]", help="Environment knob set while loading.")
@click.option("--k", "ks", cls=MultiValueOption, multiple=True, metavar="K [K ...]",
              help="Verify block sizes of the K sweep.  [default: 1 2 4 8]")
@click.option("--tokens", "n_decode", type=int, default=64, show_default=True, help="Greedy M=1 tokens per prompt.")
@prompt_options("the 9 built-in prompts: prose, code, lists, numbers, dialogue, JSON", many=True)
@positions_option
@click.option("--guard", "guard", default=None, metavar="TAU|auto|off",
              help="Also run a speculative greedy loop under the near-tie guard: accept a verify row's argmax "
                   "when its top1–top2 margin ≥ TAU (logits), else decide that position by M=1. 'auto': TAU from "
                   "a calibration replay on held-out prompts.")
@click.option("--guard-k", type=int, default=None, help="Verify block size of the guarded loop (default 4).")
@click.option("--guard-safety", type=float, default=None,
              help="auto: TAU = this × the noise floor of the calibration verify rows (p99 of their top-k Δ "
                   "spread). Default: --floor-factor, the factor beyond which a verdict calls a row divergent.")
@click.option("--guard-fallback", type=click.Choice(FALLBACK_CHOICES), default="both", show_default=True,
              help="redecode: roll back to the flagged position and decode it M=1 on the current KV; resync: "
                   "replay M=1 from the last M=1-written position (exact, costs M=1 work).")
@click.option("--calibration-prompts", type=str, default=None,
              help="Prompts file for --guard auto (default: 3 built-in held-out prompts).")
@detection_option("each K's M=K rows (every prompt's, pooled)", "every fault shape for the K the verdict is "
                  "judged on, the argmax-up shape for the others; 2-7 s for 2 prompts × 32 tokens, K 1 4, on the "
                  "embedded model")
@memory_check_option
@threshold_options
@click.option("--require", type=click.Choice(REQUIRE_CHOICES), default=None,
              help="Exit 1 when the verdict over the K sweep is worse than this.")
@click.option("--require-identical", is_flag=True,
              help="Exit 1 when a guarded run is not token-identical to M=1 greedy.")
@logged_run_options("verify")
@handle_errors
def verify(**opts: Any) -> None:
    """Speculative-decoding verify probe: M=1 greedy vs M=K verify, K sweep, cause.

    For each prompt, decodes --tokens greedily one token per call (M=1) and
    keeps every position's logits; then replays the same tokens as M=K verify
    blocks (the drafts are the greedy tokens, so each verify row has exactly
    the inputs of its M=1 forward) and compares every row on the full
    vocabulary. Reports the K sweep, every argmax flip, and the cause:
    ULP or float noise, near-tie noise, a lossy path, a systematic offset,
    a wrong result, or a verify path that already differs at K=1.

    \b
    Examples:
      logitlab verify
      logitlab verify --k 1 2 4 8 16 --tokens 128 --prompts prompts.jsonl --json v.json
      logitlab verify --guard auto
      logitlab verify --options n_ubatch=1 --k 2 4
      logitlab verify --tokens 8 --positions last

    --positions: verify compares only the decode steps' rows (M=1 vs M=K), run
    positions N … N+D-1 of an N-token prompt: 'prompt' selects none of them,
    'last' each prompt's last decode step.
    """
    from logitlab.experiments.prompts import builtin_prompts, load_prompts
    from logitlab.experiments.verify.run import DEFAULT_KS, FALLBACKS, VerifyConfig, VerifyExperiment

    prompts = prompts_from(opts, lambda: builtin_prompts("default"))
    guarded = _guard(opts["guard"]) is not None
    if opts["require_identical"] and not guarded:
        raise InputError("--require-identical checks a guarded run: add --guard TAU or --guard auto")
    if opts["calibration_prompts"] and _guard(opts["guard"]) != "auto":
        raise InputError("--calibration-prompts sets τ for --guard auto: add --guard auto, or leave the file out")
    calibration = (load_prompts(opts["calibration_prompts"], "--calibration-prompts") if opts["calibration_prompts"]
                   else builtin_prompts("calibration"))
    fallback = opts["guard_fallback"]
    variant = parse_variant(opts["options"], "verify", default_engine=opts["engine"], default_model=opts["model"],
                            env=parse_env(opts["env"]), option="--options")
    log_path = run_log_path(opts, "verify")
    check_output_paths(**report_paths(opts),
                       log=log_path,
                       inputs=[variant.model, *prompt_inputs(opts), opts["calibration_prompts"]])
    checked = [*prompts, *(calibration if _guard(opts["guard"]) == "auto" else ())]
    positions = positions_from(opts)
    check_memory(opts, "verify", [variant], [p.text for p in checked], opts["n_decode"], selected=positions)
    target = record_target(opts)
    config = VerifyConfig(
        variant=variant,
        prompts=tuple(prompts), ks=_ks(opts["ks"]) or DEFAULT_KS, n_decode=opts["n_decode"], top_k=opts["top_k"],
        thresholds=thresholds_from(opts), guard=_guard(opts["guard"]), guard_k=_guard_k(opts),
        guard_safety=opts["guard_safety"], guard_fallbacks=FALLBACKS if fallback == "both" else (fallback,),
        calibration_prompts=tuple(calibration), detection=opts["detection"], positions=positions,
    )
    result, error = run_experiment(VerifyExperiment, config, quiet=opts["quiet"], describe=_progress,
                                   log_path=log_path)
    finish(result, error, opts, target=target, log_path=log_path,
           interrupted="the runs measured so far are in the reports and the log",
           exit_code=lambda r: _exit_code(r, opts["require"], opts["require_identical"]))


def _progress(kind: str, data: dict[str, Any]) -> dict[str, Any] | None:
    if kind == "start":
        return {"total": data["steps"], "description": "verify"}
    if kind == "step":
        return {"advance": 1, "description": data["description"]}
    return None


def _exit_code(result: Any, require: str | None, require_identical: bool) -> int:
    code = require_exit_code(result.verdict_word, require, "the verify verdict")
    if require_identical and result.guard_identical is False:
        bad = sorted({f"{r.prompt} ({r.fallback})" for r in result.guard.results if not r.identical})
        click.echo(f"require identical: guarded output differs from M=1 greedy on {', '.join(bad)}", err=True)
        code = EXIT_CHECK_FAILED
    return code
