"""``logitlab invariance matrix``: every invariance axis an engine supports, for one variant and its prompts."""

from __future__ import annotations

import sys
from typing import Any

import click

from logitlab.cli.common import EXIT_INTERRUPTED, REQUIRE_CHOICES, finish, handle_errors, require_exit_code, \
    run_experiment
from logitlab.cli.options import (detection_option, output_options, prompt_inputs, prompt_options, prompts_from,
                                  threshold_options, thresholds_from)
from logitlab.cli.outputs import check_output_paths, report_paths
from logitlab.cli.recording import record_options, record_target
from logitlab.engines import DEFAULT_ENGINE
from logitlab.engines.variant import parse_env, parse_variant
from logitlab.errors import InputError, Interrupted

#: The axes, as ``--help`` lists them (the experiment's ``AXES``, kept here so that --help imports no experiment).
AXES_HELP = ("determinism, batch, batch-position, prefill-decode, chunked-prefill, threads, verify, process, "
             "concurrent, prefix-cache")


def parse_axes(text: str | None) -> tuple[str, ...] | None:
    """``--axes a,b,c`` as a tuple (None: not given, every axis); validated by the matrix's config."""
    if text is None:
        return None
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse_buckets(text: str | None) -> tuple[int, ...] | None:
    """``--buckets 1,2,4`` as a tuple of sizes (None: not given, the engine's; "": none).

    Raises:
        InputError: a part that is not an integer.
    """
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InputError(f"--buckets takes batch sizes like 1,2,4,8, got {text!r}") from None


def matrix_prompts(opts: dict[str, Any]) -> list[Any]:
    """The prompts of :func:`~logitlab.cli.options.prompt_options` (``--prompt`` repeatable, ``--prompt-file``,
    ``--prompts``: one of them), else the built-in prose prompt (named ``built-in``).

    Raises:
        InputError: two of the options; a missing, unreadable or empty file; an empty prompt.
    """
    from logitlab.experiments.prompts import DEFAULT_PROMPT, Prompt

    return prompts_from(opts, lambda: [Prompt("built-in", DEFAULT_PROMPT, "prose")])


@click.command("matrix")
@click.option("--engine", default=DEFAULT_ENGINE, show_default=True,
              help="Engine: llamacpp (every local axis), hf (no chunked-prefill), ortgenai (determinism, "
                   "prefill-decode, verify, process), openai:URL (determinism, concurrent, prefix-cache; on the "
                   "server's top-k).")
@click.option("--model", default=None, help="Model file or folder (default: the embedded SmolLM2-135M Q4_1 GGUF; "
                                            "hf de-quantises it).")
@click.option("--variant", "--candidate", "spec", default="",
              help="Engine options: KEY=VALUE[,KEY=VALUE] or [ENGINE:][MODEL][?KEY=VALUE&...] (as the other "
                   "probes); an option axis replaces the options it sweeps.")
@click.option("--env", "env", multiple=True, metavar="NAME[=VALUE]", help="Environment knob while running.")
@prompt_options("a built-in prose prompt", many=True)
@click.option("--axes", "axes", default=None, metavar="A,B,...",
              help=f"Axes to run (default: every axis the engine supports): {AXES_HELP}.")
@click.option("--max-batch", type=int, default=4, show_default=True,
              help="batch: batch sizes 1..B; batch-position: the batch size B.")
@click.option("--buckets", "buckets", default=None, metavar="B,B,...",
              help="batch: the engine's batch buckets (e.g. CUDA-graph capture sizes 1,2,4,8,16); the sizes b-1, b, "
                   "b+1 around each also run (default: the buckets the engine declares, BATCH_BUCKETS; '' for none).")
@click.option("--bucket-cap", type=int, default=16, show_default=True,
              help="batch: leave out the buckets above this size.")
@click.option("--runs", type=int, default=5, show_default=True,
              help="determinism, concurrent, prefix-cache: runs of the same greedy workload.")
@click.option("--background", type=int, default=3, show_default=True,
              help="concurrent: other requests in flight beside runs 2..R (llama-server: --parallel N+1 slots).")
@click.option("--tokens", "n_decode", type=int, default=8, show_default=True,
              help="Greedy tokens after each prompt (every axis but batch, which runs the prompt alone).")
@threshold_options
@click.option("--require", type=click.Choice(REQUIRE_CHOICES), default=None,
              help="Exit 1 when the worst axis's verdict is worse than this.")
@detection_option("each probe's worst check", "about a second per probe on the embedded model")
@click.option("--self-check", is_flag=True,
              help="Run the inverse controls of the determinism, batch, batch-position and prefill-decode axes: the "
                   "same path with one planted input token, which each probe must see; one it misses makes the axis "
                   "vacuous.")
