"""Terminal (rich) and Markdown reports of ``logitlab bench run``, ``compare`` and ``calibrate``.

``format_*_markdown`` return text; ``*_renderables`` return rich renderables;
``display_*`` print those on a console. Nothing here computes statistics.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from rich import box
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from logitlab.perf.commands import BenchRunResult
from logitlab.perf.compare_files import FileComparison, NoiseProfile, ScenarioComparison
from logitlab.report.text import plural

STATUS_ICON = {"regressed": "🔴", "improved": "🟢", "unchanged": "✅", "inconclusive": "⚪"}
STATUS_STYLE = {"regressed": "bold red", "improved": "bold green", "unchanged": "green", "inconclusive": "yellow"}
CALL_STYLE = {"faster": "bold green", "slower": "bold red", "equivalent": "green", "inconclusive": "yellow"}

CANNOT_CATCH = (
    "Changes smaller than a scenario's margin δ (by design), and any change behind an *inconclusive* status: "
    "that scenario needs more samples or a quieter machine.",
    "Drift or load shared by a whole run: base and PR ran one after the other, not interleaved, so a machine "
    "that changed between them moves every ratio; calibrate δ on the same runner (`logitlab bench calibrate`) "
    "and decide what matters with `logitlab bench run` (counterbalanced ABBA/BAAB).",
    "Code paths and inputs the benchmarks do not exercise, and effects that appear only at other sizes, "
    "thread counts or hardware.",
)


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


def fmt_change(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f}%"


def fmt_ci(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"{low:.3f}–{high:.3f}"


def host_line(host: dict[str, Any]) -> str:
    load = host.get("load_average_1m")
    return (f"CPU: {host.get('cpu', '?')} · cores: {host.get('cores', '?')} · OS: {host.get('os', '?')} · "
            f"Python {host.get('python', '?')} · load avg (1 min): {'n/a' if load is None else load}")


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


# ---------------------------------------------------------------------------
# compare


def _margin_text(s: ScenarioComparison) -> str:
    return f"±{100 * s.margin:.1f}% ({s.margin_source})"


def compare_rows(cmp: FileComparison) -> list[tuple[str, ...]]:
    """Status, scenario, base, PR, change, CI, δ, n — worst first."""
    return [(s.status, s.name, fmt_value(s.base, s.unit), fmt_value(s.candidate, s.unit), fmt_change(s.ratio),
             fmt_ci(s.ci_low, s.ci_high), _margin_text(s), f"{s.base_n}/{s.candidate_n}")
            for s in cmp.worst_first()]


def _headline(cmp: FileComparison) -> str:
    parts = [f"{n} {status}" for status, n in cmp.counts.items() if n]
    return " · ".join(parts)


def _method_lines(cmp: FileComparison) -> list[str]:
    level = f"{100 * cmp.confidence:g}%"
    methods = sorted({s.ci_method for s in cmp.scenarios})
    sources = sorted({s.margin_source for s in cmp.scenarios})
    margin = ("δ per scenario from A/A noise (" + (cmp.noise_path or "calibration") + ")" if sources == ["noise"]
              else "δ " + ", ".join({"noise": "from A/A noise", "option": "set by --margin",
                                     "default": "the 2% default (not calibrated: run `logitlab bench calibrate`)"}[s]
                                    for s in sources))
    return [
        f"Ratio = PR/base of geometric means per scenario; {level} CI by {', '.join(methods)} over the samples; "
        f"{margin}.",
        f"Status from the CI and δ together: regressed/improved only when the whole CI clears δ, with Holm's "
        f"correction across {sum(s.p_change is not None for s in cmp.scenarios)} scenarios (family-wise error "
        f"{100 * (1 - cmp.confidence):g}%); unchanged when the CI lies inside ±δ; else inconclusive.",
    ]


def _geomean_text(cmp: FileComparison) -> str:
    if cmp.geomean_ratio is None:
        return ""
    ci = ("" if cmp.geomean_ci_low is None else
          f" ({100 * cmp.confidence:g}% CI {cmp.geomean_ci_low:.3f}–{cmp.geomean_ci_high:.3f}, sampling noise only)")
    return (f"Geometric mean over {len(cmp.scenarios)} scenarios: PR/base {cmp.geomean_ratio:.3f} "
            f"({fmt_change(cmp.geomean_ratio)}){ci}.")


def _one_side_lines(cmp: FileComparison) -> list[str]:
    out = []
    if cmp.only_base:
        out.append(f"Only in base (not compared): {', '.join(cmp.only_base)}")
    if cmp.only_candidate:
        out.append(f"Only in PR (not compared): {', '.join(cmp.only_candidate)}")
    return out


def format_compare_markdown(cmp: FileComparison, host: dict[str, Any]) -> str:
    """The comparison as a pull-request comment.

    Parameters
    ----------
    cmp : FileComparison
    host : dict
        :func:`logitlab.manifest.host_info` of the machine that ran it.
    """
    out = [f"## logitlab bench compare ({cmp.format}): {_headline(cmp)}", ""]
    out += _md_table(("status", "scenario", "base", "PR", "change", f"{100 * cmp.confidence:g}% CI of ratio", "δ",
                      "samples"),
                     [(f"{STATUS_ICON[r[0]]} {r[0]}", f"`{r[1]}`", *r[2:]) for r in compare_rows(cmp)])
    out += ["", _geomean_text(cmp)]
    for line in _one_side_lines(cmp):
        out += ["", f"**{line.split(':')[0]}:** " + ", ".join(f"`{n}`" for n in line.split(": ", 1)[1].split(", "))]
    summary_only = [s.name for s in cmp.scenarios if s.ci_method == "none"]
    if summary_only:
        stat = cmp.scenarios[[s.name for s in cmp.scenarios].index(summary_only[0])].statistic
        out += ["", f"No CI for {len(summary_only)} scenario(s) ({stat}): their status is inconclusive."]
    out += ["", "**Method.** " + " ".join(_method_lines(cmp)), "", f"**Host.** {host_line(host)}"]
    for label, ctx in (("base file", cmp.base_context), ("PR file", cmp.candidate_context)):
        if ctx:
            out.append(f"· {label}: " + ", ".join(f"{k} {v}" for k, v in ctx.items()))
    out += ["", "**What this cannot catch**", ""] + [f"- {line}" for line in CANNOT_CATCH]
    return "\n".join(out) + "\n"


def compare_renderables(cmp: FileComparison) -> list[RenderableType]:
    same_margin = len({(s.margin, s.margin_source) for s in cmp.scenarios}) == 1
    table = Table(title=escape(f"logitlab bench compare ({cmp.format}): {cmp.base_path} → {cmp.candidate_path}"),
                  box=box.SIMPLE_HEAD, pad_edge=False)
    columns = ["status", "scenario", "base", "PR", "change", f"{100 * cmp.confidence:g}% CI"] + (
        [] if same_margin else ["δ"])
    for name in columns:
        table.add_column(name, justify="left" if name in ("status", "scenario") else "right",
                         no_wrap=name != "scenario", overflow="fold" if name == "scenario" else "ellipsis",
                         min_width=20 if name == "scenario" else None)
    for row in compare_rows(cmp):
        table.add_row(Text(row[0], style=STATUS_STYLE[row[0]]), escape(row[1]), *row[2:6],
                      *([] if same_margin else [row[6]]))
    out: list[RenderableType] = [table, Text(_geomean_text(cmp))]
    if same_margin:
        out.append(Text(f"δ {_margin_text(cmp.scenarios[0])} for every scenario"))
    out += [Text(line, style="yellow") for line in _one_side_lines(cmp)]
    out += [Text(line, style="dim") for line in _method_lines(cmp)]
    return out


def display_compare(cmp: FileComparison, console: Console) -> None:
    for item in compare_renderables(cmp):
        console.print(item)


# ---------------------------------------------------------------------------
# calibrate


def calibration_renderables(profile: NoiseProfile) -> list[RenderableType]:
    table = Table(title=f"A/A noise from {len(profile.runs)} {profile.format} runs")
    for name in ("scenario", "A/A ratio(s)", "run-to-run sd", "within-run sd", "δ"):
        table.add_column(name, justify="left" if name == "scenario" else "right", no_wrap=name != "scenario",
                         overflow="fold")
    for s in profile.scenarios.values():
        table.add_row(escape(s.name), ", ".join(f"{r:.3f}" for r in s.aa_ratios), f"{100 * s.between_sd_log:.2f}%",
                      "n/a" if s.within_sd_log is None else f"{100 * s.within_sd_log:.2f}%", f"±{100 * s.margin:.1f}%")
    out: list[RenderableType] = [table]
    if profile.skipped:
        out.append(Text(f"not in every run (not calibrated): {', '.join(profile.skipped)}", style="yellow"))
    if len(profile.runs) == 2:
        out.append(Text("2 runs: each δ rests on one A/A ratio; 3-5 runs give steadier margins.", style="dim"))
    return out


def display_calibration(profile: NoiseProfile, console: Console) -> None:
    for item in calibration_renderables(profile):
        console.print(item)


# ---------------------------------------------------------------------------
# run


def run_rows(result: BenchRunResult) -> list[tuple[str, ...]]:
    """Per compared metric: control, candidate, ratio, CI, call, δ, MDE, slot-position effect."""
    rows = []
    for metric, p in result.comparisons.items():
        means = result.summaries.get(metric, {})
        pos = p.position
        pos_text = "n/a" if pos is None or pos.ratio is None else (
            f"{pos.ratio:.3f} (p {_p_text(pos.p_value, '.2g')}{', significant' if pos.significant else ''})")
        rows.append((metric, fmt_value(means.get("control"), p.unit), fmt_value(means.get("candidate"), p.unit),
                     "n/a" if p.ratio is None else f"{p.ratio:.3f}", fmt_ci(p.ci_low, p.ci_high), p.call,
                     f"{100 * p.margin:.1f}% ({p.margin_source})", "n/a" if p.mde is None else f"{100 * p.mde:.1f}%",
                     pos_text))
    return rows


def _p_text(p_value: float | None, spec: str) -> str:
    """A p-value, or n/a (one block gives no spread, so no test)."""
    return "n/a" if p_value is None else format(p_value, spec)


def no_block_line(result: BenchRunResult, *, detail: bool = False) -> str | None:
    """``no complete block: …`` when nothing could be compared (None otherwise); ``detail``: name the
    first failure (the command line leaves that to its ``error:`` line)."""
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


_RUN_HEADER = ("metric", "control", "candidate", "ratio", "95% CI", "call", "δ", "MDE", "slot-position effect")


def _run_facts(result: BenchRunResult) -> list[str]:
    cfg = result.config
    n_valid = result.primary.n_blocks if result.primary else 0
    size = f"up to {plural(cfg['blocks'], 'ABBA/BAAB block')} (--blocks auto)" if cfg.get("auto") else \
        plural(cfg['blocks'], 'ABBA/BAAB block')
    facts = [f"{size} ({'random' if cfg['randomize'] else 'alternating'} order), "
             f"{cfg['warmup']} untimed warmup(s) per variant; {n_valid} block(s) compared"]
    if getattr(result, "stop_note", None):
        facts.append(result.stop_note)
    if result.failed_blocks:
        failed = [r for r in result.runs if not r.ok and r.block in result.failed_blocks]
        facts.append(f"failed blocks (left out, never timed as a success): {result.failed_blocks} — "
                     + "; ".join(f"block {r.block} slot {r.position} {r.variant}: {r.error}" for r in failed[:5]))
    for metric, why in result.skipped_metrics.items():
        facts.append(f"{metric} not compared: {why}")
    return facts


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
                 + ", ".join(f"{v * 100:.0f}% of pairs at ±{k}" for k, v in aa.single_run_fpr.items())
                 + f" ({aa.n_pairs} pairs)")
    return lines


def format_run_markdown(result: BenchRunResult) -> str:
    """``bench run`` as Markdown (a PR comment)."""
    cfg = result.config
    p = result.primary
    head = f"## logitlab bench run: **{p.call if p else 'no result'}**" + (f" ({p.metric})" if p else "")
    out = [head, "", f"- control: `{cfg['control']}`", f"- candidate: `{cfg['candidate']}`"]
    empty = no_block_line(result, detail=True)
    if empty:
        out += ["", empty]
    else:
        out += [f"- {fact}" for fact in _run_facts(result)]
        out += [""] + _md_table(_RUN_HEADER, run_rows(result))
    if p:
        out += ["", p.reason]
    if result.aa:
        out += [""] + [f"- {line}" for line in _aa_lines(result)]
    out += ["", "**Method.** Per block, log(candidate/control) over its ABBA/BAAB slots, so linear drift and a "
            "fixed slot bias cancel; geometric-mean ratio over blocks with a paired-t 95% CI (bootstrap as a "
            "cross-check); call against δ (faster/slower/equivalent, else inconclusive), δ from the control's A/A "
            "slots unless given.", "", f"**Host.** {host_line(result.host)}"]
    if result.error:
        out += ["", f"**Stopped early:** {result.error}"]
    return "\n".join(out) + "\n"


def run_renderables(result: BenchRunResult, *, show_error: bool = True) -> list[RenderableType]:
    """The terminal report; ``show_error=False`` leaves out the "stopped early" line (the caller prints it)."""
    cfg = result.config
    heading = Text(f"control:   {cfg['control']}\ncandidate: {cfg['candidate']}")
    empty = no_block_line(result)
    if empty:
        out: list[RenderableType] = [heading, Text(empty, style="yellow")]
        if result.error and show_error:
            out.append(Text(f"stopped early: {result.error}", style="bold red"))
        return out
    table = Table(title="logitlab bench run", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("metric", "control", "candidate", "ratio (95% CI)", "call", "δ", "MDE", "slot pos."):
        table.add_column(name, justify="left" if name in ("metric", "call") else "right", no_wrap=True)
    for row, p in zip(run_rows(result), result.comparisons.values()):
        pos = p.position
        position = "n/a" if pos is None or pos.ratio is None else (
            f"{pos.ratio:.3f} p={_p_text(pos.p_value, '.2f')}{'*' if pos.significant else ''}")
        table.add_row(*row[:3], f"{row[3]} ({row[4]})", Text(row[5], style=CALL_STYLE.get(row[5], "")),
                      row[6].split(" ")[0], row[7], position)
    out = [heading, table]
    sources = sorted({p.margin_source for p in result.comparisons.values()})
    notes = [f"δ from {', '.join(sources)}" + (" (the control's A/A slots)" if sources == ["a/a"] else "")]
    if any(p.position is not None and p.position.significant for p in result.comparisons.values()):
        notes.append("* slot-position effect significant (second slot of a pair vs first)")
    out += [Text("; ".join(notes), style="dim")]
    out += [Text(fact, style="yellow" if "fail" in fact or "not compared" in fact else "dim")
            for fact in _run_facts(result)]
    if result.primary:
        out.append(Text(result.primary.reason))
    out += [Text(line, style="bold") for line in _aa_lines(result)]
    if result.error and show_error:
        out.append(Text(f"stopped early: {result.error}", style="bold red"))
    return out


def display_run(result: BenchRunResult, console: Console, *, show_error: bool = True) -> None:
    for item in run_renderables(result, show_error=show_error):
        console.print(item)
