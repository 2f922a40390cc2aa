"""Terminal report of an ``ab`` result (rich renderables; ``display_ab`` prints them)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from logitlab.experiments.ab import AbResult
from logitlab.experiments.schedule import CANDIDATE, CONTROL
from logitlab.report.text import (
    VERDICT_STYLE,
    aa_signature_rows,
    comparison_lines,
    engine_rows,
    flip_rows,
    localization_lines,
    plural,
    SPEED_HEADER,
    speed_rows,
)


def format_header(result: AbResult) -> RenderableType:
    cfg, engine = result.config, result.manifest["engine"]
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for row in engine_rows(engine):
        table.add_row(*row)
    if "candidate_engine" in result.manifest:  # cross-engine ab
        candidate = result.manifest["candidate_engine"]
        table.add_row("candidate engine", candidate.get("engine_version", candidate["engine"]))
    table.add_row("control", _variant_text(cfg["control"]))
    table.add_row("candidate", _variant_text(cfg["candidate"]))
    table.add_row("workload", f"{len(result.prompt_ids)} prompt tokens + {cfg['n_decode']} greedy decode tokens, "
                              f"replayed in every run")
    table.add_row("schedule", f"{cfg['warmup']} warmup/variant, {plural(cfg['repeats'], 'ABBA/BAAB block')}, "
                              f"isolation={cfg['isolation']}")
    table.add_row("greedy text", repr(result.generated_text[:120]))
    for note in getattr(result, "notes", []):
        table.add_row(Text("note", style="bold yellow"), Text(note, style="yellow"))
    return Panel(table, title="logitlab ab", expand=False)


def _variant_text(variant: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in variant["options"].items()] + [f"env {k}={v}" for k, v in variant["env"].items()]
    return variant["engine"] + (": " + ", ".join(parts) if parts else ": defaults")


def format_aa(result: AbResult) -> RenderableType:
    controls = [r for r in result.measured(CONTROL) if not r.is_reference]
    exact = sum(1 for r in controls if r.bit_exact)
    if not controls:
        return Text("A/A: not measured (no control run besides the reference finished)", style="yellow")
    if result.control_reproducible:
        line = Text(f"A/A: control reproducible — {exact}/{plural(len(controls), 'control run')} bit-exact with the "
                    "reference", style="green")
        return line
    table = Table(title="A/A: CONTROL NOT REPRODUCIBLE — slot-order signature", title_style="bold red")
    for name in ("slot", "block", "pos", "rows differing", "max D/V per row", "max ULP", "argmax kept", "top-k kept"):
        table.add_column(name, justify="right")
    for row in aa_signature_rows(controls):
        table.add_row(*row)
    lines = [table, Text(f"diagnosis: {result.aa_diagnosis}", style="bold")]
    for e in result.escalations:
        lines.append(Text(f"  escalated to {e.isolation} isolation: {e.bit_exact_runs}/{plural(e.runs, 'run')} "
                          "bit-exact"))
    lines.append(Text("The A/B verdict below compares against a control that does not reproduce itself.",
                      style="yellow"))
    return Group(*lines)


def format_verdict(result: AbResult) -> RenderableType:
    if result.verdict is None:
        return Text("A/B: no candidate run was compared", style="yellow")
    run = next(r for r in result.runs if r.slot == result.verdict_slot)
    word = result.verdict.word
    title = Text.assemble(("A/B verdict: ", "bold"), (word, VERDICT_STYLE.get(word, "bold")),
                          f"  (worst of {plural(len(result.measured(CANDIDATE)), 'candidate run')}; slot {run.slot})")
    evidence = [Text("  • " + line) for line in result.verdict.evidence]
    stats = Table.grid(padding=(0, 2))
    stats.add_column(style="bold")
    stats.add_column()
    for key, value in comparison_lines(run.comparison):
        stats.add_row(key, value)
    parts: list[RenderableType] = [title, *evidence, stats]
    flips = flip_rows(run.comparison)
    if flips:
        table = Table(title="argmax flips")
        for name in ("pos", "ref token (logit)", "cand token (logit)", "ref margin", "cand margin", "ref top-5", "cand top-5"):
            table.add_column(name)
        for row in flips[:10]:
            table.add_row(*row)
        parts.append(table)
    reproducible = result.candidate_reproducible
    if reproducible is False:
        parts.append(Text("candidate runs differ among themselves (candidate not reproducible)", style="yellow"))
    return Group(*parts)


def format_speed(result: AbResult) -> RenderableType:
    if not result.speed:
        return Text("speed: no complete block", style="yellow")
    table = Table(title="speed (tokens/s): candidate / control, geometric mean over ABBA/BAAB blocks",
                  box=box.SIMPLE_HEAD)
    for name in SPEED_HEADER:
        table.add_column(name)
    for row in speed_rows(result):
        table.add_row(*row)
    reasons = [Text(f"{phase}: {p.reason}", style="dim") for phase, p in result.speed.items()]
    return Group(table, *reasons)


def format_ab(result: AbResult, *, show_error: bool = True) -> list[RenderableType]:
    """All sections of the report, in reading order; ``show_error=False`` leaves out the "stopped early" line
    (the caller prints the error)."""
    parts = [format_header(result), format_aa(result), format_verdict(result), format_speed(result)]
    if result.localization:
        parts.append(Panel("\n".join(localization_lines(result.localization)), title="where it starts (dump-diff)",
                           expand=False))
    if result.error and show_error:
        parts.append(Text(f"stopped early: {result.error}", style="bold red"))
    return parts


def display_ab(result: AbResult, console: Console | None = None, *, show_error: bool = True) -> None:
    console = console or Console()
    for part in format_ab(result, show_error=show_error):
        console.print(part)
        console.print()


__all__ = ["display_ab", "format_ab"]
