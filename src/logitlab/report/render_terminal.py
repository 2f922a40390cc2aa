"""Terminal renderer: any :class:`~logitlab.report.document.Document` through rich.

Verdict words and speed calls are coloured by their meaning; tones colour
whole paragraphs; the header is boxed. Figures are left out.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, RenderableType
from rich.panel import Panel
from rich.table import Table as RichTable
from rich.text import Text

from logitlab.report.document import Block, Bullets, Document, Figure, Heading, KeyValues, Paragraph, Rich, Table

__all__ = ["render_terminal", "renderables", "WORD_STYLES", "TONE_STYLES"]

#: Styles of verdict words and calls (``verdict:WORD`` / ``call:WORD`` spans).
WORD_STYLES = {
    "bit-exact": "bold green", "ulp-noise": "bold cyan", "noise": "bold cyan", "near-tie": "bold yellow",
    "lossy": "bold yellow", "systematic-offset": "bold magenta", "divergent": "bold red", "crashed": "bold white on red",
    "differs": "bold red", "incomplete": "bold yellow", "nothing-aligned": "bold red",
    "faster": "bold green", "slower": "bold red", "equivalent": "bold cyan", "inconclusive": "bold yellow",
    "improved": "bold green", "regressed": "bold red", "unchanged": "bold cyan",
    "regression": "bold red", "improvement": "bold green", "changed": "bold magenta",
    "good": "bold green", "bad": "bold red", "skip": "bold yellow",
}
TONE_STYLES = {"ok": "green", "note": "yellow", "warning": "yellow", "error": "bold red", "dim": "dim"}
_SPAN_STYLES = {"strong": "bold", "code": "cyan", "dim": "dim"}


def _text(text: Rich, tone: str | None = None) -> Text:
    out = Text(style=TONE_STYLES.get(tone or "", ""))
    for span in text.spans:
        style = span.style or ""
        if style.startswith(("verdict:", "call:")):
            out.append(span.text, style=WORD_STYLES.get(style.split(":", 1)[1], "bold"))
        else:
            out.append(span.text, style=_SPAN_STYLES.get(style, ""))
    return out


def _block(block: Block, title: str) -> RenderableType | None:
    if isinstance(block, Heading):
        heading = _text(block.text)
        heading.stylize("bold")
        return heading
    if isinstance(block, Paragraph):
        return _text(block.text, block.tone)
    if isinstance(block, KeyValues):
        grid = RichTable.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        for key, value, tone in block.rows:
            style = TONE_STYLES.get(tone or "")
            grid.add_row(Text(key, style=f"bold {style}" if style else "bold"), _text(value, tone))
        if block.boxed:
            return Panel(grid, title=block.title, expand=False)
        return grid if not block.title else _titled(block.title, grid)
    if isinstance(block, Table):
        table = RichTable(title=block.title, title_style="bold red" if block.tone == "error" else None,
                          box=box.HEAVY_HEAD)
        for i, name in enumerate(block.header):
            justify = (block.align[i] if block.align else "left")
            table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
        for row in block.rows:  # str cells as Text: a "[...]" in a name is text, not rich markup
            table.add_row(*(_text(c) if isinstance(c, Rich) else Text(c) for c in row))
        return table
    if isinstance(block, Bullets):
        lines = Text(style=TONE_STYLES.get(block.tone or "", ""))
        for i, item in enumerate(block.items):
            if i:
                lines.append("\n")
            lines.append("  • ")
            lines.append_text(_text(item))
        return lines
    if isinstance(block, Figure):
        return None
    raise TypeError(f"no terminal rendering for {type(block).__name__}")  # pragma: no cover


def _titled(title: str, body: RenderableType) -> RenderableType:
    from rich.console import Group

    return Group(Text(title, style="bold"), body)


def _prose(block: Block) -> bool:
    return isinstance(block, (Paragraph, Bullets))


def renderables(document: Document) -> list[tuple[RenderableType, bool]]:
    """``(renderable, tight)`` per block, in order (figures left out)."""
    out = []
    for block in document.blocks:
        item = _block(block, document.title)
        if item is not None:
            out.append((item, bool(getattr(block, "tight", False))))
    return out


def render_terminal(document: Document, console: Console | None = None) -> None:
    """Print the document: a blank line after each block, except before a tight one.

    On a terminal, prose (paragraphs, bullets) is word-wrapped at its width;
    into a pipe or a file each paragraph and bullet stays one line (soft
    wrap), so a path or a problem line can be found with ``grep``.
    """
    console = console or Console()
    blocks = [b for b in document.blocks if not isinstance(b, Figure)]
    items = renderables(document)
    soft = not console.is_terminal
    for i, ((item, _), block) in enumerate(zip(items, blocks)):
        console.print(item, soft_wrap=soft and _prose(block))
        following_tight = i + 1 < len(items) and items[i + 1][1]
        if not following_tight:
            console.print()
