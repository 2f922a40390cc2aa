"""``logitlab golden``: record a build's logits, check later builds against them, update with a reason."""

from __future__ import annotations

import sys
from typing import Any, Callable

import click

from logitlab.cli.common import EXIT_CHECK_FAILED, EXIT_OK, REQUIRE_CHOICES, handle_errors, make_progress
from logitlab.cli.options import (MODEL_HELP, SPEC_HELP, FiniteRange, apply_options, check_memory, detection_option,
                                  memory_check_option, output_options, positions_from, positions_option,
                                  prompt_inputs, prompt_options, prompts_from, threshold_options, thresholds_from)
from logitlab.cli.outputs import check_output_paths, report_paths, show_report, write_reports
from logitlab.cli.recording import record_options, record_result, record_target
from logitlab.errors import InputError

#: Verdicts ``--allow`` accepts (divergent is never a pass).
ALLOW_CHOICES = REQUIRE_CHOICES


def variant_options(*, recorded: bool, under_test: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--engine --model --variant --env``: one variant (``recorded``: changes to the golden's).

    ``under_test``: the variant judged against the golden (``golden check``) is spelled ``--candidate``, as in
    ``ab``, ``verify`` and ``sweep``; ``--variant`` stays an alias.
    """
    from logitlab.engines import DEFAULT_ENGINE

    keep = " (default: the golden's)" if recorded else ""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        return apply_options(func, [
            click.option("--engine", default=None if recorded else DEFAULT_ENGINE, show_default=not recorded,
                         help=f"Engine: NAME, or NAME:TARGET for cmd/openai{keep}."),
            click.option("--model", default=None, help=MODEL_HELP if not recorded else
                         "Model file (default: the golden's; the embedded model when it recorded that)."),
            click.option(*(("--candidate", "--variant") if under_test else ("--variant",)), "spec", default="",
                         help=("Candidate spec (alias: --variant): " if under_test else "Variant spec: ") + SPEC_HELP
                         + (" — set on top of the golden's options." if recorded else ".")),
            click.option("--env", multiple=True, metavar="NAME[=VALUE]",
                         help="Environment knob for the engine (repeatable)" + (", on top of the golden's." if recorded
                                                                                 else ".")),
        ])
    return decorate


def _variant(opts: dict[str, Any]) -> Any:
    from logitlab.engines.variant import parse_env, parse_variant

    return parse_variant(opts["spec"], "golden", default_engine=opts["engine"], default_model=opts["model"],
                         env=parse_env(opts["env"]))


def _overrides(opts: dict[str, Any]) -> Any:
    from logitlab.engines import DEFAULT_ENGINE
    from logitlab.engines.variant import parse_env, parse_variant
    from logitlab.experiments.golden.run import VariantOverrides

    default = opts["engine"] or DEFAULT_ENGINE
    parsed = parse_variant(opts["spec"], "current", default_engine=default, default_model=opts["model"])
    # --engine 'cmd:TEMPLATE' parses to the engine 'cmd' with its command among the options
    engine = parsed.engine if opts["engine"] else (parsed.engine if parsed.engine != default else None)
    return VariantOverrides(engine=engine, model=parsed.model, options=dict(parsed.options),
                            env=parse_env(opts["env"]))


def _progress_events(progress: Any, task: Any, what: str) -> Callable[[str, dict[str, Any]], None]:
    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "start":
            progress.update(task, total=data.get("prompts") or data.get("chunks"), description=what)
        elif kind in ("prompt", "chunk"):
            progress.update(task, advance=1, description=f"{what} {data.get('name', data.get('index', ''))}")
    return on_event


@click.group()
def golden() -> None:
    """Golden logits: record a build's logits once, check later builds against them.

    \b
      logitlab golden record --prompts prompts.jsonl --tokens 64 -o golden/
      logitlab golden check golden/                        # exit 0 pass, 1 fail, 2 bad input
      logitlab golden update golden/ --reason "bump llama.cpp to b7000"
      logitlab golden check --llamacpp-kld base.kld        # a file llama-perplexity wrote
      logitlab golden export-kld golden/ -o base.kld       # a file llama-perplexity reads
    """


@golden.command()
@variant_options(recorded=False)
@prompt_options("the 9 built-in prompts", many=True)
@click.option("--tokens", "n_decode", type=int, default=64, show_default=True,
              help="Greedy decode tokens after each prompt.")
@click.option("-o", "--out", "out", required=True, help="Golden root folder: the golden goes to OUT/<device-key>/.")
@click.option("--store", default="full", show_default=True,
              help="full: every logit (engine dtype); topk:K: the K largest per position and the log-sum-exp.")
@positions_option
@click.option("--build-commit", default=None, help="Source commit of the engine build (recorded as provenance).")
@memory_check_option
@output_options(json_help="Write the manifest (the result) as JSON too.")
@handle_errors
def record(**opts: Any) -> None:
    """Record golden logits: per prompt, greedy token ids and every position's logits, with provenance.

    The size is printed first (on stderr). An existing golden of this device
    key is never overwritten: use `golden update`.
    """
    from logitlab.dumps.sizes import format_bytes
    from logitlab.report.text import plural
    from logitlab.experiments.golden.run import RecordConfig, record_golden
    from logitlab.experiments.prompts import builtin_prompts, check_unique

    prompts = prompts_from(opts, builtin_prompts)
    check_unique(prompts)
    config = RecordConfig(variant=_variant(opts), prompts=prompts, n_decode=opts["n_decode"], store=opts["store"],
                          build_commit=opts["build_commit"], positions=positions_from(opts))
    config.validate()
    check_output_paths(**report_paths(opts), inputs=prompt_inputs(opts),
                       folders={"out": opts["out"]})
    check_memory(opts, "golden record" if config.store == "full" else "golden record --store topk", [config.variant],
                 [p.text for p in prompts], config.n_decode, selected=config.positions)
    with make_progress(opts["quiet"]) as progress:
        task = progress.add_task("loading", total=len(prompts))

        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "size" and not opts["quiet"]:
                other = "" if data["store"] != "full" else \
                    f"; --store topk:64 would be {format_bytes(_topk_bytes(data))}"
                progress.console.print(
                    f"golden: {plural(data['prompts'], 'prompt')}, {plural(data['positions'], 'position')} × "
                    f"{data['n_vocab']} vocab, "
                    f"store {data['store']}: {format_bytes(data['bytes'])}{other}", highlight=False, soft_wrap=True)
                progress.update(task, description="recording")
            elif kind == "prompt":
                progress.update(task, advance=1, description=f"recording {data['name']}")

        manifest = record_golden(config, opts["out"], on_event=on_event)
    write_reports(manifest, opts)
    if not opts["quiet"]:
        show_report(manifest)


def _topk_bytes(data: dict[str, Any]) -> int:
    from logitlab.dumps.golden_format import store_bytes

    return store_bytes("topk:64", data["positions"], data["n_vocab"])


@golden.command()
@click.argument("golden_dir", metavar="DIR", required=False)
@click.option("--llamacpp-kld", "kld_file", default=None, metavar="FILE",
              help="Check against a file llama-perplexity --kl-divergence-base wrote, instead of a golden: prints "
                   "llama.cpp's own statistics.")
@variant_options(recorded=True, under_test=True)
@click.option("--allow", type=click.Choice(ALLOW_CHOICES), default="bit-exact", show_default=True,
              help="Worst verdict allowed when the device key, build or options changed (same ones: bit-exact "
                   "always).")
@click.option("--max-kld-mean", type=FiniteRange(min=0), default=None, help="Limit on the mean per-position KLD (nats).")
@click.option("--max-kld-p99", type=FiniteRange(min=0), default=None, help="Limit on the 99th percentile of the KLD (nats).")
@click.option("--min-top1", type=FiniteRange(0, 1), default=None,
              help="Required same-top-1 rate, judged by its Wilson 95 %% lower bound (e.g. 0.95).")
@click.option("--strict-device", is_flag=True, help="Refuse a golden recorded under another device key (exit 2).")
@click.option("--build-commit", default=None, help="Source commit of this engine build (compared with the golden's).")
@positions_option(default=None, default_help="Default: the positions the golden stores (all, unless it was "
                                             "recorded with --positions); rows it did not store are refused.")
@detection_option("each prompt's run (a golden of --store full)", "the argmax-up shape per prompt, every shape "
                  "for the verdict's prompt; 7-26 s for the 9 built-in prompts × 64 tokens on the embedded model")
@memory_check_option
@threshold_options
@output_options()
@record_options()
@handle_errors
def check(golden_dir: str | None, **opts: Any) -> None:
    """Replay a golden's token ids and judge this build against it: exit 0 pass, 1 fail, 2 bad input.

    Picks the golden of this device key (else by the fallback rule, unless
    --strict-device), says which golden matched and why and what changed in
    the provenance, and requires bit-exact when device key, build and options
    are the same; otherwise the bar you allow (--allow, --max-kld-*, --min-top1).
    """
    from logitlab.numerics.gate import Bar

    if (golden_dir is None) == (opts["kld_file"] is None):
        raise InputError("give a golden folder DIR or --llamacpp-kld FILE (one of them)")
    if opts["kld_file"] is not None:
        _check_kld(opts)
        return
    from logitlab.experiments.golden.run import CheckConfig, check_golden, check_servable

    bar = Bar(allow=opts["allow"], max_kld_mean=opts["max_kld_mean"], max_kld_p99=opts["max_kld_p99"],
              min_top1=opts["min_top1"])
    config = CheckConfig(root=golden_dir, overrides=_overrides(opts), bar=bar, thresholds=thresholds_from(opts),
                         top_k=opts["top_k"], strict_device=opts["strict_device"], build_commit=opts["build_commit"],
                         detection=opts["detection"], positions=positions_from(opts))
    check_output_paths(**report_paths(opts), inputs=[golden_dir])
    check_servable(golden_dir, config.positions)  # rows no golden stored: refused before any engine loads
    if opts["memory_check"]:
        _check_memory(golden_dir, config.overrides, opts, config.positions)
    target = record_target(opts)
    with make_progress(opts["quiet"]) as progress:
        task = progress.add_task("loading", total=None)
        result = check_golden(config, on_event=_progress_events(progress, task, "replaying"))
    record_result(result, opts, target)
    _finish(result, opts)


def _check_memory(golden_dir: str, overrides: Any, opts: dict[str, Any], spec: str | None) -> None:
    """``golden check``'s memory check: the golden of the most positions, replayed on its variant, keeping the rows
    of ``spec`` (None: those the golden stores)."""
    from logitlab.dumps.golden_format import golden_folders
    from logitlab.experiments.golden.provenance import read_goldens

    manifests = read_goldens(golden_folders(golden_dir))
    if not manifests:
        return
    rows = {id(m): max((len(p.input_ids) for p in m.prompts), default=0) for m in manifests}
    largest = max(manifests, key=lambda m: rows[id(m)])
    check_memory(opts, "golden check", [overrides.apply(largest)], [], largest.n_decode, positions=rows[id(largest)],
                 selected=spec if spec is not None else largest.positions)


def _check_kld(opts: dict[str, Any]) -> None:
    from logitlab.engines import DEFAULT_ENGINE
    from logitlab.engines.variant import parse_env, parse_variant
    from logitlab.experiments.golden.kld import check_kld_base
    from logitlab.numerics.gate import Bar

    if opts["allow"] != "bit-exact":
        raise InputError("--allow judges a verdict, which a 16-bit llama.cpp base file does not give: use "
                         "--max-kld-mean, --max-kld-p99 or --min-top1 with --llamacpp-kld")
    variant = parse_variant(opts["spec"], "current", default_engine=opts["engine"] or DEFAULT_ENGINE,
                            default_model=opts["model"], env=parse_env(opts["env"]))
    bar = Bar(max_kld_mean=opts["max_kld_mean"], max_kld_p99=opts["max_kld_p99"], min_top1=opts["min_top1"])
    check_output_paths(**report_paths(opts), inputs=[opts["kld_file"]])
    with make_progress(opts["quiet"]) as progress:
        task = progress.add_task("loading", total=None)
        result = check_kld_base(opts["kld_file"], variant, bar=bar,
                                on_event=_progress_events(progress, task, "chunk"))
    _finish(result, opts)


def _finish(result: Any, opts: dict[str, Any]) -> None:
    write_reports(result, opts)
    if not opts["quiet"]:
        show_report(result)
    if not result.passed:
        click.echo("golden check failed: " + "; ".join(result.gate.failures), err=True)
        sys.exit(EXIT_CHECK_FAILED)
    sys.exit(EXIT_OK)


@golden.command()
@click.argument("golden_dir", metavar="DIR")
@click.option("--reason", default=None, help="Why the golden changes (kept in its history; required).")
@variant_options(recorded=True)
@click.option("--build-commit", default=None, help="Source commit of this engine build (recorded as provenance).")
@threshold_options
@output_options(json_help="Write the new manifest (the result) as JSON too.")
@handle_errors
def update(golden_dir: str, **opts: Any) -> None:
    """Re-record this device's golden; its history keeps the old and new hashes, the reason and the verdict.

    The verdict compares the new logits with the previous golden's on the
    previous token ids, so a toolchain bump reads e.g. "ulp-noise vs the previous golden".
    """
    from logitlab.experiments.golden.run import update_golden

    check_output_paths(**report_paths(opts), inputs=[golden_dir])
    with make_progress(opts["quiet"]) as progress:
        task = progress.add_task("loading", total=None)
        manifest = update_golden(golden_dir, opts["reason"] or "", overrides=_overrides(opts),
                                 build_commit=opts["build_commit"], thresholds=thresholds_from(opts),
                                 top_k=opts["top_k"], on_event=_progress_events(progress, task, "re-recording"))
    write_reports(manifest, opts)
    if not opts["quiet"]:
        show_report(manifest)


@golden.command("export-kld")
@click.argument("golden_dir", metavar="DIR")
@click.option("-o", "--out", "out", required=True, help="The llama.cpp KL-divergence base file to write.")
@click.option("--n-ctx", type=int, default=None,
              help="Tokens per chunk (default: the shortest prompt's positions; each prompt is one chunk).")
@handle_errors
def export_kld(golden_dir: str, out: str, n_ctx: int | None) -> None:
    """Write a golden (store full) as a file llama-perplexity --kl-divergence-base reads.

    \b
    Then: llama-perplexity -m MODEL --kl-divergence-base FILE --kl-divergence -c N
    (N: the chunk length printed; llama.cpp prints its summary from 100 scored positions).
    """
    from logitlab.device import device_info
    from logitlab.dumps.sizes import format_bytes
    from logitlab.dumps.golden_format import golden_folders, read_golden
    from logitlab.experiments.golden.kld import export_kld_base
    from logitlab.experiments.golden.provenance import match_golden, read_goldens

    check_output_paths(out=out, inputs=[golden_dir])
    match = match_golden(read_goldens(golden_folders(golden_dir)), device_info("cpu"), strict=False)
    manifest = read_golden(match.folder)
    info = export_kld_base(manifest, out, n_ctx=n_ctx)
    click.echo(f"golden {match.folder} ({match.reason})")
    click.echo(f"wrote {info.path}: {info.n_chunk} chunks × {info.n_ctx} tokens, {info.scored} scored positions, "
               f"vocabulary {info.n_vocab}, {format_bytes(info.bytes)}")
    if info.decode_scored:
        click.echo(f"note: {info.decode_scored} of the {info.scored} scored positions were decoded one token at a time "
                   "(M=1) when recorded; llama-perplexity evaluates each chunk in one batch, so its KLD there includes "
                   "the prefill-vs-decode difference (record long prompts with --tokens 0 for a batch-only base)")
    click.echo(f"next: llama-perplexity -m MODEL --kl-divergence-base {info.path} --kl-divergence -c {info.n_ctx}")
