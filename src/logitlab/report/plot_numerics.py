"""Plots of the numerics figures (``ab``, ``invariance``, ``verify``): matplotlib, drawn into a given figure.

Each function takes a matplotlib ``Figure`` and the ``data`` of a
:class:`~logitlab.report.document.Figure` block built by
:mod:`logitlab.report.figure_blocks`, and draws; see
:mod:`logitlab.report.figures` for the registry and the SVG output. Artists
that a test counts carry a ``gid`` (``flips``, ``first-mismatch``, ``bars``).
"""

from __future__ import annotations

import math
from typing import Any

from logitlab.report.figures import COLORS, legend_above, log10_heatmap, plain, tag_bars

__all__ = ["ulp_histogram", "kld_positions", "margin_scatter", "kld_confidence", "check_heatmap", "verify_k",
           "verify_flip_margins", "guard_cost"]

#: The lowest floor of the KLD log axes; bit-identical rows (KLD 0) are drawn on the floor, a tenth of the
#: smallest positive KLD of the plot.
KLD_FLOOR = 1e-12


def ulp_histogram(fig: Any, data: dict[str, Any]) -> None:
    """Bars of entries per ULP-distance bin, log count; the bit-exact bar in green with its share."""
    ax = fig.add_subplot()
    bins, counts = data["bins"], data["counts"]
    colors = [COLORS["band"] if b == "0" else COLORS["candidate"] for b in bins]
    bars = ax.bar(range(len(bins)), [max(c, 0) for c in counts], color=colors, log=True)
    tag_bars(bars, "bars")
    ax.set_xticks(range(len(bins)), [f"{b} ULP" if b == "0" else b for b in bins])
    ax.set_xlabel("ULP distance (candidate vs reference, per logit)")
    ax.set_ylabel("logits (log scale)")
    for rect, count in zip(bars, counts):
        if count:
            ax.annotate(f"{count:,}", (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                        ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    share = data.get("exact_share")
    if share is not None:
        ax.set_title(f"bit-exact: {100 * share:.2f} % of logits")
    ax.set_ylim(bottom=0.8)


def kld_positions(fig: Any, data: dict[str, Any]) -> None:
    """KLD per position (log), flips as red crosses, first mismatch and prompt/decode boundary as lines."""
    ax = fig.add_subplot()
    kld = data["kld"]
    xs = list(data.get("positions") or range(len(kld)))  # run positions (selected rows: --positions)
    positive = [v for v in kld if v is not None and 0 < v < math.inf]
    floor = max(min(positive) / 10, KLD_FLOOR) if positive else KLD_FLOOR  # bit-identical positions sit here
    ceiling = max(positive) * 3 if positive else 1.0  # an infinite KLD (a token the candidate rules out) sits here
    ys = [floor if v is None or v <= 0 else ceiling if v == math.inf else max(v, floor) for v in kld]
    ax.plot(xs, ys, color=COLORS["control"], lw=1, marker=".", ms=3, label="KLD (nats)")
    infinite = [x for x, v in zip(xs, kld) if v == math.inf]
    if infinite:
        ax.scatter(infinite, [ceiling] * len(infinite), marker="^", s=40, color=COLORS["ink"], zorder=6,
                   label=f"infinite KLD ({len(infinite)})")
    flips = data.get("flips") or []
    if flips:
        at = dict(zip(xs, ys))
        points = ax.scatter(flips, [at[p] for p in flips], marker="X", s=60, color=COLORS["flip"], zorder=5,
                            label=f"argmax flip ({len(flips)})")
        points.set_gid("flips")
    first = data.get("first_mismatch")
    if first is not None:
        line = ax.axvline(first, color=COLORS["first"], ls="--", lw=1, label=f"first differing logit (pos {first})")
        line.set_gid("first-mismatch")
    n_prompt = data.get("n_prompt")
    if n_prompt:
        boundary = ax.axvline(n_prompt - 0.5, color=COLORS["neutral"], lw=1.5, label="prompt | decode")
        boundary.set_gid("prompt-boundary")
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor / 3)
    ax.set_xlim(xs[0] - 0.5 if xs else -0.5, xs[-1] + 0.5 if xs else len(kld) - 0.5)
    ax.set_xlabel("position")
    ax.set_ylabel("KL(P_ref ‖ P_cand), nats")
    labels = data.get("labels")
    if labels and len(labels) <= 40:
        ax.set_xticks(xs, [plain(x) for x in labels], rotation=90, fontsize=7)
    legend_above(ax)


def margin_scatter(fig: Any, data: dict[str, Any]) -> None:
    """Reference top1–top2 margin (x) against max |Δ| of the position (y), flips red, near-tie band shaded."""
    ax = fig.add_subplot()
    fig.set_size_inches(7.5, 3.6)
    flips = set(data.get("flips") or [])
    near = float(data["near_tie"])
    pts = [(i, m, c) for i, (m, c, d) in enumerate(zip(data["margin"], data["change"], data["differing"]))
           if d and m is not None and c is not None and c > 0]
    floor = 1e-4
    kept = [(i, max(m, floor), c) for i, m, c in pts]
    other = [(m, c) for i, m, c in kept if i not in flips]
    flipped = [(m, c) for i, m, c in kept if i in flips]
    if other:
        ax.scatter([m for m, _ in other], [c for _, c in other], s=12, color=COLORS["control"], alpha=0.7,
                   label="position (argmax kept)")
    if flipped:
        points = ax.scatter([m for m, _ in flipped], [c for _, c in flipped], s=50, marker="X", color=COLORS["flip"],
                            zorder=5, label=f"argmax flip ({len(flipped)})")
        points.set_gid("flips")
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = [m for _, m, _ in kept] or [floor, 1.0]
    ys = [c for _, _, c in kept] or [1e-6, 1.0]
    lo_x, hi_x = min(min(xs), near) / 2, max(max(xs), near) * 2
    lo_y, hi_y = min(ys) / 2, max(ys) * 2
    band = ax.axvspan(lo_x, near, color=COLORS["band"], alpha=0.12, label=f"near-tie band (margin < {near:g})")
    band.set_gid("near-tie-band")
    edge = [lo_x, hi_x]
    ax.plot(edge, [x / 2 for x in edge], color=COLORS["ink"], ls=":", lw=1,
            label="margin = 2·max |Δ| (a flip is possible left of it)")
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(lo_y, hi_y)
    ax.set_xlabel("reference top1–top2 margin (logits)")
    ax.set_ylabel("max |Δ| at the position (logits)")
    legend_above(ax, ncols=2)


def kld_confidence(fig: Any, data: dict[str, Any]) -> None:
    """Mean KLD per top-1 probability bucket (log), annotated with positions and share of the summed KLD."""
    ax = fig.add_subplot()
    buckets = data["buckets"]
    means = [b["mean_kld"] or 0.0 for b in buckets]
    positive = [m for m in means if 0 < m < math.inf]
    top = max(positive) * 3 if positive else 1.0  # an infinite mean (a token the candidate rules out) is drawn here
    heights = [0 if not b["positions"] else top if m == math.inf else max(m, KLD_FLOOR)
               for m, b in zip(means, buckets)]
    bars = ax.bar(range(len(buckets)), heights,
                  color=[COLORS["candidate"] if b["positions"] else COLORS["neutral"] for b in buckets])
    tag_bars(bars, "bars")
    ax.set_yscale("log")
    ax.set_xticks(range(len(buckets)), [b["label"] for b in buckets])
    ax.set_xlabel("reference top-1 probability")
    ax.set_ylabel("mean KLD (nats)")
    if positive:
        ax.set_ylim(min(positive) / 5, top * 3)
    for rect, b, m in zip(bars, buckets, means):
        share = "" if b["share"] is None or not math.isfinite(b["share"]) else f", {100 * b['share']:.0f} % of ΣKLD"
        share += ", mean inf" if m == math.inf else ""
        y = rect.get_height() if b["positions"] else (min(positive) / 4 if positive else 1e-9)
        ax.annotate(f"n={b['positions']}{share}", (rect.get_x() + rect.get_width() / 2, y), ha="center",
                    va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")


def check_heatmap(fig: Any, data: dict[str, Any]) -> None:
    """Checks (or batch copies) × positions, log10 max |Δ|; white where bit-identical."""
    rows, width = data["rows"], int(data["width"])
    fig.set_size_inches(7.5, max(1.8, 0.5 + 0.28 * len(rows)))
    ax = log10_heatmap(fig, [row["values"] for row in rows], width, cmap="viridis",
                       identical="every check bit-identical at every position")
    ax.set_yticks(range(len(rows)), [plain(r["label"]) for r in rows])
    ax.set_xlabel("position")


def verify_k(fig: Any, data: dict[str, Any]) -> None:
    """Flips per K (bars) and the bit-exact share of rows per K (line, right axis)."""
    ax = fig.add_subplot()
    ks = data["k"]
    xs = range(len(ks))
    bars = ax.bar(xs, data["flips"], color=COLORS["flip"], alpha=0.8, label="argmax flips")
    tag_bars(bars, "bars")
    ax.set_xticks(list(xs), [f"K={k}" for k in ks])
    ax.set_ylabel("argmax flips")
    ax.set_ylim(0, max(max(data["flips"], default=0), 1) * 1.25)
    share = [100 * e / r if r else math.nan for e, r in zip(data["bit_exact"], data["rows"])]
    right = ax.twinx()
    right.grid(False)
    right.plot(list(xs), share, color=COLORS["control"], marker="o", label="bit-exact rows (%)")
    right.set_ylim(0, 105)
    right.set_ylabel("bit-exact rows (%)")
    handles = [bars, *right.get_lines()]
    ax.legend(handles, [h.get_label() for h in handles], loc="lower left", bbox_to_anchor=(0, 1.01), ncols=2,
              borderaxespad=0)


def verify_flip_margins(fig: Any, data: dict[str, Any]) -> None:
    """Each flip's M=1 margin by K (strip), with the near-tie margin τ."""
    ax = fig.add_subplot()
    flips = [f for f in data["flips"] if f["margin"] is not None]
    ks = sorted({f["k"] for f in data["flips"]})
    pos = {k: i for i, k in enumerate(ks)}
    offsets: dict[int, int] = {}
    xs, ys = [], []
    for f in flips:
        n = offsets.get(f["k"], 0)
        offsets[f["k"]] = n + 1
        xs.append(pos[f["k"]] + ((n % 7) - 3) * 0.04)
        ys.append(f["margin"])
    points = ax.scatter(xs, ys, color=COLORS["flip"], marker="X", s=50, zorder=5, label=f"flip ({len(flips)})")
    points.set_gid("flips")
    tau = float(data["tau"])
    ax.axhline(tau, color=COLORS["ink"], ls="--", lw=1, label=f"near-tie margin τ = {tau:g}")
    ax.set_xticks(range(len(ks)), [f"K={k}" for k in ks])
    ax.set_xlim(-0.6, len(ks) - 0.4)
    ax.set_ylim(0, max([tau, *ys]) * 1.2)
    ax.set_ylabel("M=1 top1–top2 margin (logits)")
    legend_above(ax)


def guard_cost(fig: Any, data: dict[str, Any]) -> None:
    """Grouped bars per fallback: extra rows, extra calls, time overhead (percent)."""
    ax = fig.add_subplot()
    fallbacks = data["fallbacks"]
    measures = (("extra_rows", "extra forward rows"), ("extra_calls", "extra forward calls"),
                ("overhead", "time/token vs unguarded"))
    width = 0.8 / len(measures)
    palette = (COLORS["control"], COLORS["candidate"], COLORS["neutral"])
    for j, ((key, label), color) in enumerate(zip(measures, palette)):
        values = [100 * f[key] if f[key] is not None else 0.0 for f in fallbacks]
        bars = ax.bar([i + (j - 1) * width for i in range(len(fallbacks))], values, width, label=label, color=color)
        tag_bars(bars, f"bars-{key.replace('_', '-')}")
    ax.axhline(0, color=COLORS["ink"], lw=0.8)
    ax.set_xticks(range(len(fallbacks)), [f"{f['name']} ({f['identical']} prompts identical)" for f in fallbacks])
    ax.set_ylabel("% over unguarded")
    legend_above(ax, ncols=3)
