"""The figures of each report: :class:`~logitlab.report.document.Figure` blocks built from typed results.

Each function takes a result (or a part of one) and returns the figure
blocks it supports, with the numbers each plot needs as plain JSON types
and a caption that says what the figure shows and what to read from it.
Nothing here draws (``report/figures.py`` and the ``plot_*`` modules do, for
the HTML report) and nothing here computes a statistic beyond picking and
grouping what the result holds. Where the data for a figure is missing (a
bit-exact run, a result saved before the data existed) the figure is left out.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from logitlab.numerics.comparison import Comparison
from logitlab.numerics.confidence import kld_by_confidence
from logitlab.report.document import Figure

__all__ = [
    "comparison_figures",
    "paired_figure",
    "slot_figure",
    "ab_slot_figure",
    "bench_run_figures",
    "verify_figures",
    "check_heatmap_figure",
    "dump_figures",
    "scenario_figure",
    "noise_figure",
]


def _num(x: Any) -> float | None:
    """A finite float, or None (NaN, None)."""
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


# ---------------------------------------------------------------------------
# numerics: one comparison of two runs


def comparison_figures(c: Comparison, *, near_tie_margin: float, n_prompt: int | None = None,
                       what: str = "candidate vs reference", labels: Sequence[str] | None = None) -> list[Figure]:
    """ULP histogram, KLD per position, margin scatter and KLD by confidence of one comparison.

    Args:
        c: the comparison (full vocabulary or top-k).
        near_tie_margin: the near-tie threshold (logits) drawn as a band.
        n_prompt: prompt positions (rows 0..n_prompt-1 come from prefill); draws the prompt/decode boundary.
        what: which two runs, in words, for the captions.
        labels: optional label per position (e.g. ``copy 1 pos 3`` of a stacked batch check).

    Returns:
        The figures the data supports: none for a bit-exact comparison.
    """
    if c.bit_exact:
        return []
    flips = [int(f["position"]) for f in c.flips]  # run positions; as rows of the row_* lists: flip_rows
    flip_rows = [c.row_of(p) for p in flips]
    first = c.first_mismatch["position"] if c.first_mismatch else None
    out: list[Figure] = []
    if c.scope == "full":
        total = sum(c.ulp_histogram.values())
        exact = c.ulp_histogram.get("0", 0)
        out.append(Figure("ulp-histogram", (
            f"ULP distance of every logit, {what} ({total:,} entries, log count). The first bar is the "
            f"bit-exact share ({100 * exact / total:.2f} % of entries). Rounding noise keeps its mass in the "
            "first bins; a change of algorithm (another reduction order, another kernel) moves most entries "
            "past 16 ULP."),
            {"bins": list(c.ulp_histogram), "counts": [int(v) for v in c.ulp_histogram.values()],
             "exact_share": exact / total if total else None}))
    out.append(Figure("kld-positions", (
        f"KL divergence per position, {what} (nats, log scale; bit-identical positions sit on the floor, a tenth "
        "of the smallest KLD). "
        "Red crosses: argmax flips; the dashed line: the first differing logit"
        + ("; the grey line: where the prompt (prefill) ends and greedy decode begins" if n_prompt else "")
        + ". Read where along the sequence the two runs part, whether the divergence grows with the position "
          "(a KV-cache or accumulation effect) and whether flips sit where the KLD is high."),
        {"kld": [_num(x) for x in c.row_kld], "flips": flips, "first_mismatch": first,
         "n_prompt": n_prompt, "labels": list(labels) if labels else None,
         **({"positions": list(c.positions)} if c.positions is not None else {})}))
    margins = [_num(x) for x in c.row_margin_ref]
    if any(m is not None for m in margins):
        out.append(Figure("margin-scatter", (
            f"Each position's reference top1–top2 margin (logits) against the largest change of any logit "
            f"there (max |Δ|), {what}; log axes, bit-identical positions left out. A flip needs a margin "
            "below 2·max |Δ| (left of the dotted diagonal); the shaded band is the near-tie band "
            f"(margin < {near_tie_margin:g}, --near-tie-margin). Flips (red) inside the band are near-ties; a "
            "flip far right of the band is a real change."),
            {"margin": margins, "change": [_num(x) for x in c.row_max_abs_diff],
             "differing": [bool(d) for d in c.row_differing], "flips": flip_rows, "near_tie": near_tie_margin}))
    if c.row_top1_prob_ref is not None:
        buckets = kld_by_confidence(c.row_kld, c.row_top1_prob_ref)
        identical = sum(1 for d in c.row_differing if not d)
        out.append(Figure("kld-confidence", (
            f"Mean KL divergence by the reference's confidence (its top-1 probability), {what}; the number on "
            "each bar is the positions in that bucket and their share of the summed KLD"
            + (f"; {identical} bit-identical positions (KLD 0) are not bucketed" if identical else "")
            + ". The mean KLD of a run is dominated by positions where the reference itself is undecided: "
              "high bars on the left are expected, a high bar on the right (a confident reference moved) is "
              "the alarming one."),
            {"buckets": [{"label": b.label, "positions": b.positions, "mean_kld": b.mean_kld,
                          "max_kld": b.max_kld, "share": b.share} for b in buckets]}))
    return out


def check_heatmap_figure(checks: Sequence[Any]) -> Figure | None:
    """Invariance: one heatmap row per check (per copy for a stacked batch check), one column per position,
    coloured by log10 max |Δ|. ``checks`` are :class:`~logitlab.experiments.invariance_results.Check` objects."""
    rows: list[dict[str, Any]] = []
    width = 0
    for check in checks:
        c = check.comparison
        stacked = check.details.get("stacked")
        values = [_num(x) for x in c.row_max_abs_diff]
        if stacked:
            n = int(stacked["length"])
            for copy in range(int(stacked["copies"])):
                rows.append({"label": f"{check.name} · copy {copy}", "values": values[copy * n:(copy + 1) * n]})
                width = max(width, n)
        else:
            rows.append({"label": check.name, "values": values})
            width = max(width, len(values))
    if not rows:
        return None
    return Figure("check-heatmap", (
        "max |Δ| of the logits at each position (columns) for each check (rows; a batch check has one row per "
        "copy of the prompt in the batch), log10 colour scale; white: bit-identical. Read which copies and which "
        "positions move: a whole row lit means the batch shape changed the kernel; one column lit in every row "
        "means a position-dependent effect (padding, a tile boundary)."),
        {"rows": rows, "width": width})


# ---------------------------------------------------------------------------
# speed


def paired_figure(comparisons: Sequence[Any], *, what: str = "block") -> Figure | None:
    """Per-block log-ratio strip plot with the paired CI and the ±δ band, one panel per metric.

    ``comparisons`` are :class:`~logitlab.perf.paired.PairedComparison` objects.
    """
    panels = []
    for p in comparisons:
        if not p.block_log_ratios:
            continue
        panels.append({"metric": p.metric, "unit": p.unit, "higher_is_better": p.higher_is_better,
                       "log_ratios": [float(x) for x in p.block_log_ratios], "ratio": _num(p.ratio),
                       "ci_low": _num(p.ci_low), "ci_high": _num(p.ci_high), "margin": float(p.margin),
                       "margin_source": p.margin_source, "call": p.call,
                       "aa_log_ratios": [float(x) for x in (p.aa_log_ratios or [])]})
    if not panels:
        return None
    return Figure("block-ratios", (
        f"Each dot is one ABBA/BAAB {what}: candidate/control of the metric over its slots (log scale, 1 = "
        "no change). The black bar is the geometric-mean ratio with its 95 % paired-t CI; the green band is the "
        "equivalence region ±δ; grey diamonds are the control-vs-control (A/A) ratios where measured. "
        "The call reads off the picture: CI inside the band = equivalent; CI wholly beyond it = faster or "
        "slower; else inconclusive. Dots far apart mean a noisy machine: more blocks narrow the CI."),
        {"panels": panels})


def slot_figure(series: Sequence[dict[str, Any]], *, unit_label: str) -> Figure | None:
    """Each slot's value in run order: ``series`` is one panel per metric, each
    ``{"metric", "label", "points": [{"run", "variant", "block", "position", "value"}]}``."""
    series = [s for s in series if s["points"]]
    if not series:
        return None
    return Figure("slot-series", (
        f"Every timed slot in the order it ran ({unit_label}); blue: control, orange: candidate; the grey "
        "lines separate the blocks; hollow markers are warmups (not timed). A trend across the run is "
        "machine drift (the ABBA/BAAB pairing cancels its linear part); a saw-tooth inside the blocks is a "
        "slot-position effect (the second run of a pair faster or slower, whatever the variant)."),
        {"panels": list(series)})


def ab_slot_figure(runs: Sequence[Any], phases: Sequence[tuple[str, str]]) -> Figure | None:
    """``ab``: tokens/s of every run in run order, per phase. ``runs`` are
    :class:`~logitlab.experiments.ab.RunRecord` objects; ``phases`` pairs a phase name with its attribute."""
    series = []
    for phase, attribute in phases:
        points = [{"run": r.slot, "variant": r.variant, "block": r.block, "position": r.position,
                   "value": _num(getattr(r, attribute))} for r in runs]
        series.append({"metric": phase, "label": f"{phase} tokens/s", "points": points})
    return slot_figure(series, unit_label="tokens/s, higher is faster")


def bench_run_figures(result: Any) -> list[Figure]:
    """``bench run``: the block ratios of every compared metric, and each slot's value in run order."""
    out = [f for f in (paired_figure(list(result.comparisons.values())),) if f is not None]
    metrics = [(name, p.unit) for name, p in result.comparisons.items()][:1]  # the primary metric
    series = []
    for name, unit in metrics:
        attribute = {"wall": "wall_s", "user": "user_s", "sys": "sys_s", "max_rss": "max_rss_bytes"}.get(name, "metric")
        points = [{"run": r.index, "variant": r.variant, "block": r.block, "position": r.position,
                   "value": _num(getattr(r, attribute)) if r.ok else None} for r in result.runs]
        series.append({"metric": name, "label": f"{name} ({unit})" if unit else name, "points": points})
    slots = slot_figure(series, unit_label="per metric as labelled; for times lower is faster")
    return out + ([slots] if slots else [])


