"""The report formats a command writes to a file: one line each.

Every command that writes reports takes ``--NAME PATH`` for each line of :data:`FORMATS`
(:func:`logitlab.cli.options.output_options`), writes the result's report rendered by the function the line
names (:func:`logitlab.cli.outputs.write_reports`) and checks the path before any work like its other outputs;
``logitlab.report.render(result, NAME)`` gives the same text to Python. The lines are ``"module:function"``
strings, imported when a report is written, so this module imports nothing: the CLI builds its options from
it without importing a renderer (``logitlab <cmd> --help`` stays fast). ``--json`` is not here: it writes the
result itself, not a report of it.

A new format is one renderer module in ``report/`` with a function ``(document, result) -> str`` — the
result's :class:`~logitlab.report.document.Document` and the result (a
:class:`~logitlab.jsonio.ResultRecord`, for a format that embeds its data) — and one line here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReportFormat", "FORMATS"]


@dataclass(frozen=True)
class ReportFormat:
    """One report format.

    Attributes:
        render: ``"module:function"``, the function ``(document, result) -> str`` that writes the file's text.
        help: the ``--NAME`` option's help.
    """

    render: str
    help: str


#: format name (the option ``--NAME``) -> its renderer and help
FORMATS: dict[str, ReportFormat] = {
    "markdown": ReportFormat("logitlab.report.render_markdown:markdown_file",
                             "Write the report as Markdown (a PR comment)."),
    "html": ReportFormat("logitlab.report.render_html:html_file",
                         "Write the report as one self-contained HTML page with figures (opens from a file, "
                         "no network; the result JSON is inside)."),
}
