"""``logitlab doctor``: what this installation has (versions, engines, models, tools, devices) in one screen."""

from __future__ import annotations

import sys
from typing import Any

import click

from logitlab.cli.common import handle_errors
from logitlab.cli.options import output_options
from logitlab.cli.outputs import check_output_paths, report_paths, show_report, write_reports
from logitlab.errors import InputError


@click.command()
@click.option("--no-engines", is_flag=True,
              help="Do not import the engines' libraries (torch takes seconds): versions from the installed "
                   "packages only.")
@click.option("--require-ready", is_flag=True, help="Exit 1 when a default run cannot work (the report says why).")
@output_options(json_help="Write the findings as JSON.")
@handle_errors
def doctor(**opts: Any) -> None:
    """What this installation has: versions, engines, the embedded model, tools, devices.

    Lists logitlab's and Python's versions; every engine adapter, whether its
    libraries import (with versions) and the abilities it declares; what
    llama.cpp's build reports (CPU features, backends, GPU offload), torch's
    devices and ONNX Runtime's providers; the embedded models; the device key
    goldens are recorded under; the llama.cpp tools built from the vendored
    sources (make tools); Ray, Playwright, Chromium and MkDocs. Loads no model.

    \b
    Examples:
      logitlab doctor
      logitlab doctor --json -              # the findings as JSON on stdout (the report on stderr)
      logitlab doctor --markdown doctor.md  # for a bug report
    """
    from logitlab.experiments.doctor import run_doctor

    if opts["require_ready"] and opts["no_engines"]:  # a gate that did not import the engines cannot say "ready"
        raise InputError("--require-ready needs the engines imported: drop --no-engines")
    check_output_paths(**report_paths(opts))
    result = run_doctor(engines=not opts["no_engines"])
    write_reports(result, opts)  # --json -: the JSON on stdout, the report below on stderr
    if not opts["quiet"]:
        show_report(result)
    if opts["require_ready"] and result.problems:
        sys.exit(1)
