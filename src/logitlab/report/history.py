"""The ``history show`` report: every series with its change points, as a document.

:func:`history_document` turns a :class:`~logitlab.experiments.history.show.HistoryResult`
into a :class:`~logitlab.report.document.Document`: a header, the change
points (the commit range each lies in, the levels either side, the change,
the p-value and its direction), one row per series with a sparkline of its
values (``│`` marks a change point), and a :class:`~logitlab.report.document.Figure`
per series with the data an HTML panel plots. Nothing here computes a statistic.
"""

from __future__ import annotations

from typing import Any

from logitlab.experiments.history.metrics import FINGERPRINT, is_numerics_metric
from logitlab.experiments.history.show import HistoryResult, SeriesChanges, is_alarm
from logitlab.perf.changepoint import ChangePoint
from logitlab.report.bench import fmt_value
from logitlab.report.document import Document, Figure, Heading, KeyValues, Paragraph, Span, Table, rich
from logitlab.report.text import plural

__all__ = ["history_document", "sparkline", "CHANGE_HEADER", "SERIES_HEADER"]

CHANGE_HEADER = ("series", "between commits", "before", "after", "change", "p-value", "direction")
SERIES_HEADER = ("series", "unit", "builds", "latest", "values (│ change point)", "noise sd", "change points")
#: Points a sparkline shows (the latest ones).
SPARK_POINTS = 48
_BARS = "▁▂▃▄▅▆▇█"
_WORDS = {"regression": "regression", "improvement": "improvement", "changed": "bits changed"}


def _short(commit: str | None) -> str:
    return "?" if commit is None else commit[:10]


def _value(value: float | None, unit: str) -> str:
    """A level in its unit; a ratio as ``0.4009×``."""
    if unit == "ratio" and value is not None:
        return f"{value:.4g}×"
    return fmt_value(value, unit)


def sparkline(values: list[Any], cuts: set[int], *, start: int = 0) -> str:
    """Values as bar characters (▁ lowest … █ highest), ``│`` before each index in ``cuts``; fingerprints as
    letters, one per distinct hash in order of appearance. ``start``: index of ``values[0]`` in the series."""
    out = []
    numeric = [v for v in values if isinstance(v, (int, float))]
    low, high = (min(numeric), max(numeric)) if numeric else (0.0, 0.0)
    letters: dict[str, str] = {}
    for i, v in enumerate(values):
        if start + i in cuts and i:
            out.append("│")
        if isinstance(v, str):
            letters.setdefault(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[len(letters) % 26])
            out.append(letters[v])
        elif high == low:
            out.append(_BARS[3])
        else:
            out.append(_BARS[min(7, int((v - low) / (high - low) * 8))])
    return "".join(out)


def _series_name(s: SeriesChanges, machines: int) -> str:
    return f"{s.machine}: {s.name}" if machines > 1 else s.name


def _change_row(s: SeriesChanges, c: ChangePoint, machines: int) -> tuple:
    name = Span(_series_name(s, machines), "code")
    between = f"{_short(c.previous_label)} → {_short(c.label)}"
    word = _WORDS[c.direction]
    direction = Span(word, f"call:{c.direction}")
    if c.direction == "changed":
        return (name, between, (c.fingerprint_before or "")[:12], (c.fingerprint_after or "")[:12], "—", "—",
                rich(direction))
    change = "n/a" if c.change is None else f"{100 * c.change:+.1f}%"
    p = "n/a" if c.p_value is None else f"{c.p_value:.2g}"
    return (name, between, _value(c.mean_before, s.unit), _value(c.mean_after, s.unit), change, p, rich(direction))


def _series_row(s: SeriesChanges, machines: int) -> tuple:
    shown = s.values[s.shown_from:][-SPARK_POINTS:]
    start = len(s.values) - len(shown)
    cuts = {c.index for c in s.detection.change_points}
    latest = s.values[-1]
    latest_text = latest[:12] if isinstance(latest, str) else _value(latest, s.unit)
    noise = "n/a" if s.detection.noise_sd is None else (
        f"{100 * s.detection.noise_sd:.1f}%" if s.detection.log_scale else f"{s.detection.noise_sd:.3g}")
    cps = s.change_points
    summary = "none" if not cps else ", ".join(
        f"{_WORDS[c.direction]} at {_short(c.label)}" for c in cps)
    unit = "hash" if s.kind == FINGERPRINT else (s.unit or "—")  # a bench --metric may have no --unit
    return (Span(_series_name(s, machines), "code"), unit, str(len(s.values)), latest_text,
            sparkline(shown, cuts, start=start), noise, summary)


