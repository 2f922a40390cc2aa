"""Markdown renderer: any :class:`~logitlab.report.document.Document` as GitHub-flavoured Markdown.

For pull-request comments and CI summaries. Figures are left out (the HTML
report draws them). Nothing here prints.
"""

from __future__ import annotations

from typing import Any, Sequence

from logitlab.report.document import Block, Bullets, Document, Figure, Heading, KeyValues, Paragraph, Rich, Table

__all__ = ["render_markdown", "markdown_file", "markdown_table", "markdown_text"]


def markdown_text(text: Rich, *, in_table: bool = False) -> str:
    """Spans as Markdown: strong and verdict/call words bold, code in backticks."""
    runs: list[tuple[str, str]] = []  # (wrapper, text), adjacent spans with the same wrapper merged
    for span in text.spans:
        t = span.text.replace("|", "\\|") if in_table else span.text
        if not t:
            continue
        style = span.style or ""
        wrap = "**" if style == "strong" or style.startswith(("verdict:", "call:")) else "`" if style == "code" else ""
        if runs and runs[-1][0] == wrap:
            runs[-1] = (wrap, runs[-1][1] + t)
        else:
            runs.append((wrap, t))
    return "".join(f"{w}{t}{w}" for w, t in runs)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, escaped: bool = False) -> list[str]:
    """A GitHub table: ``| h1 | h2 |``, ``|---|---|``, rows; ``|`` escaped in the header and, unless
    ``escaped`` already, in the rows (``max |Δ|`` must not end a cell)."""
    lines = ["| " + " | ".join(h.replace("|", "\\|") for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell if escaped else cell.replace("|", "\\|") for cell in row) + " |"
              for row in rows]
    return lines


def _block(block: Block) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * (block.level + 1) + " " + markdown_text(block.text)]
    if isinstance(block, Paragraph):
        text = markdown_text(block.text)
        return [f"**{text}**" if block.tone == "error" else text]
    if isinstance(block, KeyValues):
        lines = [f"**{block.title}**", ""] if block.title else []
        if block.header:
            rows = [(key.replace("|", "\\|"), markdown_text(value, in_table=True)) for key, value, _ in block.rows]
            return lines + markdown_table(block.header, rows, escaped=True)
        for key, value, tone in block.rows:
            value_text = markdown_text(value)
            lines.append(f"- **{key}:** {value_text}" if tone in ("note", "warning", "error")
                         else f"- {key}: {value_text}")
        return lines
    if isinstance(block, Table):
        lines = [f"**{block.title}**", ""] if block.title else []
        rows = [[markdown_text(c, in_table=True) if isinstance(c, Rich) else c.replace("|", "\\|") for c in row]
                for row in block.rows]
        return lines + markdown_table(block.header, rows, escaped=True)
    if isinstance(block, Bullets):
        return [f"- {markdown_text(item)}" for item in block.items]
    if isinstance(block, Figure):
        return []
    raise TypeError(f"no Markdown for {type(block).__name__}")  # pragma: no cover - a new block type


def render_markdown(document: Document) -> str:
    """The whole document as Markdown text (blocks separated by blank lines, ending in a newline)."""
    parts = [lines for lines in (_block(b) for b in document.blocks) if lines]
    return "\n\n".join("\n".join(lines) for lines in parts) + "\n"


def markdown_file(document: Document, result: Any = None) -> str:
    """The text of a ``--markdown`` file (:data:`logitlab.formats.FORMATS`): :func:`render_markdown` of the
    document; ``result`` is not needed."""
    return render_markdown(document)
