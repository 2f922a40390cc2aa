"""``logitlab report``: show a saved result again, in any format, without rerunning anything."""

from __future__ import annotations

from typing import Any

import click

from logitlab.cli.common import check_output_paths, handle_errors, output_options, show_report, write_reports


@click.command()
@click.argument("result_file", metavar="RESULT.json|RUNS.jsonl")
@output_options(json_help="Write the result again as JSON.",
                quiet_help="Do not print the report on the terminal (only write the files).")
@handle_errors
def report(result_file: str, **opts: Any) -> None:
    """Render a result saved with --json, or a run log: the terminal report, and --markdown / --json files.

    Works for every result kind: ab, verify, invariance, bench run, bench
    compare, bench calibrate and dump-diff. Nothing is rerun. The run log of
    ab, verify or bench run (--log, JSONL) shows what was measured even when
    the run was killed: the report says it was interrupted.

    \b
    Examples:
      logitlab report out/demo.json
      logitlab report out/demo.json --markdown out/demo.md
      logitlab report logitlab-runs/ab-20250101-120000.jsonl
    """
    from logitlab.report import read_result

    check_output_paths(json=opts["json_path"], markdown=opts["markdown_path"], inputs=[result_file])
    result = read_result(result_file)
    write_reports(result, opts)
    if not opts["quiet"]:
        show_report(result)
