"""Draw a :class:`~logitlab.report.document.Figure` block as inline SVG, with matplotlib.

:data:`FIGURES` maps each ``Figure.kind`` to its plot function
(``"module:function"``, imported when first drawn, like the result kinds of
:data:`logitlab.report.KINDS`). A plot function takes a matplotlib
``Figure`` (empty, 7.5 × 3.2 inches; it may resize it) and the block's
``data`` dict, and draws; it never saves or shows. Adding a figure kind is
one function plus one line here, or :func:`register_figure` from outside.

matplotlib is imported only when a figure is drawn (``logitlab --help`` and
the text reports never load it), with the Agg machinery and no pyplot: no
global figure state, nothing opens a window. Text in the SVG stays text
(``svg.fonttype: none``, escaped by matplotlib's SVG writer); text that
comes from users or engines (scenario, metric and tensor names) goes
through :func:`plain`, so a ``$`` in it is never read as mathtext; the
output carries no date, so the same data gives the same bytes.
"""

from __future__ import annotations

import importlib
import io
import math
import re
from typing import Any, Callable, Sequence

from logitlab.errors import InputError
from logitlab.report.document import Figure

__all__ = ["FIGURES", "register_figure", "figure_svg", "tag_bars", "plain", "legend_above", "log10_heatmap", "STYLE",
           "COLORS",
           "VERDICT_COLORS", "NO_VERDICT_COLOR"]

#: Figure kind -> plot function, ``"module:function"``.
FIGURES: dict[str, str] = {
    "ulp-histogram": "logitlab.report.plot_numerics:ulp_histogram",
    "kld-positions": "logitlab.report.plot_numerics:kld_positions",
    "margin-scatter": "logitlab.report.plot_numerics:margin_scatter",
    "kld-confidence": "logitlab.report.plot_numerics:kld_confidence",
    "check-heatmap": "logitlab.report.plot_numerics:check_heatmap",
    "verify-k": "logitlab.report.plot_numerics:verify_k",
    "verify-flip-margins": "logitlab.report.plot_numerics:verify_flip_margins",
    "guard-cost": "logitlab.report.plot_numerics:guard_cost",
    "dump-heatmap": "logitlab.report.plot_dumps:dump_heatmap",
    "dump-growth": "logitlab.report.plot_dumps:dump_growth",
    "block-ratios": "logitlab.report.plot_speed:block_ratios",
    "slot-series": "logitlab.report.plot_speed:slot_series",
    "scenario-ratios": "logitlab.report.plot_speed:scenario_ratios",
    "noise-profile": "logitlab.report.plot_speed:noise_profile",
    "sweep-heatmap": "logitlab.report.plot_sweep:sweep_heatmap",
    "invariance-matrix": "logitlab.report.plot_invariance:matrix_grid",
}

#: Colours shared by the plots (matplotlib's tab10 where it has one).
COLORS = {"control": "#1f77b4", "candidate": "#ff7f0e", "flip": "#d62728", "band": "#2ca02c", "neutral": "#7f7f7f",
          "first": "#9467bd", "ink": "#222222"}

#: One colour per verdict of :data:`~logitlab.numerics.VERDICTS`, by severity, harmless to serious (green → red
#: → black for ``crashed``); :data:`NO_VERDICT_COLOR`: skipped, not run, nothing judged.
VERDICT_COLORS = ("#2ca02c", "#98df8a", "#dbe88a", "#ffdd71", "#ff9f4a", "#f2703c", "#d62728", "#3b0a0a")
NO_VERDICT_COLOR = "#d9d9d9"

#: matplotlib settings of every figure.
STYLE: dict[str, Any] = {
    "svg.fonttype": "none",  # text stays <text>: small files, selectable labels
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "figure.dpi": 100,
}
_SIZE = (7.5, 3.2)


def register_figure(kind: str, target: str | Callable[[Any, dict[str, Any]], None]) -> None:
    """Add (or replace) the plot function of a figure kind: a callable or ``"module:function"``."""
    FIGURES[kind] = target  # type: ignore[assignment]


def plain(text: Any) -> str:
    """User or engine text for a matplotlib label: ``$`` escaped, so it is never parsed as mathtext."""
    return str(text).replace("$", r"\$")


def legend_above(ax: Any, ncols: int = 4, **kwargs: Any) -> None:
    """The axes' legend in a row above the plot, clear of the data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="lower left", bbox_to_anchor=(0, 1.01), ncols=ncols, borderaxespad=0, **kwargs)


def tag_bars(bars: Any, name: str) -> None:
    """Give each bar of a ``bar()`` container the gid ``{name}-{i}`` (a test counts them in the page)."""
    for i, rect in enumerate(bars):
        rect.set_gid(f"{name}-{i}")


def log10_heatmap(fig: Any, rows: Sequence[Sequence[float | None]], width: int, *, cmap: str,
                  identical: str) -> Any:
    """Draw rows of max |Δ| (None or 0: bit-identical, left white) as a log10 heatmap ``(len(rows), width)``
    with its colour bar; all bit-identical: a blank grid titled ``identical``. Returns the axes."""
    import numpy as np

    grid = np.full((len(rows), width), np.nan)
    for r, row in enumerate(rows):
        for c, v in enumerate(row):
            if v is not None and v > 0:
                grid[r, c] = math.log10(v)
    ax = fig.add_subplot()
    ax.grid(False)
    if np.isfinite(grid).any():
        image = ax.imshow(grid, aspect="auto", cmap=cmap, interpolation="nearest")
        fig.colorbar(image, ax=ax, label="log10 max |Δ|", shrink=0.9)
    else:
        ax.set_title(identical)
        ax.imshow(np.zeros_like(grid), aspect="auto", cmap="Greys", vmin=0, vmax=1)
    return ax


def _plot_function(kind: str) -> Callable[[Any, dict[str, Any]], None]:
    target = FIGURES.get(kind)
    if target is None:
        raise InputError(f"no plot for figure kind {kind!r}; known kinds: {', '.join(sorted(FIGURES))}")
    if callable(target):
        return target
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


_XML_HEAD = re.compile(r"\A.*?(?=<svg)", re.S)
_ID_REF = re.compile(r'( id="|href="#|url\(#)')


def figure_svg(block: Figure, ident: str = "fig") -> str:
    """The figure as an ``<svg>`` element (text) to place inside an HTML page.

    Args:
        block: the figure block (its ``kind`` picks the plot function).
        ident: a prefix unique in the page: every id in the SVG (clip
            paths, groups, and the ``gid`` a plot gives an artist, e.g.
            ``flips``) and every reference to one becomes ``{ident}-...``, so
            several figures share one page.

    Raises:
        InputError: no plot function for the kind.
    """
    import matplotlib
    from matplotlib.figure import Figure as MplFigure  # no pyplot: savefig picks the SVG canvas itself

    plot = _plot_function(block.kind)
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": ident}):
        fig = MplFigure(figsize=_SIZE, layout="constrained")
        plot(fig, block.data)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    svg = _XML_HEAD.sub("", buffer.getvalue(), count=1)
    # every id and every reference to one gets the page-unique prefix (matplotlib numbers its groups per
    # figure: "legend_1", "patch_2"); text is escaped by matplotlib, so no label holds id="
    return _ID_REF.sub(lambda m: f"{m.group(1)}{ident}-", svg)