def scenario_figure(scenarios: Sequence[Any], confidence: float) -> Figure | None:
    """``bench compare``: scenario ratios sorted by effect, CI whiskers, each scenario's ±δ band.

    ``scenarios`` are :class:`~logitlab.perf.compare_files.ScenarioComparison` objects.
    """
    rows = [{"name": s.name, "ratio": float(s.ratio), "ci_low": _num(s.ci_low), "ci_high": _num(s.ci_high),
             "margin": float(s.margin), "status": s.status, "higher_is_better": bool(s.higher_is_better)}
            for s in scenarios if s.ratio is not None and s.ratio > 0]
    if not rows:
        return None
    rows.sort(key=lambda r: math.log(r["ratio"]) * (-1 if r["higher_is_better"] else 1))
    return Figure("scenario-ratios", (
        f"PR/base ratio per scenario (log scale; 1 = no change), sorted from most improved (top) to most "
        f"regressed (bottom), with the {100 * confidence:g} % CI as whiskers and each scenario's own noise band "
        "±δ shaded. A scenario is regressed or improved only when its whole whisker clears its band; a "
        "dot outside the band with a whisker back inside is inconclusive, not a regression."),
        {"scenarios": rows})


def noise_figure(profile: Any) -> Figure | None:
    """``bench calibrate``: each scenario's A/A ratios and the margin δ derived from them."""
    rows = [{"name": s.name, "aa_ratios": [float(r) for r in s.aa_ratios], "margin": float(s.margin)}
            for s in profile.scenarios.values()]
    if not rows:
        return None
    return Figure("noise-profile", (
        "Each dot is one A/A ratio (run i vs run j of the same code; log scale, 1 = no change); the band is the "
        "margin δ calibrated for the scenario. Wide scatter means a noisy scenario: its δ, and so the smallest "
        "change bench compare can call, is wide too."),
        {"scenarios": rows})


