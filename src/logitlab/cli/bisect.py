"""``logitlab bisect``: the first commit whose build changed the numerics or the speed."""

from __future__ import annotations

import shlex
import sys
from typing import Any

import click

from logitlab.cli.auto_options import Duration
from logitlab.cli.common import (EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, REQUIRE_CHOICES, fail, handle_errors,
                                 make_progress)
from logitlab.cli.options import (MODEL_HELP, SpelledOption, metric_name, metric_options, output_options, prompt_from,
                                  prompt_inputs, prompt_options, spelled, threshold_options, thresholds_from)
from logitlab.cli.outputs import check_output_paths, report_paths, show_report, write_reports
from logitlab.engines import DEFAULT_ENGINE
from logitlab.errors import InputError, Interrupted, LogitlabError

_BISECT_PROMPT = "The history of the printing press begins in the fifteenth century, when"


def _probe_text(words: tuple[str, ...]) -> str:
    """The words after ``--`` as one string: a single word as given, several joined as a shell would split them."""
    if not words:
        return ""
    return words[0] if len(words) == 1 else shlex.join(words)


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("revisions", metavar="GOOD..BAD")
@click.argument("probe_words", nargs=-1, metavar="-- PROBE...")
@click.option("--repo", default=".", show_default=True, metavar="PATH", help="The engine's git repository.")
@click.option("--build", default=None, metavar="CMD",
              help="Shell command that builds a checkout, run in its work tree (e.g. 'make -j'); a failed build "
                   "is a skip.")
@click.option("--build-timeout", type=Duration(), default=None, help="Time one build may take, e.g. 20m.")
@click.option("--probe", type=click.Choice(["numerics", "speed"]), required=True,
              help="numerics: after --, an engine spec (as --control of ab) whose logits are compared with GOOD's. "
                   "speed: after --, a benchmark shell command timed against GOOD's build.")
@click.option("--engine", default=DEFAULT_ENGINE, show_default=True, help="numerics: engine of the spec.")
@click.option("--model", default=None, help=f"numerics: {MODEL_HELP}")
@click.option("--env", multiple=True, metavar="NAME[=VALUE]", help="numerics: environment knob of the engine.")
@prompt_options("a built-in one-sentence prompt")
@click.option("--tokens", "n_decode", type=int, default=16, show_default=True,
              help="numerics: greedy decode steps of GOOD's reference run.")
@click.option("--require", type=click.Choice(REQUIRE_CHOICES), default="bit-exact", show_default=True,
              help="numerics: a build is bad when its verdict against GOOD is worse than this.")
@threshold_options
@metric_options(example="decode_seconds=([0-9.]+)", scope="speed: ")
@click.option("--margin", type=float, default=None,
              help="speed: equivalence margin δ (0.05 = 5 %). Default: half the change BAD shows against GOOD.")
@click.option("--max-repeats", "--max-blocks", "max_blocks", cls=SpelledOption, type=int, default=12, show_default=True,
              help="speed: budget of ABBA/BAAB blocks per build (the sequential rule looks from the 3rd), as "
                   "--max-repeats of ab and bench run; inconclusive at the budget is a skip. (--max-blocks: the "
                   "same, its former name.)")
@click.option("--warmup", type=int, default=1, show_default=True, help="speed: untimed runs per side first.")
@click.option("--slot-timeout", "--timeout", "timeout", cls=SpelledOption, type=Duration(), default=None,
              help="speed: time one benchmark run (slot) may take, as --slot-timeout of ab and bench run. "
                   "(--timeout: the same, its former name.)")