@click.option("--speed", "speed_spec", default=None, metavar="SPEC",
              help="The variant without the mode (KEY=VALUE,... or [ENGINE:][MODEL][?...]): also run ab's paired "
                   "speed design, this as the control and --variant as the candidate, on the first prompt, and "
                   "report the mode's cost: throughput (decode), latency (prefill) and load time apart.")
@click.option("--speed-repeats", type=int, default=3, show_default=True,
              help="--speed: ABBA/BAAB blocks (4 timed runs each).")
@output_options()
@record_options()
@handle_errors
def matrix_command(**opts: Any) -> None:
    """Every invariance axis the engine supports, for one variant and one or more prompts, in one report.

    Per axis: the verdict, the share of bit-identical rows, the ULP and KLD
    tail, the first divergent position and the detection limit; axes the
    engine cannot run are listed with the reason.

    \b
    determinism      the same greedy run R times: K unique logit arrays of R runs
    batch            the prompt alone vs in batches of 1..B (and around the engine's buckets)
    batch-position   the prompt in every slot of a mixed batch of B, left and right padding
    prefill-decode   position p from one prefill vs from a decode step
    chunked-prefill  the prefill in chunks (llama.cpp n_ubatch 512, 32, 4)
    threads          1 vs 2 threads (llama.cpp n_threads, hf torch threads)
    verify           M=1 decode vs M=K verify blocks (K=4; needs --tokens >= 2)
    process          a fresh engine process vs a warm one (after another prompt)
    concurrent       a server request alone vs beside N other requests
    prefix-cache     a server request on a prefix-cache miss vs hits

    \b
    Examples:
      logitlab invariance matrix
      logitlab invariance matrix --engine hf --prompts prompts.jsonl --markdown matrix.md
      logitlab invariance matrix --axes batch,threads --max-batch 8 --require bit-exact
      logitlab invariance matrix --variant n_threads=1 --speed n_threads=2
    """
    from logitlab.experiments.invariance_matrix import InvarianceMatrix, MatrixConfig

    variant = parse_variant(opts["spec"], "probe", default_engine=opts["engine"], default_model=opts["model"],
                            env=parse_env(opts["env"]), option="--variant")
    config = MatrixConfig(variant=variant, prompts=tuple(matrix_prompts(opts)), axes=parse_axes(opts["axes"]),
                          max_batch=opts["max_batch"], buckets=parse_buckets(opts["buckets"]),
                          bucket_cap=opts["bucket_cap"], runs=opts["runs"], background=opts["background"],
                          n_decode=opts["n_decode"],
                          top_k=opts["top_k"], thresholds=thresholds_from(opts), detection=opts["detection"],
                          self_check=opts["self_check"], speed_repeats=opts["speed_repeats"],
                          speed=None if opts["speed_spec"] is None else parse_variant(
                              opts["speed_spec"], "control", default_engine=opts["engine"],
                              default_model=opts["model"], env=parse_env(opts["env"]), option="--speed"))
    config.validate()
    check_output_paths(**report_paths(opts), inputs=[variant.model, *prompt_inputs(opts)])
    target = record_target(opts)

    def describe(kind: str, data: dict[str, Any]) -> dict[str, Any] | None:
        if kind == "start":
            return {"total": data["steps"], "description": "matrix"}
        if kind == "step":
            return {"advance": 1, "description": f"matrix: {data['what']}"}
        if kind == "detail":
            return {"description": f"matrix: {data['what']}"}
        return None

    try:
        result, error = run_experiment(InvarianceMatrix, config, quiet=opts["quiet"], describe=describe)
    except Interrupted:  # before any probe ran: nothing to write
        click.echo("error: interrupted before the matrix ran; nothing was measured", err=True)
        sys.exit(EXIT_INTERRUPTED)
    finish(result, error, opts, target=target, interrupted="what was measured so far is in the reports",
           exit_code=lambda r: _require_exit_code(r, opts["require"]))


def _require_exit_code(result: Any, require: str | None) -> int:
    """``--require``'s exit code; an axis that could not have failed (vacuous), or whose runs' greedy texts
    differ behind bit-exact scores, meets no requirement."""
    code = require_exit_code(result.verdict_word, require, "the worst axis's verdict")
    if require and code == 0 and result.vacuous:
        click.echo(f"error: an axis is vacuous: {result.vacuous[0]}", err=True)
        return 1
    differs = [f"{a.axis}: {p.generation_differs}" for a in result.ran for p in a.probes if p.generation_differs]
    if require and code == 0 and differs:
        click.echo(f"error: not invariant: {differs[0]}", err=True)
        return 1
    return code
