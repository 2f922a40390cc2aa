"""Golden reports: a recorded/updated golden, a golden check, and a check against a llama.cpp KLD file.

- :func:`golden_document` — a :class:`~logitlab.dumps.golden_format.GoldenManifest`
  (``golden record`` / ``golden update``): where it is, its provenance, its
  prompts, and the last update's verdict against the previous golden;
- :func:`golden_check_document` — a :class:`~logitlab.experiments.golden.GoldenCheckResult`:
  which golden matched and why, what changed in the provenance, the bar,
  the verdict per prompt with evidence, and pass/fail;
- :func:`golden_kld_document` — a :class:`~logitlab.experiments.golden.kld.KldCheckResult`:
  llama.cpp's own statistics, named as ``llama-perplexity`` prints them.
"""

from __future__ import annotations

from typing import Any

from logitlab.dumps.sizes import format_bytes
from logitlab.dumps.golden_format import GoldenManifest, Provenance
from logitlab.engines.crash import CrashEvidence
from logitlab.experiments.golden.results import GoldenCheckResult
from logitlab.experiments.golden.kld import KldCheckResult
from logitlab.report.detection_text import DETECTION_TITLE, HEADLINE_HEADER, detection_lines, headline_cell
from logitlab.report.document import Bullets, Document, Heading, KeyValues, Paragraph, Span, Table, rich
from logitlab.report.text import FLIP_HEADER, comparison_lines, flip_rows, fmt_num, model_text, plural, variant_text

__all__ = ["golden_document", "golden_check_document", "golden_kld_document", "PROMPT_HEADER"]

PROMPT_HEADER = ("prompt", "positions", "verdict", "rows differing", "max |Δ|", "max ULP (row scale)",
                 "top-1 agreement", "KLD mean / max (nats)", HEADLINE_HEADER)
MAX_FLIPS = 10


def _options(values: dict[str, Any], empty: str = "(defaults)") -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items()) or empty


def _provenance_rows(p: Provenance) -> list[tuple[str, str]]:
    d = p.device
    device = f"{d.key} ({d.name}, {d.arch}" + (f", compute capability {d.capability}, driver {d.driver}"
                                               if d.capability else f", {len(d.flags)} kernel ISA flags") + ")"
    rows = [("device key", device), ("engine", f"{p.engine}: {p.engine_version}")]
    rows += [(f"build {k}", str(v)) for k, v in p.build.items()]
    rows += [("options", _options(p.options)), ("knobs", _options(p.env, "(none)"))]
    if p.ambient_env:
        rows.append(("ambient knobs", _options(p.ambient_env)))
    rows += [("model", model_text(p.model, p.model_sha256)),
             ("tokenizer / prompts", f"sha256 {p.tokenizer_sha256[:12]}… / {p.prompts_sha256[:12]}…, "
                                     f"vocabulary {p.n_vocab}"),
             ("software", f"logitlab {p.logitlab_version}, Python {p.python}, {p.os}; "
                          + ", ".join(f"{k} {v}" for k, v in p.libraries.items()))]
    return rows


def golden_document(manifest: GoldenManifest, **_: Any) -> Document:
    """The report of ``golden record`` / ``golden update``: the golden and, after an update, its last entry."""
    updated = bool(manifest.history)
    doc = Document("golden", "logitlab golden")
    title = "logitlab golden: updated" if updated else "logitlab golden: recorded"
    doc.add(Heading(title))
    rows: list[tuple] = [("folder", manifest.folder or "(the folder this manifest.json lies in)"),
                         ("recorded", manifest.created_at),
                         ("store", f"{manifest.store}, {manifest.dtype}, {format_bytes(manifest.logits_bytes)} "
                                   f"(sha256 {manifest.logits_sha256[:12]}…)"),
                         ("workload", f"{plural(len(manifest.prompts), 'prompt')}, {manifest.n_positions} positions "
                                      f"(prompt + {manifest.n_decode} greedy decode tokens each)"),
                         *([("positions", f"stores {manifest.n_stored} of {manifest.n_positions} positions "
                                          f"({manifest.positions}): a check compares those")]
                           if manifest.positions is not None else [])]
    doc.add(KeyValues(rows + _provenance_rows(manifest.provenance), boxed=True))
    doc.add(Table(("prompt", "prompt tokens", "decode tokens", "greedy text"),
                  [(p.name, len(p.prompt_ids), len(p.generated_ids), repr(p.greedy_text[:60]))
                   for p in manifest.prompts], title="prompts"))
    if updated:
        entry = manifest.history[-1]
        word = entry.verdict.word
        doc.add(Paragraph(rich(Span("update: ", "strong"), Span(word, f"verdict:{word}"),
                               f" vs the previous golden (worst prompt: {entry.worst_prompt}) — reason: {entry.reason}")),
                Bullets(entry.verdict.evidence, tight=True))
        s = entry.summary
        doc.add(KeyValues([
            ("logits sha256", f"{entry.old_logits_sha256[:12]}… → {entry.new_logits_sha256[:12]}…"),
            ("differing positions", f"{s.get('differing_positions')} of {s.get('positions')}"),
            ("max |Δ|", fmt_num(s.get("max_abs_diff"))),
            ("KLD mean / max (nats)", f"{fmt_num(s.get('kld_mean'))} / {fmt_num(s.get('kld_max'))}"),
            ("greedy text changed", ", ".join(entry.greedy_changed) or "no prompt"),
        ], tight=True))
        doc.add(Paragraph("what changed in the provenance:", tight=False),
                Bullets(entry.changes or ["nothing recorded changed"], tight=True))
        doc.add(Table(("at", "reason", "verdict vs previous", "logits sha256"),
                      [(h.at, h.reason, h.verdict.word, f"{h.old_logits_sha256[:8]}… → {h.new_logits_sha256[:8]}…")
                       for h in manifest.history], title="history"))
    return doc


