"""Plots of the speed figures (``ab``, ``bench run``, ``bench compare``, ``bench calibrate``).

Each function takes a matplotlib ``Figure`` and the ``data`` of a
:class:`~logitlab.report.document.Figure` block built by
:mod:`logitlab.report.figure_blocks`, and draws. Ratios are drawn on a log
axis labelled in ratios, so 0.9 and 1/0.9 sit at the same distance from 1.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from logitlab.report.figures import COLORS, legend_above, plain

__all__ = ["block_ratios", "slot_series", "scenario_ratios", "noise_profile"]

_STATUS_COLORS = {"regressed": COLORS["flip"], "improved": COLORS["band"], "unchanged": COLORS["control"],
                  "inconclusive": COLORS["neutral"]}
_CALL_COLORS = {"slower": COLORS["flip"], "faster": COLORS["band"], "equivalent": COLORS["control"],
                "inconclusive": COLORS["neutral"]}


def _ratio_axis(ax: Any, span: float) -> None:
    """A log x axis from e^-span to e^span, ticks labelled as plain ratios (1.05, not 10^0.02)."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, MaxNLocator, NullLocator

    ax.set_xscale("log")
    ax.set_xlim(math.exp(-span), math.exp(span))
    if span < math.log(3):  # a short range: evenly spaced ratios read best
        ax.xaxis.set_major_locator(MaxNLocator(nbins=8))
        ax.xaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    else:
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_locator(NullLocator())


def _span(values: list[float], floor: float = 0.02) -> float:
    """Half-width (natural log) of a ratio axis that shows every value, at most e^±5."""
    finite = [abs(math.log(v)) for v in values if v > 0 and math.isfinite(v)]
    return min(max(max(finite, default=floor) * 1.15, floor), 5.0)


def block_ratios(fig: Any, data: dict[str, Any]) -> None:
    """One row per metric: block ratios as dots, the mean ratio with its CI, the ±δ band, A/A diamonds."""
    panels = data["panels"]
    fig.set_size_inches(7.5, 0.6 + 1.0 * len(panels))
    ax = fig.add_subplot()
    ax.grid(True, axis="x")
    ax.grid(False, axis="y")
    values: list[float] = []
    for row, p in enumerate(panels):
        y = len(panels) - 1 - row
        ratios = [math.exp(x) for x in p["log_ratios"]]
        values += ratios
        n = len(ratios)
        jitter = [y + 0.18 * ((i % 5) - 2) / 2 for i in range(n)]
        dots = ax.scatter(ratios, jitter, s=22, color=COLORS["candidate"], alpha=0.8, zorder=4,
                          label="block ratio" if row == 0 else None)
        dots.set_gid(f"blocks-{row}")
        lo, hi = 1 / (1 + p["margin"]), 1 + p["margin"]
        ax.fill_betweenx([y - 0.4, y + 0.4], lo, hi, color=COLORS["band"], alpha=0.15, lw=0,
                         label="equivalence region ±δ" if row == 0 else None)
        values += [lo, hi]
        if p["aa_log_ratios"]:
            aa = [math.exp(x) for x in p["aa_log_ratios"]]
            values += aa
            ax.scatter(aa, [y - 0.3] * len(aa), marker="D", s=14, color=COLORS["neutral"], zorder=3,
                       label="A/A block ratio" if row == 0 else None)
        if p["ratio"] is not None:
            values.append(p["ratio"])
            if p["ci_low"] is not None and p["ci_high"] is not None and p["ci_low"] > 0:
                ax.errorbar([p["ratio"]], [y + 0.3], xerr=[[p["ratio"] - p["ci_low"]], [p["ci_high"] - p["ratio"]]],
                            fmt="s", color=COLORS["ink"], capsize=4, ms=5, zorder=5,
                            label="geometric mean, 95 % CI" if row == 0 else None)
                values += [p["ci_low"], p["ci_high"]]
            else:
                ax.scatter([p["ratio"]], [y + 0.3], marker="s", color=COLORS["ink"], zorder=5)
    ax.axvline(1.0, color=COLORS["ink"], lw=0.8)
    _ratio_axis(ax, _span(values, 0.03))  # a CI reaching beyond e^±5 is cut at the edge
    ax.set_yticks(range(len(panels)), [f"{plain(p['metric'])} ({p['call']})" for p in reversed(panels)])
    ax.set_ylim(-0.6, len(panels) - 0.4)
    ax.set_xlabel("candidate / control (per block; log scale)")
    legend_above(ax, ncols=2)


