"""``logitlab history``: the results recorded across builds, with their change points."""

from __future__ import annotations

import sys
from typing import Any

import click

from logitlab.cli.common import EXIT_CHECK_FAILED, EXIT_OK, handle_errors
from logitlab.cli.options import FiniteRange, output_options, quiet_option
from logitlab.cli.outputs import check_output_paths, report_paths, show_report, write_reports
from logitlab.cli.recording import (DEFAULT_HISTORY, HISTORY_ENV, history_folder, record_options, record_result,
                                    record_target)
from logitlab.errors import InputError
from logitlab.perf.changepoint_defaults import DEFAULT_MAX_PVALUE, DEFAULT_MIN_SIZE

_DIR_HELP = f"History folder (default ${HISTORY_ENV}, else {DEFAULT_HISTORY})."


@click.group()
def history() -> None:
    """Results recorded across engine builds (--record), series per metric, change points.

    \b
      show   every series with its change points (regressions, improvements, numerics changes)
      add    record saved results (--json files) for a commit
    """


def _refuse_runs_recorded_before(paths: Any, results: list[Any], target: Any) -> None:
    """A result already in the history for this commit and machine (or given twice) is refused before any is
    recorded: a run recorded twice would weigh twice in its series.

    Raises:
        InputError: naming the file and the record it repeats.
    """
    from logitlab.experiments.history.metrics import record_from_result
    from logitlab.experiments.history.store import HistoryStore, same_run

    store, given = HistoryStore(target.root), []
    for path, result in zip(paths, results):
        record = record_from_result(result, machine=target.machine, commit=target.commit,
                                    commit_date=target.commit_date)
        same = store.find_same_run(record)
        if same is not None:
            raise InputError(f"{path} is recorded already in {target.root} ({same}: same commit, machine, run and "
                             "values): a run is recorded once")
        for earlier, earlier_record in given:
            if same_run(earlier_record, record):
                raise InputError(f"{path} is the same run as {earlier}, given before it: a run is recorded once")
        given.append((path, record))


@history.command("show")
@click.option("--dir", "root", default=None, metavar="DIR", help=_DIR_HELP)
@click.option("--repo", default=None, metavar="PATH",
              help="The engine's git repository: series in its first-parent commit order (default: the order the "
                   "records were made).")
@click.option("--machine", "machines", multiple=True, metavar="KEY", help="Only this machine (repeatable).")
@click.option("--metric", "metrics", multiple=True, metavar="PATTERN",
              help="Only series whose VARIANT/METRIC or METRIC matches this glob, e.g. 'control/decode', 'kld_*' "
                   "(repeatable).")
@click.option("--last", type=int, default=None, metavar="N",
              help="Report change points among the last N builds of each series (the detection sees them all).")
@click.option("--regressions-only", is_flag=True,
              help="Only series with a regression or a numerics (fingerprint) change; exit 1 if there is one (CI).")
@click.option("--max-pvalue", type=FiniteRange(0, 1, min_open=True, max_open=True),
              default=DEFAULT_MAX_PVALUE, show_default=True,
              help="Significance level of a change point (Welch t test of the levels either side).")
@click.option("--min-size", type=click.IntRange(min=2), default=DEFAULT_MIN_SIZE, show_default=True,
              help="Builds a new level needs before it is reported.")
@output_options(json_help="Write the series and change points as JSON.")
@handle_errors
def show_cmd(**opts: Any) -> None:
    """Every series of the history with its change points.

    A series is one metric of one variant on one machine (decode tokens/s of
    the control, KLD of the candidate, a bench scenario, the logits'
    fingerprint), a point per record. Change points: PELT segmentation on
    logs, each boundary kept when a Welch t test of the levels either side
    gives p <= --max-pvalue; a fingerprint series changes wherever its hash
    does. Each change point names the two commits it lies between (the range
    to bisect), the levels, the % change, the p-value and whether it is a
    regression or an improvement in the metric's sense.

    \b
    Examples:
      logitlab history show --repo ../engine
      logitlab history show --regressions-only --last 20 --markdown changes.md
      logitlab history show --metric 'control/decode' --json series.json
    """
    from logitlab.experiments.history.show import show_history

    root = history_folder(opts["root"])
    check_output_paths(**report_paths(opts), inputs=[root])
    result = show_history(root, repo=opts["repo"], machines=opts["machines"], metrics=opts["metrics"],
                          last=opts["last"], regressions_only=opts["regressions_only"],
                          max_pvalue=opts["max_pvalue"], min_size=opts["min_size"])
    write_reports(result, opts)
    if not opts["quiet"]:
        show_report(result)
    alarms = result.alarms
    if opts["regressions_only"] and alarms:
        click.echo(f"regressions-only: {len(alarms)} regression(s) or numerics change(s): "
                   + ", ".join(f"{s.name} at {c.label[:10] if c.label else c.index}" for s, c in alarms[:10]),
                   err=True)
        sys.exit(EXIT_CHECK_FAILED)
    sys.exit(EXIT_OK)


@history.command("add")
@click.argument("results", nargs=-1, required=True, metavar="RESULT.json...")
@click.option("--dir", "root", default=None, metavar="DIR", help=_DIR_HELP)
@record_options(record_flag=False)
@quiet_option  # its report: where each record went
@handle_errors
def add_cmd(**opts: Any) -> None:
    """Record results saved with --json (ab, verify, bench run, bench compare) for one commit.

    The same as running the command with --record: the commit is --commit,
    else HEAD of --repo (default: the current folder).

    \b
    Examples:
      logitlab history add out/ab.json --repo ../engine
      logitlab history add bench.json --commit 1a2b3c4d --machine ci-runner-1
    """
    from logitlab.report import read_result

    results = [read_result(path) for path in opts["results"]]  # every file is read before any is recorded
    opts["record_dir"] = history_folder(opts["root"])
    target = record_target(opts, option="history add")
    for path, result in zip(opts["results"], results):
        if getattr(result, "error", None):
            raise InputError(f"{path} is a run that stopped early ({result.error}): a partial run is not recorded")
    _refuse_runs_recorded_before(opts["results"], results, target)
    for result in results:
        record_result(result, opts, target)
    sys.exit(EXIT_OK)
