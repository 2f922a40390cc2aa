"""The ``bench run``, ``bench compare`` and ``bench calibrate`` reports, as documents.

:func:`run_document` turns a :class:`~logitlab.perf.commands.BenchRunResult`,
:func:`compare_document` a :class:`~logitlab.perf.compare_files.FileComparison`
and :func:`calibration_document` a :class:`~logitlab.perf.calibration.NoiseProfile`
into a :class:`~logitlab.report.document.Document`; the renderers write it.
Nothing here computes a statistic.
"""

from __future__ import annotations

import math
from typing import Any

from logitlab.perf.commands import BenchRunResult
from logitlab.perf.calibration import NoiseProfile
from logitlab.perf.compare_files import MIN_SAMPLES_FOR_CI, FileComparison, ScenarioComparison
from logitlab.report.document import Bullets, Document, Heading, KeyValues, Paragraph, Rich, Span, Table, rich
from logitlab.report.figure_blocks import bench_run_figures, noise_figure, scenario_figure
from logitlab.report.speed_text import paired_reason, scenario_reason, sequential_reason, stopping_note
from logitlab.report.text import INTERRUPTED, plural, stopped_line

__all__ = ["run_document", "compare_document", "calibration_document", "fmt_value", "host_line"]

STATUS_ICON = {"regressed": "🔴", "improved": "🟢", "unchanged": "✅", "inconclusive": "⚪"}
#: Scenarios whose status is explained in words under the compare table (all are in the JSON).
MAX_REASONS = 10


# ---------------------------------------------------------------------------
# Formatting of values


def fmt_value(value: float | None, unit: str) -> str:
    """A measurement with a readable unit: times auto-scaled (ns/µs/ms/s), bytes in MiB."""
    if value is None:
        return "n/a"
    if unit == "s":
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if value >= scale or scale == 1e-9:
                return f"{value / scale:.4g} {name}"
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB"
    return f"{value:.4g} {unit}".rstrip()


def _change(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f}%"