def _prompt_rows(result: GoldenCheckResult) -> list[tuple[str, ...]]:
    rows = []
    for p in result.prompts:
        c = p.comparison
        if c is None:  # the engine crashed on this prompt
            rows.append((p.name, str(p.n_positions), p.verdict.word) + ("—",) * (len(PROMPT_HEADER) - 3))
            continue
        agree = "n/a" if c.argmax_agreement is None else f"{100 * c.argmax_agreement:.2f} %"
        rows.append((p.name, str(p.n_positions), p.verdict.word, f"{c.differing_rows}/{c.n_positions}",
                     fmt_num(c.max_abs_diff), fmt_num(c.max_scaled_ulp), agree,
                     f"{fmt_num(c.kld.get('mean'))} / {fmt_num(c.kld.get('max'))}", headline_cell(p.detection)))
    return rows


def golden_check_document(result: GoldenCheckResult, **_: Any) -> Document:
    """The report of ``golden check``."""
    word = result.verdict.word
    outcome = "PASS" if result.passed else "FAIL"
    doc = Document("golden-check", "logitlab golden check")
    doc.add(Heading(rich("logitlab golden check: ", Span(outcome, "strong"), " (", Span(word, f"verdict:{word}"),
                         ")")))
    p = result.provenance
    doc.add(KeyValues([
        ("golden", result.match.folder),
        ("matched", result.match.reason, None if result.match.exact else "note"),
        ("this device", f"{result.device.key} ({result.device.name})"),
        ("goldens there", ", ".join(result.match.available)),
        ("recorded", f"{result.golden_created_at}, store {result.store}"),
        *([("positions", result.positions.line())] if result.positions else []),
        ("variant", variant_text(result.variant)),
        ("engine", p.engine_version),
    ], boxed=True))
    changes = [c.line + ("" if c.gate else " (does not move the bar)") for c in result.changes]
    doc.add(Paragraph(rich(Span("what changed in the provenance: ", "strong"),
                           plural(len(result.changes), "field") if changes else "nothing")))
    if changes:
        doc.add(Bullets(changes, tight=True))
    doc.add(Paragraph(rich(Span("bar: ", "strong"), result.bar_reason)))
    doc.add(Table(PROMPT_HEADER, _prompt_rows(result), title="replayed prompts (golden = reference)",
                  align=("left",) + ("right",) * (len(PROMPT_HEADER) - 1)))
    worst = next(c for c in result.prompts if c.name == result.verdict_prompt)
    doc.add(Paragraph(rich(Span("verdict: ", "strong"), Span(word, f"verdict:{word}"),
                           f"  (worst of {plural(len(result.prompts), 'prompt')}: {worst.name}"
                           + (f"; {result.positions.line()})" if result.positions else ")"))),
            Bullets(result.verdict.evidence, tight=True))
    if worst.comparison is None:
        doc.add(Paragraph(f"the engine crashed on prompt {worst.name!r}: the prompts after it were not run",
                          tone="error"))
    elif not worst.comparison.bit_exact:
        doc.add(KeyValues(comparison_lines(worst.comparison), tight=True, header=("statistic", "value")))
    if worst.detection is not None and detection_lines(worst.detection):
        doc.add(Paragraph(f"{worst.name}: {DETECTION_TITLE}", tone="dim", tight=True),
                Bullets(detection_lines(worst.detection), tight=True))
    if worst.comparison is not None and not worst.comparison.bit_exact:
        flips = flip_rows(worst.comparison)
        if flips:
            more = f" (first {MAX_FLIPS} of {len(flips)})" if len(flips) > MAX_FLIPS else ""
            doc.add(Table(FLIP_HEADER, flips[:MAX_FLIPS], title=f"argmax flips in {worst.name}{more}", tight=True))
    doc.add(Paragraph(rich(Span(f"{outcome}: ", "strong"), result.bar.describe()),
                      tone="ok" if result.passed else "error"),
            Bullets([("✓ " if c.passed else "✗ ") + c.line for c in result.gate.checks], tight=True))
    return doc


def _pm(value: float, unc: float, digits: int = 6) -> str:
    return f"{value:.{digits}f} ± {unc:.{digits}f}"


