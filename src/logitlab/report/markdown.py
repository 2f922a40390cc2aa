"""Markdown report of an ``ab`` result, for a pull-request comment."""

from __future__ import annotations

from typing import Sequence

from logitlab.experiments.ab import AbResult
from logitlab.experiments.schedule import CANDIDATE, CONTROL
from logitlab.report.text import (
    SPEED_HEADER,
    aa_signature_rows,
    comparison_lines,
    flip_rows,
    localization_lines,
    plural,
    speed_rows,
)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def format_ab_markdown(result: AbResult) -> str:
    """The whole report as Markdown text."""
    cfg, engine, host = result.config, result.manifest["engine"], result.manifest["host"]
    verdict = result.verdict.word if result.verdict else "n/a"
    out = [f"## logitlab ab: **{verdict}**", ""]
    out += [
        f"- model: `{engine['model'].rsplit('/', 1)[-1]}` (sha256 `{engine.get('model_sha256', '?')[:12]}`), "
        f"{engine.get('engine_version', engine['engine'])}",
        f"- control: `{_opts(cfg['control'])}` · candidate: `{_opts(cfg['candidate'])}`",
        f"- workload: {len(result.prompt_ids)} prompt tokens + {cfg['n_decode']} greedy decode tokens (replayed); "
        f"{plural(cfg['repeats'], 'ABBA/BAAB block')}, isolation `{cfg['isolation']}`",
        f"- host: {host['cpu']}, {host['cores']} cores, {host['os']}, Python {host['python']}",
        *[f"- candidate engine: {c.get('engine_version', c['engine'])}"
          for c in [result.manifest.get("candidate_engine")] if c],
        *[f"- **note:** {note}" for note in getattr(result, "notes", [])],
        "",
    ]
    controls = [r for r in result.measured(CONTROL) if not r.is_reference]
    if not controls:
        out.append("**A/A:** not measured (no control run besides the reference finished).")
    elif result.control_reproducible:
        out.append(f"**A/A:** control reproducible ({len(controls)}/{plural(len(controls), 'control run')} "
                   "bit-exact).")
    else:
        out.append(f"**A/A: control not reproducible** — {result.aa_diagnosis}.")
        out.append("")
        out += _table(("slot", "block", "pos", "rows differing", "max D/V per row", "max ULP", "argmax kept",
                       "top-k kept"), aa_signature_rows(controls))
    out.append("")
    if result.verdict is not None:
        run = next(r for r in result.runs if r.slot == result.verdict_slot)
        runs = plural(len(result.measured(CANDIDATE)), "candidate run")
        out.append(f"**A/B verdict: `{verdict}`** (worst of {runs})")
        out.append("")
        out += [f"- {line}" for line in result.verdict.evidence]
        out.append("")
        out += _table(("statistic", "value"), comparison_lines(run.comparison))
        flips = flip_rows(run.comparison)
        if flips:
            out.append("")
            out += _table(("pos", "ref token (logit)", "cand token (logit)", "ref margin", "cand margin",
                           "ref top-5", "cand top-5"), flips[:20])
    out.append("")
    if result.speed:
        out += _table(SPEED_HEADER, speed_rows(result))
        out.append("")
        out.append("Ratio = candidate/control tokens/s, geometric mean over ABBA/BAAB blocks, paired-t 95 % CI; "
                   "call against the equivalence margin δ.")
    if result.localization:
        out += ["", "**Where it starts (dump-diff):**", ""]
        out += [f"- {line}" for line in localization_lines(result.localization)]
    if result.error:
        out += ["", f"**Stopped early:** {result.error}"]
    return "\n".join(out) + "\n"


def _opts(variant: dict) -> str:
    parts = [f"{k}={v}" for k, v in variant["options"].items()] + [f"{k}={v}" for k, v in variant["env"].items()]
    return variant["engine"] + (" " + ",".join(parts) if parts else "")