def _ci(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"{low:.3f}–{high:.3f}"


def host_line(host: dict[str, Any]) -> str:
    """The machine in one line: CPU, cores, OS, Python, 1-minute load average."""
    load = host.get("load_average_1m")
    return (f"CPU: {host.get('cpu', '?')} · cores: {host.get('cores', '?')} · OS: {host.get('os', '?')} · "
            f"Python {host.get('python', '?')} · load avg (1 min): {'n/a' if load is None else load}")


def _host(host: dict[str, Any], *, tight: bool = False) -> Paragraph:
    return Paragraph(rich(Span("Host.", "strong"), " " + host_line(host)), tone="dim", tight=tight)


def _codes(names: list[str]) -> Rich:
    """Names as code spans, comma-separated."""
    parts: list[Any] = []
    for i, name in enumerate(names):
        parts += [", " if i else None, Span(name, "code")]
    return rich(*parts)


# ---------------------------------------------------------------------------
# run

RUN_HEADER = ("metric", "control", "candidate", "ratio (95% CI)", "call", "δ", "MDE", "slot position")
RUN_METHOD = ("Per block, log(candidate/control) over its ABBA/BAAB slots, so linear drift and a fixed slot bias "
              "cancel; geometric-mean ratio over blocks with a paired-t 95% CI (bootstrap as a cross-check); call "
              "against δ (faster/slower/equivalent, else inconclusive), δ from the control's A/A slots unless given "
              "(--repeats auto: fixed before the first look: --margin, else --noise's calibration, else 2 %).")


def _p(p_value: float | None) -> str:
    """A p-value, or n/a (one block gives no spread, so no test)."""
    return "n/a" if p_value is None else f"{p_value:.2g}"


def run_rows(result: BenchRunResult) -> list[tuple[str, ...]]:
    """Per compared metric: control, candidate, ratio (CI), call, δ, MDE, slot-position effect (RUN_HEADER).

    δ's source (``a/a``, ``option``, ...) is in the δ cell only where the metrics' sources differ (else the
    line under the table names it once).
    """
    rows = []
    mixed = len({c.margin_source for c in result.comparisons.values()}) > 1
    for metric, p in result.comparisons.items():
        means = result.summaries.get(metric, {})
        pos = p.position
        pos_text = "n/a" if pos is None or pos.ratio is None else (
            f"{pos.ratio:.3f} p={_p(pos.p_value)}" + (" (significant)" if pos.significant else ""))
        rows.append((metric, fmt_value(means.get("control"), p.unit), fmt_value(means.get("candidate"), p.unit),
                     f"{'n/a' if p.ratio is None else f'{p.ratio:.3f}'} ({_ci(p.ci_low, p.ci_high)})", p.call,
                     f"{100 * p.margin:.1f}%" + (f" ({p.margin_source})" if mixed else ""),
                     "n/a" if p.mde is None else f"{100 * p.mde:.1f}%",
                     pos_text))
    return rows


def no_block_line(result: BenchRunResult, *, detail: bool = False) -> str | None:
    """``no complete block: …`` when nothing could be compared (None otherwise); ``detail``: name the
    first failure (a command line that prints its own ``error:`` line leaves it out)."""
    if result.comparisons:
        return None
    timed = [r for r in result.runs if not r.is_warmup]
    failed = [r for r in result.runs if not r.ok]
    first = failed[0] if failed else None
    where = "" if first is None or not detail else (
        f" (first: {first.variant} " + ("warmup" if first.is_warmup else f"block {first.block} slot {first.position}")
        + f", {first.error})")
    return (f"no complete block: {len(timed)}/{4 * result.config['blocks']} timed runs done, "
            f"{len(failed)} failed{where}")


def _schedule_line(result: BenchRunResult) -> str:
    cfg = result.config
    n_valid = result.primary.n_blocks if result.primary else 0
    size = f"up to {plural(cfg['blocks'], 'ABBA/BAAB block')} (--repeats auto)" if cfg.get("auto") else \
        plural(cfg['blocks'], 'ABBA/BAAB block')
    line = (f"{size} ({'random' if cfg['randomize'] else 'alternating'} order), "
            f"{cfg['warmup']} untimed warmup(s) per variant; {n_valid} block(s) compared")
    if cfg.get("auto"):
        primary = result.sequential.get(result.config["metric_name"] if result.config["metric_regex"] else "wall")
        line += "; " + stopping_note(primary, len({r.block for r in result.runs if r.block is not None}),
                                     "--repeats auto")
    return line


def _problem_lines(result: BenchRunResult) -> list[str]:
    lines = []
    if result.failed_blocks:
        failed = [r for r in result.runs if not r.ok and r.block in result.failed_blocks]
        lines.append(f"failed blocks (left out, never timed as a success): {result.failed_blocks} — "
                     + "; ".join(f"block {r.block} slot {r.position} {r.variant}: {r.error}" for r in failed[:5]))
    lines += [f"{metric} not compared: {why}" for metric, why in result.skipped_metrics.items()]
    return lines


def _aa_lines(result: BenchRunResult) -> list[str]:
    aa = result.aa
    if aa is None:
        return []
    p = result.primary
    call = p.call if p else "n/a"
    lines = [f"A/A: the same command on both sides; the paired call is {call}"
             + (" — a false positive (expected in 5% of A/A runs)" if aa.false_positive else " (no false positive)")]
    if aa.suggested_margin is not None:
        lines.append(f"suggested δ for {plural(result.config['blocks'], 'block')} on this machine: "
                     f"--margin {aa.suggested_margin:.3f} ({100 * aa.suggested_margin:.1f}%)")
    lines.append("one run vs one run with a fixed threshold would flag this A/A in "
                 + ", ".join(f"{_pct0(v)} of pairs at ±{k}" for k, v in aa.single_run_fpr.items())
                 + f" ({aa.n_pairs} pairs)")
    return lines


def _pct0(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value * 100:.0f}%"


def _stopped(error: str) -> Paragraph:
    return Paragraph(rich(Span("Stopped early:", "strong"), f" {error}"), tone="warning")


def _interrupted(result: BenchRunResult) -> Paragraph:
    """The Ctrl-C line: complete ABBA/BAAB blocks of the planned ones, and the runs measured."""
    cfg = result.config
    measured = [r for r in result.runs if r.block is not None]
    blocks: dict[int, int] = {}
    for run in measured:
        blocks[run.block] = blocks.get(run.block, 0) + 1
    planned = f"at most {cfg.get('blocks')}" if cfg.get("auto") else cfg.get("blocks")
    return Paragraph(stopped_line(INTERRUPTED, done=sum(1 for n in blocks.values() if n == 4), planned=planned,
                                  unit="ABBA/BAAB block", detail=f"{plural(len(measured), 'timed run')}",
                                  rests_on="the calls"), tone="error")


def run_document(result: BenchRunResult, *, show_error: bool = True) -> Document:
    """The report of ``bench run``.

    Args:
        result: the run, complete or partial.
        show_error: include the "Stopped early" line and the first failed run
            (leave them out when the caller prints the error itself).
    """
    cfg, p = result.config, result.primary
    call = p.call if p else "no result"
    doc = Document("bench-run", "logitlab bench run")
    doc.add(Heading(rich("logitlab bench run: ", Span(call, f"call:{call}" if p else "strong"),
                         f" ({p.metric})" if p else None)),
            KeyValues([("control", Span(cfg["control"], "code")), ("candidate", Span(cfg["candidate"], "code"))],
                      boxed=True))
    if result.error == INTERRUPTED and show_error:  # before any call: what they rest on
        doc.add(_interrupted(result))
    empty = no_block_line(result, detail=show_error)
    if empty:
        doc.add(Paragraph(empty, tone="warning"))
    else:
        sources = sorted({c.margin_source for c in result.comparisons.values()})
        note = f"δ from {', '.join(sources)}" + (" (the control's A/A slots)" if sources == ["a/a"] else "")
        if any(c.position is not None and c.position.significant for c in result.comparisons.values()):
            note += "; slot-position effect significant (second slot of a pair vs first)"
        problems = _problem_lines(result)
        doc.add(Table(RUN_HEADER, run_rows(result), align=("left", "right", "right", "right", "left", "right",
                                                             "right", "right")),
                Paragraph(f"{note}; {_schedule_line(result)}", tone="dim", tight=True),
                Bullets(problems, tone="warning", tight=True) if problems else None,
                *bench_run_figures(result))
    if p:
        decision = result.sequential.get(result.config["metric_name"] if result.config["metric_regex"] else "wall")
        doc.add(Paragraph(sequential_reason(decision) if decision else paired_reason(p)))
    if result.aa:
        doc.add(Bullets(_aa_lines(result), tone="note" if result.aa.false_positive else None))
    if not empty:
        doc.add(Paragraph(rich(Span("Method.", "strong"), " " + RUN_METHOD), tone="dim"))
    doc.add(_host(result.host, tight=not empty))
    if result.error and show_error and result.error != INTERRUPTED:
        doc.add(_stopped(result.error))
    return doc


# ---------------------------------------------------------------------------
# compare

CANNOT_CATCH = (
    rich("Changes smaller than a scenario's margin δ (by design), and any change behind an ",
         Span("inconclusive", "call:inconclusive"),
         " status: that scenario needs more samples or a quieter machine."),
    rich("Drift or load shared by a whole run: base and PR ran one after the other, not interleaved, so a machine "
         "that changed between them moves every ratio; calibrate δ on the same runner (",
         Span("logitlab bench calibrate", "code"), ") and decide what matters with ",
         Span("logitlab bench run", "code"), " (counterbalanced ABBA/BAAB)."),
    rich("Code paths and inputs the benchmarks do not exercise, and effects that appear only at other sizes, "
         "thread counts or hardware."),
)


def _margin_text(s: ScenarioComparison) -> str:
    return f"±{100 * s.margin:.1f}% ({s.margin_source})"


def compare_rows(cmp: FileComparison) -> list[tuple[Any, ...]]:
    """Status, scenario (a code span), base, PR, change, CI, δ, samples — worst first."""
    return [(f"{STATUS_ICON[s.status]} {s.status}", rich(Span(s.name, "code")), fmt_value(s.base, s.unit),
             fmt_value(s.candidate, s.unit), _change(s.ratio), _ci(s.ci_low, s.ci_high), _margin_text(s),
             f"{s.base_n}/{s.candidate_n}")
            for s in cmp.worst_first()]


def _headline(cmp: FileComparison) -> str:
    return " · ".join(f"{n} {status}" for status, n in cmp.counts.items() if n)


def _method(cmp: FileComparison) -> Rich:
    level = f"{100 * cmp.confidence:g}%"
    methods = sorted({s.ci_method for s in cmp.scenarios} - {"none"})
    no_ci = sum(s.ci_method == "none" for s in cmp.scenarios)
    tested = sum(s.p_change is not None for s in cmp.scenarios)
    sources = sorted({s.margin_source for s in cmp.scenarios})
    if sources == ["noise"]:
        margin = rich("δ per scenario from A/A noise (" + (cmp.noise_path or "calibration") + ")")
    else:
        named = {"noise": rich("from A/A noise"), "option": rich("set by --margin"),
                 "default": rich("the 2% default (not calibrated: run ", Span("logitlab bench calibrate", "code"),
                                 ")")}
        parts: list[Any] = ["δ "]
        for i, source in enumerate(sources):
            parts += [", " if i else None, named[source]]
        margin = rich(*parts)
    why = f"fewer than {MIN_SAMPLES_FOR_CI} samples on a side, or a summary only"
    ci = (f"no CI for any scenario ({why})" if not methods else
          f"{level} CI by {', '.join(methods)} over the samples"
          + (f" (none for {plural(no_ci, 'scenario')}: {why})" if no_ci else ""))
    if not tested:
        status = "Status: inconclusive for every scenario, as no CI can be given; the changes are shown for reference."
    else:
        status = (f"Status from the CI and δ together: regressed/improved only when the whole CI clears δ, with "
                  f"Holm's correction across {plural(tested, 'scenario')} (family-wise error "
                  f"{100 * (1 - cmp.confidence):g}%); unchanged when the CI lies inside ±δ; else inconclusive.")
    return rich(Span("Method.", "strong"), f" Ratio = PR/base of geometric means per scenario; {ci}; ", margin,
                ". ", status)


def _geomean_text(cmp: FileComparison) -> str | None:
    if cmp.geomean_ratio is None:
        return None
    ci = ("" if cmp.geomean_ci_low is None or cmp.geomean_ci_high is None else
          f" ({100 * cmp.confidence:g}% CI {cmp.geomean_ci_low:.3f}–{cmp.geomean_ci_high:.3f}, sampling noise only)")
    return (f"Geometric mean over {len(cmp.scenarios)} scenarios: PR/base {cmp.geomean_ratio:.3f} "
            f"({_change(cmp.geomean_ratio)}){ci}.")


def _reasons(cmp: FileComparison) -> Bullets | None:
    """Why each scenario that is not unchanged has its status (worst first)."""
    shown = [s for s in cmp.worst_first() if s.status != "unchanged"]
    if not shown:
        return None
    items = [rich(Span(s.name, "code"), ": " + scenario_reason(s, cmp)) for s in shown[:MAX_REASONS]]
    if len(shown) > MAX_REASONS:
        items.append(rich(f"… {len(shown) - MAX_REASONS} more (see --json)"))
    return Bullets(items, tight=True)


def compare_document(cmp: FileComparison, *, show_error: bool = True) -> Document:
    """The report of ``bench compare`` (a pull-request comment in Markdown).

    Args:
        cmp: the comparison.
        show_error: accepted for every builder's signature; a comparison has no error to show.
    """
    conf = f"{100 * cmp.confidence:g}%"
    doc = Document("bench-compare", "logitlab bench compare")
    clock = [("clock", "CPU time (--time cpu)")] if cmp.time == "cpu" else []
    doc.add(Heading(f"logitlab bench compare ({cmp.format}): {_headline(cmp)}"),
            KeyValues([("base", Span(cmp.base_path, "code")), ("PR", Span(cmp.candidate_path, "code")), *clock],
                      boxed=True))
    doc.add(Table(("status", "scenario", "base", "PR", "change", f"{conf} CI of ratio", "δ", "samples"),
                  compare_rows(cmp), align=("left", "left") + ("right",) * 6),
            _reasons(cmp), scenario_figure(cmp.scenarios, cmp.confidence))
    geomean = _geomean_text(cmp)
    if geomean:
        doc.add(Paragraph(geomean))
    if len({(s.margin, s.margin_source) for s in cmp.scenarios}) == 1:
        doc.add(Paragraph(f"δ {_margin_text(cmp.scenarios[0])} for every scenario", tight=bool(geomean)))
    for label, names in (("Only in base (not compared):", cmp.only_base),
                         ("Only in PR (not compared):", cmp.only_candidate)):
        if names:
            doc.add(Paragraph(rich(Span(label, "strong"), " ", _codes(names)), tone="warning"))
    summary_only = [s for s in cmp.scenarios if s.ci_method == "none"]
    if summary_only:
        doc.add(Paragraph(f"No CI for {len(summary_only)} scenario(s) ({summary_only[0].statistic}): their status "
                          "is inconclusive.", tone="note"))
    doc.add(Paragraph(_method(cmp), tone="dim"), _host(cmp.host))
    for label, ctx in (("base file", cmp.base_context), ("PR file", cmp.candidate_context)):
        if ctx:
            doc.add(Paragraph(f"· {label}: " + ", ".join(f"{k} {v}" for k, v in ctx.items()), tone="dim",
                              tight=True))
    doc.add(Paragraph(rich(Span("What this cannot catch", "strong"))), Bullets(CANNOT_CATCH, tight=True))
    return doc


# ---------------------------------------------------------------------------
# calibrate

CALIBRATION_HEADER = ("scenario", "A/A ratio(s)", "run-to-run sd", "within-run sd", "δ")


def calibration_document(profile: NoiseProfile, *, show_error: bool = True) -> Document:
    """The report of ``bench calibrate``: per scenario, the A/A ratios, the noise and the margin δ.

    Args:
        profile: the noise profile.
        show_error: accepted for every builder's signature; a profile has no error to show.
    """
    doc = Document("logitlab-bench-noise", "logitlab bench calibrate")
    doc.add(Heading(f"logitlab bench calibrate: δ for {plural(len(profile.scenarios), 'scenario')} from "
                    f"{len(profile.runs)} {profile.format} runs"),
            KeyValues([("runs", _codes(profile.runs)),
                       ("confidence", f"{100 * profile.confidence:g}% of A/A comparisons stay within δ")],
                      boxed=True))
    rows = [(rich(Span(s.name, "code")), ", ".join(f"{r:.3f}" for r in s.aa_ratios), f"{100 * s.between_sd_log:.2f}%",
             "n/a" if s.within_sd_log is None else f"{100 * s.within_sd_log:.2f}%", f"±{100 * s.margin:.1f}%")
            for s in profile.scenarios.values()]
    doc.add(Table(CALIBRATION_HEADER, rows, title=f"A/A noise from {len(profile.runs)} {profile.format} runs",
                  align=("left",) + ("right",) * 4), noise_figure(profile))
    if profile.skipped:
        doc.add(Paragraph(rich(Span("not in every run (not calibrated):", "strong"), " ", _codes(profile.skipped)),
                          tone="warning", tight=True))
    if len(profile.runs) == 2:
        doc.add(Paragraph("2 runs: each δ rests on one A/A ratio; 3-5 runs give steadier margins.", tone="dim",
                          tight=True))
    return doc