@output_options(json_help="Write the bisection (every step and its evidence) as JSON.")
@handle_errors
def bisect(**opts: Any) -> None:
    """Find the first commit of GOOD..BAD whose build changed the numerics or the speed.

    Binary search over `git rev-list --first-parent GOOD..BAD` of --repo:
    check out, run --build (a failed build is a skip), probe. numerics: one
    run per build, replaying GOOD's greedy tokens, compared on every logit
    with GOOD's run (bad when worse than --require). speed: ABBA/BAAB blocks
    of the build against GOOD's (built once in a second work tree), the
    paired three-way call with a sequential stop; slower is bad, faster or
    equivalent good, inconclusive at --max-repeats a skip. The repository's
    checkout is restored at the end, also on errors and Ctrl-C. Paths after
    -- are relative to the work tree. Exit 0: the first bad commit found;
    1: skips leave several candidates; 2: bad input.

    \b
    Examples:
      logitlab bisect v1.2..HEAD --repo ../engine --build 'make -j' --probe numerics -- \\
          'cmd:./build/engine --tokens {tokens} --logits {logits}'
      logitlab bisect v1.2..HEAD --repo ../engine --build 'make -j' --probe speed \\
          --metric 'decode_seconds=([0-9.]+)' --lower-is-better -- ./build/engine --bench 128
    """
    from logitlab.engines.variant import parse_env, parse_variant
    from logitlab.experiments.bisect.run import parse_range
    from logitlab.experiments.bisect.probes import NumericsProbe, SpeedProbe
    from logitlab.experiments.gitrepo import require_repository

    good, bad = parse_range(opts["revisions"])
    words = _probe_text(opts["probe_words"])
    if not words:
        raise InputError(f"give the {opts['probe']} probe after --: "
                         + ("an engine spec, e.g. -- 'cmd:./build/engine --tokens {tokens} --logits {logits}'"
                            if opts["probe"] == "numerics" else "a benchmark command, e.g. -- ./build/bench"))
    if opts["probe"] == "speed" and any(opts[key] for key in ("prompt_texts", "prompt_file", "prompts_file")):
        raise InputError("--prompt, --prompt-file and --prompts are the numerics probe's workload: the speed probe "
                         "times the benchmark command after --; drop them")
    prompt = prompt_from(opts, "bisect", default=_BISECT_PROMPT) if opts["probe"] == "numerics" else None
    top = require_repository(opts["repo"])
    check_output_paths(**report_paths(opts), inputs=prompt_inputs(opts))
    if opts["probe"] == "numerics":
        probe: Any = NumericsProbe(
            parse_variant(words, "candidate", default_engine=opts["engine"], default_model=opts["model"],
                          env=parse_env(opts["env"]), option="probe"),
            prompt=prompt,
            n_decode=opts["n_decode"], require=opts["require"], thresholds=thresholds_from(opts), top_k=opts["top_k"])
    else:
        if opts["metric_regex"] and opts["higher_is_better"] is None:
            raise InputError("--metric needs a direction: add --higher-is-better (tokens/s) or --lower-is-better "
                             "(seconds)")
        if str(top) in words:
            raise InputError(f"the benchmark command names the repository by its absolute path ({top}): use paths "
                             "relative to the work tree, since GOOD's build runs in a second one")
        probe = SpeedProbe(words, metric_regex=opts["metric_regex"],
                           metric_name=opts["metric_name"] or metric_name(opts["metric_regex"]),
                           metric_unit=opts["metric_unit"], higher_is_better=bool(opts["higher_is_better"]),
                           margin=opts["margin"], max_blocks=opts["max_blocks"], warmup=opts["warmup"],
                           timeout=opts["timeout"],
                           names={"max_blocks": spelled("max_blocks"), "timeout": spelled("timeout")})
    result, error = _run_with_progress(top, good, bad, probe, opts)
    if result is not None:
        write_reports(result, opts)
        if not opts["quiet"]:
            show_report(result, show_error=error is None)
        if not result.restored:
            click.echo(f"warning: the repository {top} was not restored to its checkout "
                       f"({result.original.get('branch') or result.original['sha']})", err=True)
    if isinstance(error, Interrupted):
        click.echo("error: interrupted; the repository's checkout was restored", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if error is not None:
        fail(str(error))
    sys.exit(EXIT_OK if result.first_bad else EXIT_CHECK_FAILED)


def _run_with_progress(top: Any, good: str, bad: str, probe: Any,
                       opts: dict[str, Any]) -> tuple[Any, LogitlabError | None]:
    from logitlab.experiments.bisect.run import run_bisect

    with make_progress(opts["quiet"]) as progress:
        task = progress.add_task("bisect", total=None)

        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "range":
                progress.update(task, description=f"bisect over {data['commits']} commits")
            elif kind in ("build", "probe"):
                what = "building" if kind == "build" else f"{probe.kind} probe on"
                progress.update(task, description=f"{what} {data['commit'][:10]} ({data['role']})")
            elif kind == "step":
                progress.update(task, advance=1)
            elif kind == "bench-run":
                run = data["run"]
                progress.update(task, description=f"timing {run.variant} {'warmup' if run.is_warmup else run.block}")

        try:
            return run_bisect(top, good, bad, probe, build=opts["build"], build_timeout=opts["build_timeout"],
                              on_event=on_event), None
        except LogitlabError as exc:
            return exc.partial, exc
