"""The invariance matrix's figure: axes × settings, cells coloured by verdict (HTML report).

:func:`matrix_grid` draws the ``invariance-matrix`` figure of
:mod:`logitlab.report.invariance_matrix` (its data:
:func:`logitlab.report.invariance_matrix.matrix_figure_data`).
"""

from __future__ import annotations

from typing import Any

from logitlab.report.figures import NO_VERDICT_COLOR, VERDICT_COLORS, plain

__all__ = ["matrix_grid"]


def _color(severity: int | None) -> str:
    if severity is None:
        return NO_VERDICT_COLOR
    return VERDICT_COLORS[min(severity, len(VERDICT_COLORS) - 1)]


def _share(identical: int, total: int) -> str:
    return f"{100 * identical / total:.1f} % identical" if total else ""


def matrix_grid(fig: Any, data: dict[str, Any]) -> None:
    """Rows: the axes; first column: the whole axis; then one cell per setting or size the axis compared (its
    checks, over every prompt); colour: the verdict; label: the verdict and the share of bit-identical rows.

    Every cell is a rectangle with a gid: ``axis-{row}`` for an axis's own cell, ``check-{row}-{column}`` for
    its checks (a test counts them in the page). A skipped axis is a grey row with its reason.
    """
    from matplotlib.patches import Patch, Rectangle

    rows, verdicts = data["rows"], data["verdicts"]
    width = max([len(r["cells"]) for r in rows] + [1]) + 1
    fig.set_size_inches(max(5.0, min(13.0, 1.4 + 1.5 * width)), max(1.8, 0.6 + 0.62 * len(rows)))
    ax = fig.add_subplot()
    ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    seen: set[int] = set()

    def cell(x: float, y: int, w: float, severity: int | None, label: str, gid: str, bold: bool = False) -> None:
        rect = Rectangle((x - 0.5, y - 0.5), w, 1, facecolor=_color(severity), edgecolor="white", lw=2)
        rect.set_gid(gid)
        ax.add_patch(rect)
        if severity is not None:
            seen.add(severity)
        dark = severity is not None and severity >= len(VERDICT_COLORS) - 2
        ax.text(x - 0.5 + w / 2, y, plain(label), ha="center", va="center", fontsize=7,
                color="white" if dark else "#222222", fontweight="bold" if bold else "normal")

    for r, row in enumerate(rows):
        if row["skipped"] or not row["cells"]:
            word = "skipped" if row["skipped"] else row["status"]
            cell(0, r, 1, None, word, f"axis-{r}", bold=True)
            if row["skipped"]:
                reason = row["skipped"] if len(row["skipped"]) <= 110 else row["skipped"][:107] + "..."
                ax.text(0.6, r, plain(reason), ha="left", va="center", fontsize=7, color="#555555")
            continue
        cell(0, r, 1, row["severity"], f"{row['verdict'] or 'n/a'}\n{_share(row['identical'], row['rows'])}",
             f"axis-{r}", bold=True)
        for c, check in enumerate(row["cells"], start=1):
            cell(c, r, 1, check["severity"],
                 f"{check['check']}\n{check['verdict'] or 'n/a'}\n{_share(check['identical'], check['rows'])}",
                 f"check-{r}-{c}")
    ax.set_xlim(-0.5, width - 0.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)), [plain(r["axis"]) for r in rows])
    ax.set_xticks([0, (width) / 2], ["whole axis", "settings / sizes compared (each over every prompt)"])
    ax.tick_params(length=0)
    ax.xaxis.set_ticks_position("top")
    handles = [Patch(color=_color(i), label=verdicts[i]) for i in sorted(seen)]
    if any(r["skipped"] or not r["cells"] for r in rows):
        handles.append(Patch(color=NO_VERDICT_COLOR, label="skipped / not run"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
