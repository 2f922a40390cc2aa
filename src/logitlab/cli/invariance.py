"""``logitlab invariance``: batch, prefill-decode and determinism probes of one engine variant."""

from __future__ import annotations

import sys
from typing import Any, Callable

import click

from logitlab.cli.common import (EXIT_INTERRUPTED, REQUIRE_CHOICES, finish, handle_errors, require_exit_code,
                                 run_experiment)
from logitlab.cli.options import (check_memory, memory_check_option, output_options, prompt_from, prompt_inputs,
                                  prompt_options, threshold_options, thresholds_from)
from logitlab.cli.outputs import check_output_paths, report_paths
from logitlab.engines import DEFAULT_ENGINE, engine_class
from logitlab.engines.variant import parse_env, parse_variant
from logitlab.errors import InputError, Interrupted
from logitlab.experiments.isolation_levels import ISOLATION_LEVELS



def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Engine, prompt, thresholds and report flags shared by every probe."""
    options = [
        click.option("--engine", default=DEFAULT_ENGINE, show_default=True, help="Engine with sessions: llamacpp, hf, ortgenai (batch needs one that batches: llamacpp, hf)."),
        click.option("--model", default=None, help="Model file or folder (default: the embedded SmolLM2-135M "
                                                   "Q4_1 GGUF; hf de-quantises it)."),
        click.option("--variant", "--candidate", "spec", default="",
                     help="Engine options: KEY=VALUE[,KEY=VALUE] or [ENGINE:][MODEL][?KEY=VALUE&...] (as ab's "
                          "--control); --candidate is the same option, spelled as in ab, verify and golden check."),
        click.option("--env", "env", multiple=True, metavar="NAME[=VALUE]", help="Environment knob while running."),
        prompt_options("a built-in prose prompt"),
        threshold_options,
        memory_check_option,
        click.option("--require", type=click.Choice(REQUIRE_CHOICES), default=None,
                     help="Exit 1 when the verdict is worse than this."),
        click.option("--detection-limit/--no-detection-limit", "detection", default=True, show_default=True,
                     help="Plant standard faults into a copy of the worst check's observed run and report the "
                          "smallest that would have read divergent."),
        click.option("--self-check", is_flag=True,
                     help="Run the probe's inverse controls: the same path with one planted input token, which the "
                          "probe must see; one it misses makes the probe vacuous (exit 1 with --require)."),
        output_options(),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group()
def invariance() -> None:
    """Does one engine variant give the same logits when only the way it runs changes?

    \b
    batch           the prompt alone vs inside a batch of B sequences (padded on hf)
    prefill-decode  position p from one prefill vs prefill of p tokens + one decode step
    determinism     the same greedy run R times: distinct logit arrays and texts
    matrix          every axis the engine supports (the three above, chunked
                    prefill, threads) for one variant and its prompts, in one report

    Each probe ends in the verdicts of `ab` (bit-exact, ulp-noise, noise, near-tie,
    lossy, systematic-offset, divergent), with the same --json and --markdown reports.
    """


def _batch_sizes(values: tuple[str, ...], more: tuple[str, ...]) -> tuple[int, ...]:
    sizes = []
    for item in [*values, *more]:
        for part in str(item).split(","):
            if not part.strip():
                continue
            try:
                sizes.append(int(part))
            except ValueError:
                raise InputError(f"--batch takes whole numbers (batch sizes), got {part!r}") from None
    return tuple(sizes) or (1, 4)


@invariance.command("batch")
@click.option("--batch", "batch", multiple=True, metavar="B [B ...]",
              help="Batch sizes (default 1 4); each B > 1 is compared with the prompt alone (B=1). "
                   "'--batch 1 4', '--batch 1,4' and '--batch 1 --batch 4' are the same.")
@click.argument("more_sizes", nargs=-1, metavar="")
@click.option("--padding", type=click.Choice(("left", "right", "both")), default=None,
              help="Padding side on engines that pad (hf); default: both. llama.cpp batches by sequence id "
                   "without padding.")
@click.option("--fill", type=click.Choice(("same", "mixed")), default=None,
              help="The other sequences: copies of the prompt (same) or other lengths (mixed). "
                   "Default: mixed on hf (padding needs other lengths), same on llamacpp.")
@click.option("--slots", is_flag=True,
              help="Move the prompt through every slot of each batch B > 1 (position in batch), the other "
                   "sequences mixed around it: one check per size, slot and padding.")
@common_options
@handle_errors
def batch_command(**opts: Any) -> None:
    """The prompt alone (B=1) vs the same prompt inside a batch of B sequences.

    Every prompt position is compared on the full vocabulary. On hf the batch
    is one padded forward (attention mask; position ids count real tokens, as
    generate does); on llamacpp, B parallel sequences (seq ids) in one
    llama_decode on one context.

    \b
    Examples:
      logitlab invariance batch --engine hf --batch 1 4 --padding left
      logitlab invariance batch --engine llamacpp --batch 1 2 8 --variant flash_attn=1
      logitlab invariance batch --engine hf --batch 4 --slots
    """
    choice = opts["padding"]  # None: not given (both sides, and no note on engines that do not pad)
    padding = None if choice is None else ("right", "left") if choice == "both" else (choice,)
    _run("batch", opts, batch_sizes=_batch_sizes(opts["batch"], opts["more_sizes"]), padding=padding,
         fill=opts["fill"], slots=opts["slots"])


@invariance.command("prefill-decode")
@click.option("--tokens", "n_decode", type=int, default=16, show_default=True,
              help="Greedy tokens appended to the prompt before probing.")
@common_options
@handle_errors
def prefill_decode_command(**opts: Any) -> None:
    """Position p from one full prefill vs prefill of p tokens plus one decode step.

    Every position of the prompt plus --tokens greedy tokens (position 0 from a
    one-token prefill); on hf also vs recomputing position p without a KV cache.

    \b
    Examples:
      logitlab invariance prefill-decode --engine llamacpp
      logitlab invariance prefill-decode --engine hf --variant dtype=bfloat16 --tokens 8
    """
    _run("prefill-decode", opts, n_decode=opts["n_decode"])


@invariance.command("determinism")
@click.option("--runs", type=int, default=10, show_default=True, help="Runs R of the same greedy workload.")
@click.option("--tokens", "n_decode", type=int, default=32, show_default=True, help="Greedy decode steps per run.")
@click.option("--isolation", type=click.Choice(ISOLATION_LEVELS), default="session", show_default=True,
              help="Fresh session, engine object or process per run.")
@common_options
@handle_errors
def determinism_command(**opts: Any) -> None:
    """The same greedy run R times: distinct logit arrays, distinct texts, first divergences.

    \b
    Examples:
      logitlab invariance determinism --runs 20
      logitlab invariance determinism --engine hf --runs 5 --isolation process
    """
    _run("determinism", opts, runs=opts["runs"], n_decode=opts["n_decode"], isolation=opts["isolation"])


def _run(probe: str, opts: dict[str, Any], **fields: Any) -> None:
    from logitlab.experiments.invariance import InvarianceConfig, InvarianceProbe

    variant = parse_variant(opts["spec"], "probe", default_engine=opts["engine"], default_model=opts["model"],
                            env=parse_env(opts["env"]), option="--variant")
    check_output_paths(**report_paths(opts),
                       inputs=[variant.model, *prompt_inputs(opts)])
    config = InvarianceConfig(
        probe=probe,
        variant=variant,
        prompt=prompt_from(opts, f"invariance {probe}"),
        top_k=opts["top_k"], thresholds=thresholds_from(opts), self_check=opts["self_check"],
        detection=opts["detection"], **fields,
    )
    config.validate()
    pads = probe == "batch" and engine_class(variant.engine).supports("padded-batch")
    units = {"batch": config.batch_sequences(pads), "determinism": config.runs}.get(probe, 0)
    check_memory(opts, f"invariance {probe}", [variant], [config.prompt], fields.get("n_decode", 0), units=units)

    def describe(kind: str, data: dict[str, Any]) -> dict[str, Any] | None:
        if kind == "start":
            return {"total": data["steps"], "description": probe}
        if kind == "step":
            return {"advance": 1, "description": f"{probe}: {data['what']}"}
        return None

    try:
        result, error = run_experiment(InvarianceProbe, config, quiet=opts["quiet"], describe=describe)
    except Interrupted:  # while loading: nothing to write
        click.echo("error: interrupted before the probe ran; nothing was measured", err=True)
        sys.exit(EXIT_INTERRUPTED)
    finish(result, error, opts, interrupted="what was measured so far is in the reports",
           exit_code=lambda r: _require_exit_code(r, opts["require"]))


def _require_exit_code(result: Any, require: str | None) -> int:
    """``--require``'s exit code; a vacuous probe (it could not have failed), or runs whose greedy texts differ
    behind bit-exact scores, meet no requirement."""
    code = require_exit_code(result.verdict_word, require)
    if require and code == 0 and result.vacuous:
        click.echo(f"error: the probe is vacuous: {result.vacuous}", err=True)
        return 1
    if require and code == 0 and result.generation_differs:
        click.echo(f"error: not invariant: {result.generation_differs}", err=True)
        return 1
    return code


def _add_matrix() -> None:
    from logitlab.cli.invariance_matrix import matrix_command

    invariance.add_command(matrix_command)


_add_matrix()