# ---------------------------------------------------------------------------
# verify


def verify_figures(result: Any) -> list[Figure]:
    """Flips and bit-exact rows per K, the margins of the flips, and the near-tie guard's cost."""
    out: list[Figure] = []
    tau = float(result.config["thresholds"]["near_tie_margin"])
    if result.totals:
        out.append(Figure("verify-k", (
            "For each verify block size K (M=K rows against M=1 greedy, all prompts): the bars count argmax "
            "flips, the line is the share of rows that stayed bit-exact. K = 1 must be bit-exact (the same call "
            "as M=1); a share that drops at K = 2 and stays flat is the batched kernel's rounding; flips that "
            "grow with K mean the in-block rows differ more the further they sit in the block."),
            {"k": [t.k for t in result.totals], "rows": [t.rows for t in result.totals],
             "bit_exact": [t.bit_exact_rows for t in result.totals], "flips": [t.flips for t in result.totals]}))
    if result.flips:
        out.append(Figure("verify-flip-margins", (
            f"Each flip's M=1 top1–top2 margin (logits), by K; the dashed line is the near-tie margin τ = {tau:g}. "
            "Flips below the line are near-ties (the M=1 and M=K rows disagree only on a coin toss); a flip "
            "above it is a real numerical difference in the verify path."),
            {"flips": [{"k": f.k, "margin": _num(f.margin_ref), "prompt": f.prompt, "position": f.position}
                       for f in result.flips], "tau": tau}))
    g = result.guard
    if g is not None and g.totals:
        out.append(Figure("guard-cost", (
            f"Cost of the near-tie guard per fallback (K = {g.k}, τ = {g.tau:g}): extra forward rows and calls "
            "over speculative decoding without a guard, and the time per token against the unguarded run. Lower "
            "is cheaper; a fallback is only worth its cost where it made every prompt token-identical (the "
            "table above)."),
            {"fallbacks": [{"name": name, "extra_rows": _num(t["extra_rows"]), "extra_calls": _num(t["extra_calls"]),
                            "overhead": _num(t["overhead_vs_unguarded"]),
                            "identical": f"{t['identical_prompts']}/{t['prompts']}"}
                           for name, t in g.totals.items()]}))
    return out


