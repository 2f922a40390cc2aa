"""The sweep's figure: the matrix as a heatmap of verdicts (HTML report).

:func:`sweep_heatmap` draws the ``sweep-heatmap`` figure of
:mod:`logitlab.report.sweep` (its data: :func:`logitlab.report.sweep.heatmap_data`).
"""

from __future__ import annotations

import math
from typing import Any

from logitlab.report.figures import NO_VERDICT_COLOR, VERDICT_COLORS, plain

__all__ = ["sweep_heatmap"]


def _label(cell: dict[str, Any]) -> str:
    lines = [cell["verdict"] or cell["status"]]
    if cell.get("speed_ratio") is not None:
        lines.append(f"×{cell['speed_ratio']:.3f} {cell.get('call') or ''}".rstrip())
    elif cell.get("max_abs_diff") is not None and cell["max_abs_diff"] > 0:
        lines.append(f"max |Δ| {cell['max_abs_diff']:.3g}")
    if cell.get("flips"):
        lines.append(f"{cell['flips']} flip{'s' if cell['flips'] != 1 else ''}")
    return "\n".join(lines)


def sweep_heatmap(fig: Any, data: dict[str, Any]) -> None:
    """Rows: the first axis' values; columns: the other axes' combinations; colour: the verdict.

    A cell with failed or pending jobs is hatched. Each cell is labelled with
    its verdict and max |Δ| (or, with speed, the decode ratio and its call)
    and its flips.
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch, Rectangle

    import numpy as np

    rows, columns, verdicts = data["rows"], data["columns"], data["verdicts"]
    fig.set_size_inches(max(4.5, min(12.0, 1.6 + 1.7 * len(columns))), max(1.8, 0.9 + 0.75 * len(rows)))
    colors = list(VERDICT_COLORS[:len(verdicts)]) + [NO_VERDICT_COLOR]  # one per verdict, by severity
    grid = np.full((len(rows), len(columns)), len(verdicts), dtype=float)  # no verdict: the last colour
    for cell in data["cells"]:
        if cell["severity"] is not None:
            grid[cell["row"], cell["column"]] = cell["severity"]
    ax = fig.add_subplot()
    ax.grid(False)
    image = ax.imshow(grid, cmap=ListedColormap(colors), vmin=-0.5, vmax=len(verdicts) + 0.5, aspect="auto",
                      interpolation="nearest")
    image.set_gid("cells")
    for cell in data["cells"]:
        r, c = cell["row"], cell["column"]
        ax.text(c, r, plain(_label(cell)), ha="center", va="center", fontsize=8, color="#222222")
        if cell["status"] != "ok":
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="///", edgecolor="#555555", lw=0))
    if data["column_axes"]:
        ax.set_xticks(range(len(columns)), [plain(c) for c in columns])
    else:  # one axis: a single column
        ax.set_xticks([])
    ax.set_yticks(range(len(rows)), [plain(r) for r in rows])
    ax.set_ylabel(plain(data["row_axis"]))
    if data["column_axes"]:
        ax.set_xlabel(plain(" × ".join(data["column_axes"])))
    ax.xaxis.set_ticks_position("top")
    ax.xaxis.set_label_position("top")
    seen = sorted({int(v) for v in grid.flat if not math.isnan(v)})
    handles = [Patch(color=colors[i], label=verdicts[i] if i < len(verdicts) else "no verdict") for i in seen]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
