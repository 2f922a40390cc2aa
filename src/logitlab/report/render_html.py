"""HTML renderer: any :class:`~logitlab.report.document.Document` as one self-contained page.

The page needs no server and no network: styles are inline, figures are
inline SVG drawn by matplotlib (:mod:`logitlab.report.figures`), and the
result itself travels inside the page as JSON, so the page is a complete
CI artifact (``logitlab report PAGE.html`` reads it back). Only a few lines
of script, which offer that JSON as a download.

Every text that reaches the page is escaped (prompts, token strings, engine
names, notes and error lines come from users and engines). The embedded
JSON sits in ``<script type="application/json">``, a data block the browser
never runs, with ``<``, ``>`` and ``&`` written as ``\\u003c`` ``\\u003e``
``\\u0026`` so no string in it can close the element; a JSON parser reads
the same values back. A result whose JSON passes :data:`GZIP_ABOVE` bytes
is embedded gzip-compressed, base64-encoded (``data-encoding="gzip+base64"``).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
import re
from typing import Any, Mapping

from logitlab.report.document import Block, Bullets, Document, Figure, Heading, KeyValues, Paragraph, Rich, Table

__all__ = ["render_html", "html_file", "embed_json", "extract_json", "GZIP_ABOVE", "RESULT_ELEMENT_ID"]

#: Embedded result JSON above this many bytes is gzip-compressed and base64-encoded.
GZIP_ABOVE = 1 << 20
#: id of the ``<script type="application/json">`` element that holds the result.
RESULT_ELEMENT_ID = "logitlab-result"

_CSS = """
:root { --ink:#1d1f21; --dim:#6a737d; --line:#d0d7de; --ok:#1a7f37; --note:#9a6700; --error:#cf222e; --bg:#ffffff;
  --code:#f3f4f6; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; color: var(--ink);
  background: var(--bg); margin: 0; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 22px; margin: 0 0 14px; } h2 { font-size: 17px; margin: 26px 0 8px; }