def golden_kld_document(result: KldCheckResult, **_: Any) -> Document:
    """The report of ``golden check --llamacpp-kld``: llama.cpp's statistics, as llama-perplexity names them."""
    s = result.stats
    doc = Document("golden-kld", "logitlab golden check --llamacpp-kld")
    head = "logitlab golden check --llamacpp-kld"
    doc.add(Heading(rich(head + ": ", Span("PASS" if result.passed else "FAIL", "strong"))
                    if result.gate.checks else head))
    engine = result.engine
    doc.add(KeyValues([
        ("base file", f"{result.file} ({result.n_chunk} chunks × {result.n_ctx} tokens, vocabulary {result.n_vocab})"),
        ("scored", ("no position" if s is None else f"{s.count} positions") + " (n_ctx/2 … n_ctx-2 of each chunk)"
                   + ("; each chunk's first token replaced by BOS" if result.bos_replaced else "")),
        ("engine", str(engine.get("engine_version", engine.get("engine")))),
        ("variant", variant_text(result.variant)),
        ("model", model_text(engine.get("model"), engine.get("model_sha256"))),
    ], boxed=True))
    if result.settings:
        doc.add(Paragraph("Settings that decide whether these figures can match llama-perplexity's own:"),
                Bullets(result.settings, tight=True))
    if result.crash is not None:
        evidence = CrashEvidence.from_dict(result.crash)
        doc.add(Paragraph(rich(Span("crashed", "strong"), ": ", evidence.summary()
                               + (f"; the figures below are of the {len(result.chunks)} chunk(s) run before it"
                                  if result.chunks else "; no chunk was run")), tone="error"),
                Bullets(evidence.lines(), tight=True))
    if s is not None:
        _kld_statistics(doc, s)
    if result.chunks:
        doc.add(Table(("chunk", "positions", "mean KLD (nats)", "same top", "PPL(Q) / PPL(base)"),
                      [(str(c.chunk + 1), str(c.count), f"{c.kld_mean:.6f}", f"{c.same_top}/{c.count}",
                        f"{_exp_mean(c.nll_sum, c.count):.4f} / {_exp_mean(c.nll_base_sum, c.count):.4f}")
                       for c in result.chunks], title="per chunk", align=("right",) * 5))
    if result.gate.checks:
        doc.add(Paragraph(rich(Span("PASS" if result.passed else "FAIL", "strong"), ": ", result.bar.describe(verdict=False)),
                          tone="ok" if result.passed else "error"),
                Bullets([("✓ " if c.passed else "✗ ") + c.line for c in result.gate.checks], tight=True))
    return doc


def _kld_statistics(doc: Document, s: Any) -> None:
    """llama-perplexity's three blocks of statistics, under its own names."""
    doc.add(KeyValues([
        ("Mean PPL(Q)", _pm(s.ppl_q, s.ppl_q_unc)),
        ("Mean PPL(base)", _pm(s.ppl_base, s.ppl_base_unc)),
        ("Cor(ln(PPL(Q)), ln(PPL(base)))", "n/a" if s.cor is None else f"{100 * s.cor:.2f}%"),
        ("Mean ln(PPL(Q)/PPL(base))", _pm(s.ln_ratio, s.ln_ratio_unc)),
        ("Mean PPL(Q)/PPL(base)", _pm(s.ratio, s.ratio_unc)),
        ("Mean PPL(Q)-PPL(base)", _pm(s.diff, s.diff_unc)),
    ], title="Perplexity statistics", header=("statistic", "value")))
    names = {"max": "Maximum KLD", "p99_9": "99.9% KLD", "p99": "99.0% KLD", "p95": "95.0% KLD",
             "p90": "90.0% KLD", "median": "Median KLD", "p10": "10.0% KLD", "p5": "5.0% KLD", "p1": "1.0% KLD",
             "p0_1": "0.1% KLD", "min": "Minimum KLD"}
    doc.add(KeyValues([("Mean KLD", _pm(s.kld_mean, s.kld_unc))]
                      + [(names[k], f"{v:.6f}") for k, v in s.kld.items()],
                      title="KL divergence statistics (nats)", header=("statistic", "value")))
    doc.add(KeyValues([
        ("Mean Δp", f"{100 * s.dp_mean:.3f} ± {100 * s.dp_unc:.3f} %"),
        ("Maximum / median / minimum Δp", f"{100 * s.dp['max']:.3f}% / {100 * s.dp['median']:.3f}% / "
                                          f"{100 * s.dp['min']:.3f}%"),
        ("RMS Δp", f"{100 * s.rms_dp:.3f} ± {100 * s.rms_dp_unc:.3f} %"),
        ("Same top p", f"{100 * s.same_top:.3f} ± {100 * s.same_top_unc:.3f} %"),
    ], title="Token probability statistics", header=("statistic", "value")))


def _exp_mean(total: float, count: int) -> float:
    import math

    return math.exp(total / count) if count else float("nan")