def slot_series(fig: Any, data: dict[str, Any]) -> None:
    """One panel per metric: each run's value in run order, by variant, block boundaries drawn."""
    panels = data["panels"]
    fig.set_size_inches(7.5, 0.5 + 2.0 * len(panels))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, panel in zip(axes, panels):
        points = panel["points"]
        for variant in ("control", "candidate"):
            timed = [p for p in points if p["variant"] == variant and p["block"] is not None and p["value"] is not None]
            warm = [p for p in points if p["variant"] == variant and p["block"] is None and p["value"] is not None]
            if timed:
                line = ax.scatter([p["run"] for p in timed], [p["value"] for p in timed], color=COLORS[variant], s=20,
                                  label=variant, zorder=4)
                line.set_gid(f"slots-{variant}-{panel['metric']}".replace(" ", "-"))
            if warm:
                ax.scatter([p["run"] for p in warm], [p["value"] for p in warm], facecolors="none",
                           edgecolors=COLORS[variant], s=20, label=f"{variant} warmup")
        blocks: dict[int, list[int]] = {}
        for p in points:
            if p["block"] is not None:
                blocks.setdefault(p["block"], []).append(p["run"])
        for runs in list(blocks.values())[1:]:
            ax.axvline(min(runs) - 0.5, color=COLORS["neutral"], lw=0.8, alpha=0.6)
        ax.set_ylabel(plain(panel["label"]))
    legend_above(axes[0])
    axes[-1].set_xlabel("run (in the order the slots ran)")


def _scenario_rows(fig: Any, rows: list[dict[str, Any]], *, top: float, band_alpha: float,
                   draw: Callable[[Any, int, int, dict[str, Any]], list[float]],
                   label: Callable[[dict[str, Any]], str]) -> Any:
    """One row per scenario (the first on top) on a ratio axis: each row's ±δ band, then ``draw(ax, i, y, s)``,
    which draws the row's values and returns them (for the axis span); ``label(s)`` names the row. The axes."""
    fig.set_size_inches(7.5, top + 0.32 * len(rows))
    ax = fig.add_subplot()
    ax.grid(False, axis="y")
    values: list[float] = []
    for i, s in enumerate(rows):
        y = len(rows) - 1 - i
        lo, hi = 1 / (1 + s["margin"]), 1 + s["margin"]
        ax.fill_betweenx([y - 0.35, y + 0.35], lo, hi, color=COLORS["band"], alpha=band_alpha, lw=0)
        values += [lo, hi, *draw(ax, i, y, s)]
    ax.axvline(1.0, color=COLORS["ink"], lw=0.8)
    _ratio_axis(ax, _span(values))
    ax.set_yticks(range(len(rows)), [label(s) for s in reversed(rows)], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    return ax


def scenario_ratios(fig: Any, data: dict[str, Any]) -> None:
    """One row per scenario, sorted by effect: ratio dot coloured by status, CI whiskers, its own ±δ band."""
    rows = data["scenarios"]

    def draw(ax: Any, i: int, y: int, s: dict[str, Any]) -> list[float]:
        color = _STATUS_COLORS.get(s["status"], COLORS["ink"])
        if s["ci_low"] is not None and s["ci_high"] is not None and s["ci_low"] > 0:
            ax.errorbar([s["ratio"]], [y], xerr=[[s["ratio"] - s["ci_low"]], [s["ci_high"] - s["ratio"]]], fmt="o",
                        color=color, capsize=3, ms=5, zorder=4)
            return [s["ratio"], s["ci_low"], s["ci_high"]]
        ax.scatter([s["ratio"]], [y], color=color, s=25, zorder=4, marker="o")
        return [s["ratio"]]

    ax = _scenario_rows(fig, rows, top=0.9, band_alpha=0.15, draw=draw,
                        label=lambda s: f"{plain(s['name'])} ({s['status']})")
    ax.set_xlabel("PR / base (log scale; the shaded band: the scenario's ±δ)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", ls="", color=c, label=name) for name, c in _STATUS_COLORS.items()
               if any(s["status"] == name for s in rows)]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.01), ncols=4, borderaxespad=0)


def noise_profile(fig: Any, data: dict[str, Any]) -> None:
    """One row per scenario: its A/A ratios as dots and its calibrated ±δ band."""

    def draw(ax: Any, i: int, y: int, s: dict[str, Any]) -> list[float]:
        ratios = [r for r in s["aa_ratios"] if r > 0]
        dots = ax.scatter(ratios, [y] * len(ratios), color=COLORS["control"], s=18, zorder=4)
        dots.set_gid(f"aa-{i}")
        return ratios

    ax = _scenario_rows(fig, data["scenarios"], top=0.8, band_alpha=0.2, draw=draw,
                        label=lambda s: f"{plain(s['name'])} (δ ±{100 * s['margin']:.1f} %)")
    ax.set_xlabel("A/A ratio, run i / run j (log scale; the shaded band: the calibrated δ)")
