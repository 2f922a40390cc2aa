"""``logitlab explain``: for each flipped or divergent position, a ladder of controls and one cause."""

from __future__ import annotations

import sys
from typing import Any

import click

from logitlab.cli.common import EXIT_INTERRUPTED, EXIT_OK, finish, handle_errors, run_experiment
from logitlab.cli.options import (check_memory, memory_check_option, output_options, prompt_from, prompt_inputs,
                                  prompt_options, threshold_options, thresholds_from, variant_pair,
                                  variant_pair_options)
from logitlab.cli.outputs import check_output_paths, report_paths
from logitlab.errors import Interrupted


@click.command()
@variant_pair_options(
    engine_help="Engine of both variants.",
    candidate_help="Candidate spec, same form. Without it, give --k: M=1 vs M=K of the control.",
    slots="the {side}")
@prompt_options("a built-in prose prompt")
@click.option("--tokens", "n_decode", type=int, default=32, show_default=True, help="Greedy decode steps.")
@click.option("--k", "k", type=int, default=None,
              help="Explain M=1 greedy decode vs the same tokens as M=K verify blocks (one variant: --control).")
@click.option("--width-k", type=int, default=4, show_default=True, help="K of the M=1 vs M=K control.")
@click.option("--batch", type=int, default=4, show_default=True,
              help="Sequences of the alone-vs-in-a-batch control.")
@click.option("--max-positions", "max_positions", type=int, default=8, show_default=True,
              help="Explain at most this many positions (the first flipped or divergent ones). "
                   "(A count; --positions SPEC of ab, verify and golden selects rows.)")
@click.option("--no-dump", is_flag=True, help="Do not dump tensors to find each position's first divergent tensor.")
@memory_check_option
@threshold_options
@output_options()
@handle_errors
def explain(**opts: Any) -> None:
    """Why did these positions flip? Controls and one cause per position.

    Runs the pair (the control's greedy run and the candidate replaying its
    tokens, or with --k: M=1 greedy decode and the same tokens as M=K verify
    blocks), judges it against its own noise floor, and for every argmax flip
    and every position outside the floor runs the controls the engine
    supports: a rerun with identical inputs, prefill vs decode, alone vs in a
    batch, M=1 vs M=K, an exact-tie check, the margin against the floor, both
    top-k lists, and the first divergent tensor (engines that can dump). Then
    one cause per position: nondeterministic, tie-break, bug, batch-variant,
    width-variant, kernel-path or near-tie.

    \b
    Examples:
      logitlab explain --candidate flash_attn=1
      logitlab explain --k 4 --tokens 32
      logitlab explain --engine hf --control dtype=float32 --candidate dtype=bfloat16 --json why.json
    """
    from logitlab.experiments.explain import ExplainConfig, ExplainExperiment

    control, candidate = variant_pair(opts)
    config = ExplainConfig(
        control=control, candidate=None if opts["candidate"] is None and opts["k"] is not None else candidate,
        prompt=prompt_from(opts, "explain"), n_decode=opts["n_decode"], k=opts["k"],
        width_k=opts["width_k"], batch=opts["batch"], max_positions=opts["max_positions"], top_k=opts["top_k"],
        thresholds=thresholds_from(opts), dump=not opts["no_dump"],
    )
    config.validate()
    check_output_paths(**report_paths(opts),
                       inputs=[control.model, candidate.model, *prompt_inputs(opts)])
    check_memory(opts, "explain" if config.mode == "ab" else "explain --k",
                 [control] if config.candidate is None else [control, candidate], [config.prompt], config.n_decode)
    try:
        result, error = run_experiment(ExplainExperiment, config, quiet=opts["quiet"], describe=_progress,
                                       first="explain: loading")
    except Interrupted:  # before the pair ran: nothing to write
        click.echo("error: interrupted before the pair ran; nothing was measured", err=True)
        sys.exit(EXIT_INTERRUPTED)
    finish(result, error, opts, interrupted="the positions explained so far are in the reports",
           exit_code=lambda _: EXIT_OK)


def _progress(kind: str, data: dict[str, Any]) -> dict[str, Any] | None:
    if kind == "start":
        return {"total": data["steps"]}
    if kind == "step":
        return {"advance": 1, "description": f"explain: {data['what']}"}
    return None