def _next_steps(ordered: list[tuple[SeriesChanges, ChangePoint]]) -> list[Paragraph]:
    """One ``bisect`` command line for the first numerics alarm and one for the first speed alarm."""
    lines = []
    for numerics in (True, False):
        first = next(((s, c) for s, c in ordered if is_alarm(c) and is_numerics_metric(s.metric) == numerics
                      and c.previous_label and c.label), None)
        if first is None:
            continue
        s, c = first
        command = (f"logitlab bisect {_short(c.previous_label)}..{_short(c.label)} --repo ENGINE --build 'BUILD' "
                   f"--probe {'numerics' if numerics else 'speed'} -- ...")
        lines.append(Paragraph(rich("next: ", Span(command, "code"), f" ({s.name}) finds the commit in the range, "
                                    "if it holds more than one"), tone="dim", tight=True))
    return lines


def _figure(s: SeriesChanges) -> Figure:
    return Figure(
        "history-series",
        f"{s.name} on {s.machine}: one point per record in {s.ordered_by} order; vertical lines at change points",
        {"machine": s.machine, "variant": s.variant, "metric": s.metric, "kind": s.kind, "unit": s.unit,
         "commits": list(s.commits), "commit_dates": list(s.commit_dates), "values": list(s.values),
         "shown_from": s.shown_from, "outliers": list(s.detection.outliers),
         "change_points": [c.to_dict() for c in s.change_points]})


def history_document(result: HistoryResult, **_: Any) -> Document:
    """The report of ``history show``."""
    cfg = result.settings
    alarms = result.alarms
    changes = [(s, c) for s in result.series for c in s.change_points]
    regressions = sum(1 for _, c in alarms if c.direction == "regression")
    numerics = len(alarms) - regressions
    if alarms:
        title = rich("logitlab history: ", Span(plural(regressions, "regression"), "call:regression"), ", ",
                     Span(plural(numerics, "numerics change"), "call:changed" if numerics else "strong"))
    elif changes:
        title = rich("logitlab history: ", Span(plural(len(changes), "improvement"), "call:improvement"),
                     ", no regression")
    else:
        title = rich("logitlab history: ", Span("no change point", "call:equivalent"))
    order = (f"git first-parent commit order of {result.repo}" if result.repo else
             "the order the records were made (give --repo for commit order)")
    shown = f"the last {cfg['last']} builds of each series" if cfg.get("last") else "every build"
    doc = Document("history", "logitlab history")
    rows = [("folder", Span(result.root, "code")),
            ("records", f"{result.n_records} on {plural(len(result.machines), 'machine')}: "
                        f"{', '.join(result.machines)}"),
            ("order", order),
            ("series", f"{len(result.series)} shown" + (f", {result.hidden} without a regression or numerics "
                                                        "change left out (--regressions-only)" if result.hidden
                                                        else "")),
            ("change points", f"among {shown}; PELT (l2 cost, BIC penalty) on logs, then a Welch t merge at "
                              f"p ≤ {cfg['max_pvalue']:g}, ≥ {cfg['min_size']} builds per level; fingerprints: "
                              "every change of hash")]
    if cfg.get("metrics"):
        rows.append(("metrics", ", ".join(cfg["metrics"])))
    doc.add(Heading(title), KeyValues(rows, boxed=True))
    machines = len(result.machines)
    if changes:
        ordered = sorted(changes, key=lambda sc: (not is_alarm(sc[1]), sc[0].machine, sc[0].name, sc[1].index))
        doc.add(Table(CHANGE_HEADER, [_change_row(s, c, machines) for s, c in ordered], title="change points",
                      align=("left", "left", "right", "right", "right", "right", "left"),
                      tone="error" if alarms else None))
        doc.add(*_next_steps(ordered))
    elif result.series:
        doc.add(Paragraph("no change point among the builds shown", tone="ok"))
    if result.series:
        doc.add(Table(SERIES_HEADER, [_series_row(s, machines) for s in result.series], title="series",
                      align=("left", "left", "right", "right", "left", "right", "left")))
        left_out = sum(s.left_out for s in result.series)
        if left_out:
            doc.add(Paragraph(f"{plural(left_out, 'record')} of commits off the first-parent history of "
                              f"{result.repo} left out", tone="dim", tight=True))
    else:
        doc.add(Paragraph("no series with a regression or numerics change among the builds shown", tone="ok"))
    doc.add(*(_figure(s) for s in result.series))
    return doc
