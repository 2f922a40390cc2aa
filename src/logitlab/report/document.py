"""A format-neutral report: the blocks a result is shown as, before any format is chosen.

Each result kind has one builder (``report/ab.py``, ``report/verify.py``, ...)
that turns the typed result into a :class:`Document`; each output format has
one renderer (``report/render_terminal.py``, ``report/render_markdown.py``)
that writes any document. A new format is one new renderer module; a new
result kind is one new builder module.

Text is a sequence of spans, each with an optional style, so a renderer can
make a verdict word coloured in a terminal, bold in Markdown and a tag in HTML
without the builder knowing which. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence, Union

__all__ = [
    "STYLES",
    "TONES",
    "Span",
    "Rich",
    "rich",
    "Block",
    "Heading",
    "Paragraph",
    "KeyValues",
    "Table",
    "Bullets",
    "Figure",
    "Document",
]

#: Span styles: ``strong`` (bold), ``code`` (a literal: a command, an option, a path),
#: ``dim``, and ``verdict:WORD`` / ``call:WORD`` (a verdict or speed call, coloured by its word).
STYLES = ("strong", "code", "dim")
#: The tone of a whole paragraph or row: how loud a renderer may make it.
TONES = ("ok", "note", "warning", "error", "dim")


@dataclass(frozen=True)
class Span:
    """A piece of text with one style (None: plain; see :data:`STYLES`)."""

    text: str
    style: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):  # a field of a damaged result file that is not text: shown as read
            object.__setattr__(self, "text", str(self.text))


@dataclass(frozen=True)
class Rich:
    """Text made of spans."""

    spans: tuple[Span, ...] = ()

    @property
    def plain(self) -> str:
        """The text without styles."""
        return "".join(s.text for s in self.spans)

    def __str__(self) -> str:
        return self.plain


Inline = Union[str, Span, Rich, None]


def rich(*parts: Inline) -> Rich:
    """Join strings (plain), spans and other :class:`Rich` texts into one; None parts are skipped."""
    spans: list[Span] = []
    for part in parts:
        if part is None or part == "":
            continue
        if isinstance(part, Rich):
            spans += part.spans
        elif isinstance(part, Span):
            spans.append(part)
        else:
            spans.append(Span(str(part)))
    return Rich(tuple(spans))


def _rich(value: Inline) -> Rich:
    return value if isinstance(value, Rich) else rich(value)


class Block:
    """Base of the document's blocks.

    ``tight`` (on paragraphs, key-values, tables and bullets): the block
    belongs with the one before it (a verdict and its evidence); a terminal
    leaves no blank line between them.
    """

    tight: bool = False


@dataclass(frozen=True)
class Heading(Block):
    """A heading; ``level`` 1 is the document's title."""

    text: Rich
    level: int = 1

    def __init__(self, text: Inline, level: int = 1):
        object.__setattr__(self, "text", _rich(text))
        object.__setattr__(self, "level", level)


@dataclass(frozen=True)
class Paragraph(Block):
    """One paragraph (a line or more of prose); ``tone`` from :data:`TONES` or None."""

    text: Rich
    tone: str | None = None
    tight: bool = False

    def __init__(self, text: Inline, tone: str | None = None, tight: bool = False):
        object.__setattr__(self, "text", _rich(text))
        object.__setattr__(self, "tone", tone)
        object.__setattr__(self, "tight", tight)


@dataclass(frozen=True)
class KeyValues(Block):
    """Labelled values, one per row; ``rows`` are ``(key, value, tone)``.

    ``boxed``: the block is the document's header (a terminal draws a box
    around it). ``title``: an optional caption. ``header``: column names
    when the rows read as a two-column table (Markdown draws one).
    """

    rows: tuple[tuple[str, Rich, str | None], ...]
    title: str | None = None
    boxed: bool = False
    tight: bool = False
    header: tuple[str, str] | None = None

    def __init__(self, rows: Iterable[Sequence[Any]], title: str | None = None, boxed: bool = False,
                 tight: bool = False, header: Sequence[str] | None = None):
        norm = []
        for row in rows:
            key, value, *rest = row
            norm.append((str(key), _rich(value), rest[0] if rest else None))
        object.__setattr__(self, "rows", tuple(norm))
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "boxed", boxed)
        object.__setattr__(self, "tight", tight)
        object.__setattr__(self, "header", None if header is None else tuple(header))


@dataclass(frozen=True)
class Table(Block):
    """A table: a header, rows of the same width, an optional title and caption.

    A cell is a plain string, or :class:`Rich` text where a cell needs a style
    (a scenario name as ``code``, a call word); anything else becomes a string.
    ``align``: per column ``"left"`` or ``"right"`` (default: left).
    ``tone``: a title tone from :data:`TONES` (an alarming table: ``"error"``).
    """

    header: tuple[str, ...]
    rows: tuple[tuple[str | Rich, ...], ...]
    title: str | None = None
    align: tuple[str, ...] | None = None
    tone: str | None = None
    tight: bool = False

    def __init__(self, header: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None,
                 align: Sequence[str] | None = None, tone: str | None = None, tight: bool = False):
        header = tuple(str(h) for h in header)
        body = tuple(tuple(_cell(c) for c in row) for row in rows)
        for row in body:
            if len(row) != len(header):
                raise ValueError(f"table row {row!r} has {len(row)} cells for {len(header)} columns")
        object.__setattr__(self, "header", header)
        object.__setattr__(self, "rows", body)
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "align", None if align is None else tuple(align))
        object.__setattr__(self, "tone", tone)
        object.__setattr__(self, "tight", tight)


def _cell(value: Any) -> str | Rich:
    if isinstance(value, Rich):
        return value
    return rich(value) if isinstance(value, Span) else str(value)


@dataclass(frozen=True)
class Bullets(Block):
    """A list of items (each one line or more of text)."""

    items: tuple[Rich, ...]
    tone: str | None = None
    tight: bool = False

    def __init__(self, items: Iterable[Inline], tone: str | None = None, tight: bool = False):
        object.__setattr__(self, "items", tuple(_rich(i) for i in items))
        object.__setattr__(self, "tone", tone)
        object.__setattr__(self, "tight", tight)


@dataclass(frozen=True)
class Figure(Block):
    """A picture of the result: ``kind`` names the plot, ``data`` holds what it plots.

    Text formats leave figures out; the HTML report draws them. ``caption``
    says what the figure shows and what to read from it.
    """

    kind: str
    caption: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Document:
    """A whole report: its result kind, a title, and blocks in reading order."""

    kind: str
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block | None) -> "Document":
        """Append blocks (None is skipped); returns the document."""
        self.blocks += [b for b in blocks if b is not None]
        return self