# ---------------------------------------------------------------------------
# dump-diff


def dump_figures(result: Any) -> list[Figure]:
    """Layer × position heatmap of max |Δ| with the first divergence marked; error growth per layer."""
    out: list[Figure] = []
    first = result.first_divergence
    positions: set[int] = set()
    cells: dict[tuple[str, int], float] = {}
    numbered_seen = False
    first_key = None
    for t in result.tensors:
        numbered_seen = numbered_seen or t.layer is not None
        if t.stats is None or t.position is None:
            continue
        # tensors outside the numbered layers: "in" (embeddings) before the first layer, "out" after
        key = str(t.layer) if t.layer is not None else ("out" if numbered_seen else "in")
        if t is first:
            first_key = key
        positions.add(t.position)
        value = _num(t.stats.max_abs_diff)
        cells[(key, t.position)] = max(cells.get((key, t.position), 0.0), value or 0.0)
    if cells:
        cols = sorted(positions)
        keys = {k for k, _ in cells}
        order = [k for k in ("in",) if k in keys] + sorted((k for k in keys if k not in ("in", "out")), key=int) \
            + [k for k in ("out",) if k in keys]
        marked = None
        if first_key is not None:
            marked = {"layer": first_key, "position": first.position, "label": first.label}
        out.append(Figure("dump-heatmap", (
            "Largest |Δ| over every tensor of a layer (rows) at each position (columns), log10 colour scale; "
            "white: bit-identical; 'in' and 'out' hold the tensors before and after the numbered layers "
            "(embeddings; output norm and logits). "
            "The red box is the first divergent tensor" + (f" ({first.label})" if first else "")
            + ". Read whether the divergence starts at one position and spreads along the sequence through "
              "the KV cache (a lit column, then the rows below it), or appears at every position of one layer "
              "(a kernel of that layer)."),
            {"layers": order, "positions": cols,
             "values": [[cells.get((k, p)) for p in cols] for k in order], "first": marked}))
    rows = [r for r in result.layers if r.compared]
    if rows:
        labels = [r.label for r in rows]
        where = "after" if first_key == "out" else "before"
        first_row = None if first is None else next(
            (i for i, r in enumerate(rows) if r.layer == first.layer and (r.layer is not None or r.where == where)),
            None)
        out.append(Figure("dump-growth", (
            "Error growth through the network: per layer (execution order), the largest |Δ| of its tensors and "
            "1 − the smallest cosine similarity, log scale (a bit-exact layer has no point). A flat line is rounding noise carried along; a "
            "step up marks the layer that adds the difference; steady growth is noise amplified by depth."),
            {"labels": labels, "max_abs_diff": [_num(r.max_abs_diff) for r in rows],
             "one_minus_cos": [None if _num(r.min_cosine) is None else max(0.0, 1.0 - r.min_cosine) for r in rows],
             "first": first_row}))
    return out
