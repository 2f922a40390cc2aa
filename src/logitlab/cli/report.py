"""``logitlab report``: show a saved result again, in any format, without rerunning anything."""

from __future__ import annotations

from typing import Any

import click

from logitlab.cli.common import handle_errors
from logitlab.cli.options import output_options
from logitlab.cli.outputs import check_output_paths, report_paths, show_report, write_reports


@click.command()
@click.argument("result_file", metavar="RESULT.json|RUNS.jsonl|SWEEP_DIR")
@output_options(json_help="Write the result again as JSON.")
@handle_errors
def report(result_file: str, **opts: Any) -> None:
    """Render a saved result again: terminal, --markdown, --html, --json.

    Works for every result kind: ab, verify, invariance, bench run, bench
    compare, bench calibrate, dump-diff, golden (a golden's manifest.json), golden check,
    golden check --llamacpp-kld, history show, bisect, explain, sweep and a sweep's job files.
    Nothing is rerun. RESULT may also be a page written with --html (the result is embedded
    in it); a sweep's --out folder (its summary, recomputed from the job results there); or
    the run log of ab, verify or bench run (--log, JSONL), which shows what was measured even
    when the run was killed: the report says it was interrupted.

    \b
    Examples:
      logitlab report out/demo.json
      logitlab report out/demo.json --markdown out/demo.md
      logitlab report out/demo.json --html out/demo.html
      logitlab report runs/
      logitlab report logitlab-runs/ab-20250101-120000.jsonl
    """

    from logitlab.report import read_result

    check_output_paths(**report_paths(opts),
                       inputs=[result_file])
    result = read_result(result_file)  # a sweep's --out folder too: the summary, recomputed from its job files
    write_reports(result, opts)
    if not opts["quiet"]:
        show_report(result)
