"""``logitlab sweep``: a matrix of variants × prompts as one job set, on this machine or on a Ray cluster."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from logitlab.cli.common import (EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, REQUIRE_CHOICES, fail, handle_errors,
                                 make_progress)
from logitlab.cli.options import output_options
from logitlab.cli.outputs import check_output_paths, report_console, report_paths, show_report, write_reports
from logitlab.errors import InputError, Interrupted
from logitlab.numerics import VERDICTS


@click.command()
@click.argument("matrix_file", metavar="MATRIX")
@click.option("-o", "--out", "out", type=str, default=None,
              help="Folder of the sweep: sweep.json (manifest and summary), sweep-events.jsonl, jobs/<cell>--<prompt>.json.")
@click.option("--executor", type=click.Choice(("local", "ray")), default="local", show_default=True,
              help="local: worker processes on this machine (one per visible GPU; one without GPUs). ray: Ray actors "
                   "on the cluster at --address, else on a local Ray started for this sweep.")
@click.option("--workers", type=int, default=None,
              help="Workers running jobs at once (default: local: one per GPU, else 1; ray: as many as the cluster "
                   "holds with the matrix's [resources]).")
@click.option("--address", default=None, metavar="ADDRESS",
              help="Ray cluster: HOST:PORT of its head, ray://HOST:10001 (Ray Client) or auto.")
@click.option("--retries", type=int, default=0, show_default=True,
              help="Run a job again on a fresh worker this many times when its worker dies (killed, out of memory, "
                   "a crash); a job whose experiment raised is not retried.")
@click.option("--resume", is_flag=True,
              help="Continue the sweep in --out: run only the jobs without a finished result for the same settings.")
@click.option("--dry-run", is_flag=True, help="Print the matrix cells and jobs (with --resume: which are done); run nothing.")
@click.option("--require", type=click.Choice(REQUIRE_CHOICES), default=None,
              help="Exit 1 when a cell's verdict is worse than this (bit-exact: also when a cell's control "
                   "does not reproduce itself).")
@output_options(json_help="Write the sweep summary as JSON here too (it is always in OUT/sweep.json).")
@handle_errors
def sweep(matrix_file: str, **opts: Any) -> None:
    """Run a matrix of variants × prompts as one job set: verdicts, KLD, flips and speed per cell.

    MATRIX is a TOML or JSON file: the control, axes whose Cartesian product
    gives the candidates (engine options, environment knobs, models,
    engines), prompts, and the experiment per cell (ab numerics only, ab with
    speed, or verify with K values). Each (cell, prompt) is one job, run
    whole on one worker — both arms of an A/B and all its blocks — and
    written to OUT/jobs/ when it ends. A failed job is recorded with its error
    and the sweep goes on; --resume runs only what has no result.

    \b
    Examples:
      logitlab sweep matrix.toml --out runs/
      logitlab sweep matrix.toml --out runs/ --executor ray
      logitlab sweep matrix.toml --out runs/ --executor ray --address ray://head:10001
      logitlab sweep matrix.toml --out runs/ --resume
      logitlab sweep matrix.toml --dry-run
      logitlab report runs/
    """
    from logitlab.experiments.sweep.matrix_file import load_matrix

    matrix = load_matrix(matrix_file)
    out = opts["out"]
    if opts["dry_run"]:
        _dry_run(matrix, out, opts["resume"])
        return
    if not out:
        raise InputError("--out FOLDER is needed (where the job results go); --dry-run runs without")
    check_output_paths(**report_paths(opts), inputs=[matrix_file],
                       folders={"out": out})
    from logitlab.experiments.sweep.executors import make_executor
    from logitlab.experiments.sweep.run import plan

    plan(matrix, out, resume=opts["resume"])  # a used --out without --resume fails before any worker starts
    executor = make_executor(opts["executor"], workers=opts["workers"], retries=opts["retries"],
                             address=opts["address"], runtime_env=matrix.ray.get("runtime_env"))
    result, interrupted = _run_with_progress(matrix, out, executor, opts)
    jobs = os.path.join(out, "jobs", "")
    write_reports(result, opts)
    if not opts["quiet"]:
        show_report(result, show_error=not interrupted)
    if interrupted:
        click.echo(f"error: interrupted; finished jobs are in {jobs}; --resume continues", err=True)
        sys.exit(EXIT_INTERRUPTED)
    counts = result.counts()
    if counts["failed"]:
        fail(f"{counts['failed']} of {len(result.jobs)} jobs failed (their errors are above and in {jobs}); "
             f"logitlab sweep {matrix_file} --out {out} --resume runs them again")
    sys.exit(_require_exit_code(result, opts["require"]))


def _dry_run(matrix: Any, out: str | None, resume: bool) -> None:
    from logitlab.experiments.sweep.run import finished_results, plan
    from logitlab.experiments.sweep.summary import summarize
    from logitlab.report.render_terminal import render_terminal
    from logitlab.report.sweep import sweep_plan_document

    if out and resume:
        specs, done = plan(matrix, out, resume=True)
    else:
        specs, done = matrix.jobs(), (finished_results(out, matrix.jobs()) if out else {})
    result = summarize(matrix.name, matrix.to_dict(), {"out": out} if out else {}, specs, done)
    render_terminal(sweep_plan_document(result), report_console())


def _run_with_progress(matrix: Any, out: str, executor: Any, opts: dict[str, Any]) -> tuple[Any, bool]:
    from logitlab.experiments.sweep.run import run_sweep

    with make_progress(opts["quiet"]) as progress:
        task = progress.add_task("starting workers", total=None)

        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "sweep-start":
                progress.update(task, total=data["jobs"], description="sweep: starting workers")
            elif kind == "job-start":
                progress.update(task, description=f"sweep {data['spec'].key}")
            elif kind == "job-retry":
                progress.console.print(f"retrying {data['spec'].key}: {data['error']}")
            elif kind == "job-end":
                result = data["result"]
                progress.update(task, advance=1)
                if not result.ok:
                    progress.console.print(f"failed {result.key}: {result.error}")

        try:
            return run_sweep(matrix, out, executor, resume=opts["resume"], on_event=on_event), False
        except Interrupted as exc:
            return exc.partial, True


def _require_exit_code(result: Any, require: str | None) -> int:
    if require is None:
        return EXIT_OK
    worse = [c for c in result.cells if c.verdict is not None and VERDICTS.index(c.verdict) > VERDICTS.index(require)]
    aa = [c for c in result.cells if require == "bit-exact" and c.aa == "NO"]
    if worse or aa:
        names = ", ".join(sorted({c.cell for c in worse + aa}))
        click.echo(f"require {require}: cells worse or with a control that does not reproduce itself: {names}",
                   err=True)
        return EXIT_CHECK_FAILED
    return EXIT_OK
