"""``logitlab dump`` and ``logitlab dump-diff``: capture intermediate tensors, find where two runs part."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from logitlab.cli.common import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, fail, handle_errors, make_progress
from logitlab.cli.options import (output_options, prompt_from, prompt_inputs, prompt_options, variant_pair,
                                  variant_pair_options)
from logitlab.cli.outputs import (check_output_paths, report_paths, show_report, write_json_output,
                                  write_reports)


@click.command()
@variant_pair_options(
    engine_help="Engine of both variants (with dump capture: llamacpp, hf).",
    candidate_help="Candidate spec, same form. Without it only the control is dumped.",
    slots="the {side}")
@prompt_options("a short built-in prompt, ~12 tokens")
@click.option("--tokens", "n_decode", type=click.IntRange(0), default=4, show_default=True,
              help="Decode steps (M=1): greedy for the control, replayed by the candidate.")
@click.option("--names", default=None, metavar="GLOB[,GLOB]",
              help="Tensor names to keep, e.g. 'attn_norm,kqv_out,ffn_out,l_out,result_*' (default: all named).")
@click.option("--layers", default=None, metavar="RANGES", help="Layers to keep, e.g. 0-3,7 (default: all).")
@click.option("--positions", default=None, metavar="SPEC",
              help="Token positions to keep, the SPEC of ab and verify: all, prompt, decode, last (the run's last "
                   "position), every:K, and position numbers A, A-B, A- (0 is the first prompt token's; "
                   "comma-separated, united), e.g. 0,10-12 or prompt,last. Default: all.")
@click.option("--max-bytes", default="2GB", show_default=True,
              help="Stop storing tensors past this size per variant (e.g. 500MB, 4GiB); the dump is marked "
                   "incomplete.")
@click.option("-o", "--out", "out_dir", required=True, type=str,
              help="Dump folder. With --candidate: OUT/control and OUT/candidate.")
@click.option("--force", is_flag=True, help="Replace an earlier logitlab dump in the folder.")
@output_options(json_help="Write a summary of the capture(s) as JSON.", markdown=False)
@handle_errors
def dump(**opts: Any) -> None:
    """Dump named intermediate tensors (per layer and position) of one or two variants.

    Runs one prefill and --tokens decode steps and stores every named tensor
    of llama.cpp's graph (attn_norm-3, kqv_out-0, ffn_out-3, l_out-3,
    result_output …), or with --engine hf the outputs and inputs of the
    transformers modules under the same names, that passes
    --names/--layers/--positions: one safetensors file per step plus
    manifest.json. The control decodes greedily; the candidate replays its
    tokens, so both see the same inputs.

    \b
    Examples:
      logitlab dump --candidate flash_attn=1 --out dumps/
      logitlab dump-diff dumps/control dumps/candidate
      logitlab dump --control n_threads=1 --out a/ --names 'l_out,result_output' --layers 0-3
      logitlab dump --engine hf --control dtype=float32 --candidate dtype=bfloat16 --out hf/
      logitlab dump --control llamacpp: --candidate hf: --layers 0-3 --out cross/
    """
    from logitlab.dumps.filters import TensorFilter
    from logitlab.dumps.sizes import parse_size
    from logitlab.dumps.run import DEFAULT_DUMP_PROMPT, capture_function, check_out_dir, removed_if_unused
    from logitlab.report.dumps import capture_lines

    pair = opts["candidate"] is not None or bool(opts["candidate_env"])
    out = Path(opts["out_dir"])
    control, candidate = variant_pair(opts)
    check_output_paths(**report_paths(opts), inputs=[control.model, candidate.model, *prompt_inputs(opts)],
                       folders={"out": opts["out_dir"]})
    prompt = prompt_from(opts, "dump", default=DEFAULT_DUMP_PROMPT)
    select = TensorFilter.parse(opts["names"], opts["layers"], opts["positions"])
    max_bytes = parse_size(opts["max_bytes"])
    for variant in (control, candidate) if pair else (control,):
        capture_function(variant.engine)  # an engine without capture fails before any folder is made
    folders = (out / "control", out / "candidate") if pair else (out,)
    with removed_if_unused(*folders):  # a folder made here goes again when the command fails before writing to it
        for folder in folders:
            check_out_dir(folder, force=opts["force"])
        results = _capture(opts, control, candidate if pair else None, prompt, select, max_bytes)
    for name, result in results.items():
        if opts["quiet"]:  # a capture stopped early is still said, as a warning
            if result.manifest.stopped:
                click.echo(f"warning: {name}: stopped early: {result.manifest.stopped}", err=True)
            continue
        for line in capture_lines(name, result):
            click.echo(line)
    if pair and not opts["quiet"]:
        click.echo(f"next: logitlab dump-diff {out / 'control'} {out / 'candidate'}")
    if opts["json_path"]:
        write_json_output(opts["json_path"], {name: _capture_summary(r) for name, r in results.items()})
    sys.exit(EXIT_OK)


def _capture(opts: dict[str, Any], control: Any, candidate: Any, prompt: Any, select: Any,
             max_bytes: int | None) -> dict[str, Any]:
    """Dump the control (and the candidate, if not None) under a progress bar: {label: CaptureResult}."""
    from logitlab.dumps.sizes import format_bytes
    from logitlab.dumps.run import dump_pair, dump_variant
    from logitlab.report.text import plural

    quiet = opts["quiet"]
    label = ["control"]
    with make_progress(quiet) as progress:
        task = progress.add_task("loading", total=None)

        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "variant":
                label[0] = data["label"]
                progress.update(task, completed=0, total=None, description=f"{label[0]}: loading")
            elif kind == "estimate" and not quiet:  # --quiet: a capture that stops early is one warning at the end
                line = (f"{label[0]}: estimated dump size {format_bytes(data['bytes'])} "
                        f"({format_bytes(data['bytes_per_token'])} per position × "
                        f"{plural(data['positions'], 'position')})")
                if max_bytes is not None and data["bytes"] > max_bytes:
                    line += f"; more than --max-bytes {format_bytes(max_bytes)}: the capture will stop early"
                progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
            elif kind == "step":
                step = data["step"]
                progress.update(task, total=data["total"], advance=1,
                                description=f"{label[0]}: {step.kind} {step.positions[0]}-{step.positions[1] - 1}")

        common = dict(select=select, max_bytes=max_bytes, force=opts["force"], on_event=on_event)
        if candidate is None:
            return {"control": dump_variant(control, prompt, opts["n_decode"], opts["out_dir"], **common)}
        return dict(zip(("control", "candidate"),
                        dump_pair(control, candidate, prompt, opts["n_decode"], opts["out_dir"], **common)))


def _capture_summary(result: Any) -> dict[str, Any]:
    m = result.manifest
    return {"path": str(result.path), "complete": m.complete, "stopped": m.stopped, "n_tensors": len(m.tensors),
            "n_steps": len(m.steps), "bytes_written": m.bytes_written, "estimate_bytes": m.estimate_bytes,
            "prompt_ids": m.prompt_ids, "generated": m.generated, "engine": m.engine, "variant": m.variant}


@click.command("dump-diff")
@click.argument("dump_a", type=str)
@click.argument("dump_b", type=str)
@click.option("--format", "fmt", type=click.Choice(("auto", "logitlab", "raw-f32", "raw-i32", "npy", "safetensors")),
              default="auto", show_default=True,
              help="How to read both dumps. auto: logitlab folders by their manifest, else by file extension "
                   "(.bin/.f32 float32, .i32 int32, .npy, .safetensors).")
@click.option("--shape", "shapes", multiple=True, metavar="[NAME=]DIMS",
              help="Shape of raw tensors, e.g. 576, 9x64 or attn_norm=576 (repeatable). Default: a shapes.json in "
                   "the folder, else flat vectors.")
@click.option("--prefix", "prefixes", multiple=True, metavar="PREFIX",
              help="File-name prefix before <name>-<layer>_pos<pos> (once for both dumps, twice for A then B). "
                   "Default: inferred.")
@click.option("--names", default=None, metavar="GLOB[,GLOB]", help="Compare only these tensor names.")
@click.option("--layers", default=None, metavar="RANGES", help="Compare only these layers.")
@click.option("--positions", default=None, metavar="SPEC",
              help="Compare only these positions: the SPEC of dump, ab and verify (all, prompt, decode, last, "
                   "every:K, A, A-B, A-). prompt and decode need a logitlab dump (its manifest says where the "
                   "prompt ends); for raw files the last position is the largest either dump holds.")
@click.option("--rows", type=click.IntRange(1), default=10, show_default=True,
              help="Differing tensors listed after the first divergence.")
@click.option("--all", "all_tensors", is_flag=True, help="List every aligned tensor-position.")
@click.option("--require", type=click.Choice(("bit-exact",)), default=None,
              help="Exit 1 unless every aligned tensor is bit-exact and nothing is one-sided or unreadable.")
@output_options(json_help="Write the full result (every tensor) as JSON.")
@handle_errors
def dump_diff(**opts: Any) -> None:
    """Compare two dumps tensor by tensor and name the first divergence.

    Aligns DUMP_A and DUMP_B by (name, layer, position), walks them in A's
    execution order and reports, per tensor, bit-exact or not, differing
    count, max |Δ|, ULP histogram, NMSE and cosine similarity; then the first
    divergent tensor and how the difference grows layer by layer. Tensors on
    one side only are listed. Bad files give one line each and the rest is
    still compared; exit 2 if nothing could be aligned.

    \b
    Examples:
      logitlab dump-diff dumps/control dumps/candidate
      logitlab dump-diff ds4_dumps_a/ ds4_dumps_b/ --format raw-f32 --shape result_output=129280
    """
    from logitlab.dumps.diff import diff_dumps
    from logitlab.dumps.filters import TensorFilter
    from logitlab.dumps.readers import open_dump
    from logitlab.dumps.shapes import ShapeSpec

    check_output_paths(**report_paths(opts),
                       inputs=[opts["dump_a"], opts["dump_b"]])
    shapes = ShapeSpec.parse(opts["shapes"])
    prefixes = list(opts["prefixes"])
    if len(prefixes) > 2:
        fail("--prefix given more than twice: give it once for both dumps, or twice (A, then B)")
    prefix_a = prefixes[0] if prefixes else None
    prefix_b = prefixes[-1] if prefixes else None
    select = TensorFilter.parse(opts["names"], opts["layers"], opts["positions"])
    left = open_dump(opts["dump_a"], format=opts["fmt"], shapes=shapes, prefix=prefix_a)
    right = open_dump(opts["dump_b"], format=opts["fmt"], shapes=shapes, prefix=prefix_b)
    with make_progress(opts["quiet"]) as progress:
        task = progress.add_task("dump-diff", total=len(left.refs) or None)
        result = diff_dumps(left, right, select=select,
                            on_progress=lambda done, total: progress.update(task, completed=done, total=total))
    shown = dict(max_rows=opts["rows"], all_tensors=opts["all_tensors"])
    write_reports(result, opts, **shown)
    if not opts["quiet"]:
        show_report(result, **shown)
    if result.verdict == "nothing-aligned":
        why = (f": {result.problems[0]}" if len(result.problems) == 1 else
               f" ({len(result.problems)} problems, the first: {result.problems[0]})" if opts["quiet"] else
               f" ({len(result.problems)} problems, listed in the report)")  # stdout: not always "above" stderr
        click.echo(f"error: nothing could be compared between {opts['dump_a']} and {opts['dump_b']}{why}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if opts["require"] == "bit-exact" and result.verdict != "bit-exact":
        click.echo(f"require bit-exact: the dump-diff verdict is {result.verdict}", err=True)
        sys.exit(EXIT_CHECK_FAILED)
    sys.exit(EXIT_OK)