p { margin: 12px 0; } p.tight, ul.tight, table.tight, div.tight { margin-top: 2px; }
code { background: var(--code); padding: 0 3px; border-radius: 3px; font-size: 12.5px; }
.dim, .tone-dim { color: var(--dim); } .tone-ok { color: var(--ok); } .tone-note, .tone-warning { color: var(--note); }
.tone-error { color: var(--error); font-weight: 600; }
.word { font-weight: 700; padding: 0 4px; border-radius: 3px; }
.w-bit-exact, .w-faster, .w-improved { background: #dafbe1; color: #116329; }
.w-ulp-noise, .w-equivalent, .w-unchanged { background: #ddf4ff; color: #0550ae; }
.w-near-tie, .w-inconclusive, .w-incomplete { background: #fff8c5; color: #7d4e00; }
.w-systematic-offset { background: #fbefff; color: #8250df; }
.w-divergent, .w-slower, .w-regressed, .w-differs, .w-nothing-aligned { background: #ffebe9; color: #a40e26; }
.box { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; display: inline-block; max-width: 100%; }
table { border-collapse: collapse; margin: 12px 0; font-size: 13px; display: block; overflow-x: auto; max-width: 100%; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
table.tone-error caption { color: var(--error); }
th, td { border: 1px solid var(--line); padding: 3px 8px; vertical-align: top; text-align: left; }
th { background: #f6f8fa; }
td.r { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { background: none; border: none; padding: 2px 14px 2px 0; white-space: nowrap; }
table.kv td { border: none; padding: 2px 0; }
ul { margin: 8px 0; padding-left: 22px; }
figure.plot { margin: 18px 0 22px; padding: 10px 12px; border: 1px solid var(--line); border-radius: 6px; }
figure.plot svg { width: 100%; height: auto; display: block; }
figcaption { color: #444; font-size: 13px; margin-top: 6px; }
figure.failed { border-color: var(--error); color: var(--error); }
footer { margin-top: 32px; color: var(--dim); font-size: 12px; border-top: 1px solid var(--line); padding-top: 8px; }
"""

# Offers the embedded JSON as a file; reads the data block only (never evaluates it).
_SCRIPT = """
(function () {
  var link = document.getElementById("download-result"), data = document.getElementById("%s");
  if (!link || !data) return;
  link.addEventListener("click", function (event) {
    event.preventDefault();
    var text = data.textContent, name = link.getAttribute("data-name");
    function save(blob) {
      var a = document.createElement("a"); a.href = URL.createObjectURL(blob); a.download = name; a.click();
      setTimeout(function () { URL.revokeObjectURL(a.href); }, 1000);
    }
    if (data.getAttribute("data-encoding") === "gzip+base64") {
      var bytes = Uint8Array.from(atob(text.trim()), function (c) { return c.charCodeAt(0); });
      new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).blob()
        .then(function (b) { save(new Blob([b], {type: "application/json"})); });
    } else {
      save(new Blob([text], {type: "application/json"}));
    }
  });
})();
""" % RESULT_ELEMENT_ID

_WORD = re.compile(r"[^a-z0-9-]")
# The page allows exactly this script (its hash in the Content-Security-Policy): were any text ever to slip
# past the escaping as markup, an injected script or event handler would still not run.
_SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode("ascii")


def _e(text: str) -> str:
    """Escape text for an element's content or a quoted attribute."""
    return html.escape(str(text), quote=True)


def _rich(text: Rich) -> str:
    out = []
    for span in text.spans:
        body = _e(span.text)
        style = span.style or ""
        if style == "strong":
            out.append(f"<strong>{body}</strong>")
        elif style == "code":
            out.append(f"<code>{body}</code>")
        elif style == "dim":
            out.append(f'<span class="dim">{body}</span>')
        elif style.startswith(("verdict:", "call:")):
            word = _WORD.sub("", style.split(":", 1)[1].lower())
            out.append(f'<span class="word w-{word}">{body}</span>')
        else:
            out.append(body)
    return "".join(out)


def _cell(value: str | Rich) -> str:
    return _rich(value) if isinstance(value, Rich) else _e(value)


def _classes(*names: str | None) -> str:
    names = tuple(n for n in names if n)
    return f' class="{" ".join(names)}"' if names else ""


def _tone(tone: str | None) -> str | None:
    return f"tone-{_WORD.sub('', tone)}" if tone else None


def _figure(block: Figure, index: int) -> str:
    from logitlab.report.figures import figure_svg

    ident = f"figure-{index}"
    caption = f"<figcaption><strong>Figure {index}.</strong> {_e(block.caption)}</figcaption>"
    kind = _e(block.kind)
    try:
        svg = figure_svg(block, ident)
    except Exception as exc:  # a plot bug must not cost the user the report; the page says what failed
        return (f'<figure class="plot failed" id="{ident}" data-kind="{kind}"><p>figure {kind} could not be drawn: '
                f"{_e(type(exc).__name__)}: {_e(exc)}</p>{caption}</figure>")
    return f'<figure class="plot" id="{ident}" data-kind="{kind}">{svg}{caption}</figure>'


def _block(block: Block, index: list[int]) -> str:
    tight = "tight" if getattr(block, "tight", False) else None
    if isinstance(block, Heading):
        level = min(max(block.level, 1), 5)
        return f"<h{level}>{_rich(block.text)}</h{level}>"
    if isinstance(block, Paragraph):
        return f"<p{_classes(_tone(block.tone), tight)}>{_rich(block.text)}</p>"
    if isinstance(block, KeyValues):
        title = f"<caption>{_e(block.title)}</caption>" if block.title else ""
        head = ""
        if block.header:
            head = "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in block.header) + "</tr></thead>"
        rows = "".join(f"<tr{_classes(_tone(tone))}><th>{_e(key)}</th><td>{_rich(value)}</td></tr>"
                       for key, value, tone in block.rows)
        kind = "kv" if not block.header else None
        table = f"<table{_classes(kind, tight)}>{title}{head}<tbody>{rows}</tbody></table>"
        return f'<div class="box header">{table}</div>' if block.boxed else table
    if isinstance(block, Table):
        title = f"<caption>{_e(block.title)}</caption>" if block.title else ""
        align = block.align or ("left",) * len(block.header)
        head = "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in block.header) + "</tr></thead>"
        body = "".join("<tr>" + "".join(f"<td{_classes('r' if a == 'right' else None)}>{_cell(c)}</td>"
                                        for c, a in zip(row, align)) + "</tr>" for row in block.rows)
        return f"<table{_classes(_tone(block.tone), tight)}>{title}{head}<tbody>{body}</tbody></table>"
    if isinstance(block, Bullets):
        items = "".join(f"<li>{_rich(item)}</li>" for item in block.items)
        return f"<ul{_classes(_tone(block.tone), tight)}>{items}</ul>"
    if isinstance(block, Figure):
        index[0] += 1
        return _figure(block, index[0])
    raise TypeError(f"no HTML for {type(block).__name__}")  # pragma: no cover - a new block type


def embed_json(data: Any) -> tuple[str, str | None]:
    """The text of the result's data block and its encoding (None: plain JSON; else ``"gzip+base64"``).

    Plain JSON has ``<``, ``>``, ``&`` and the line separators U+2028/9 as
    ``\\uXXXX`` escapes: the text can hold no ``</script>`` and no markup.
    """
    from logitlab.jsonio import to_jsonable

    text = json.dumps(to_jsonable(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if len(text.encode("utf-8")) > GZIP_ABOVE:
        packed = gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)
        return base64.b64encode(packed).decode("ascii"), "gzip+base64"
    for raw, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text, None


_DATA_BLOCK = re.compile(r'<script type="application/json" id="%s"(?: data-encoding="([a-z0-9+]+)")?>(.*?)</script>'
                         % RESULT_ELEMENT_ID, re.S)


def extract_json(page: str) -> Any:
    """The result embedded in a page written by :func:`render_html`, parsed; None when the page has none.

    Raises:
        ValueError: the data block is damaged (not JSON, or bad base64/gzip).
    """
    match = _DATA_BLOCK.search(page)
    if match is None:
        return None
    encoding, text = match.groups()
    if encoding == "gzip+base64":
        text = gzip.decompress(base64.b64decode(text)).decode("utf-8")
    return json.loads(text)


def html_file(document: Document, result: Any) -> str:
    """The text of an ``--html`` file (:data:`logitlab.formats.FORMATS`): the page of :func:`render_html` with
    ``result.to_dict()`` embedded, signed by this logitlab version."""
    from logitlab import __version__

    return render_html(document, result.to_dict(), generator=f"logitlab {__version__}")


def render_html(document: Document, result: Mapping[str, Any] | None = None, *, generator: str = "logitlab") -> str:
    """The whole document as one HTML page (text), with ``result`` (a ``to_dict()``) embedded as JSON.

    Args:
        document: the report.
        result: the result's JSON form, embedded in the page; None: no data block.
        generator: who wrote the page (the footer and ``<meta name="generator">``).
    """
    counter = [0]
    body = "\n".join(_block(b, counter) for b in document.blocks)
    title = next((b.text.plain for b in document.blocks if isinstance(b, Heading)), document.title)
    data = ""
    footer = f"{_e(generator)} · {_e(document.kind)} report"
    if result is not None:
        text, encoding = embed_json(result)
        attr = f' data-encoding="{encoding}"' if encoding else ""
        data = f'<script type="application/json" id="{RESULT_ELEMENT_ID}"{attr}>{text}</script>'
        name = _e(re.sub(r"[^A-Za-z0-9_.-]", "-", document.kind) + ".json")
        footer += (f' · the result is embedded in this page: <a href="#" id="download-result" data-name="{name}">'
                   f"download the JSON</a> or run <code>logitlab report THIS.html</code>")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="{_e(generator)}">\n'
        # no request leaves the page (everything is inline), and only the page's own script runs
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        f"script-src '{_SCRIPT_HASH}'; img-src data:\">\n"
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n{body}\n"
        f"<footer>{footer}</footer>\n</main>\n{data}\n<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )
