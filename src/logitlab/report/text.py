"""Plain-text pieces shared by the report builders: numbers, variants, comparisons, flips.

Every function returns strings or rows of strings; none prints.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from logitlab.numerics.comparison import Comparison


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """``1 layer``, ``2 layers``, ``0 layers``; ``plural_noun`` for irregular plurals (``1 entry``, ``3 entries``)."""
    return f"{count} {noun if count == 1 else plural_noun or noun + 's'}"


def model_text(model: str | None, sha256: str | None) -> str:
    """A model as its file (or folder) name and the start of its SHA-256: ``x.gguf (sha256 b179c9523d0e…)``.

    The name and the hash say which model it was on any machine; the full path, which says where this machine
    installed it, stays in the manifest (``--json``).
    """
    name = Path(model).name if model else "embedded default"
    return f"{name} (sha256 {str(sha256 or '?')[:12]}…)"


def engine_rows(engine: dict[str, Any]) -> list[tuple[str, str]]:
    """``model`` and ``engine`` header rows from a manifest's ``engine`` entry."""
    return [("model", model_text(engine.get("model"), engine.get("model_sha256"))),
            ("engine", engine.get("engine_version", engine["engine"]))]


def host_rows(manifest: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The ``host`` header row (CPU, cores, OS, Python) of a run manifest; none when it names no host."""
    host = manifest.get("host") if manifest else None
    if not host:
        return []
    return [("host", f"{host['cpu']}, {host['cores']} cores, {host['os']}, Python {host['python']}")]


def run_header_rows(manifest: dict[str, Any] | None, rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A run report's header rows: the manifest's :func:`engine_rows` (none without an engine), ``rows``, then
    its :func:`host_rows`."""
    engine = manifest.get("engine") if manifest else None
    return [*(engine_rows(engine) if engine else []), *rows, *host_rows(manifest)]


def fmt_num(value: float | None, digits: int = 4) -> str:
    """``value`` with ``digits`` significant digits; ``n/a`` for None and NaN (both read back as null)."""
    if value is None or isinstance(value, float) and math.isnan(value):
        return "n/a"
    return f"{value:.{digits}g}"


def variant_text(variant: dict[str, Any], *, env_prefix: str = "env ", joiner: str = ", ",
                 empty: str = ": defaults", sep: str = ": ") -> str:
    """A variant as ``engine: key=value, env NAME=value`` (``engine: defaults`` without options)."""
    parts = [f"{k}={v}" for k, v in variant["options"].items()] + \
        [f"{env_prefix}{k}={v}" for k, v in variant["env"].items()]
    return variant["engine"] + (sep + joiner.join(parts) if parts else empty)


def _pct1(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f} %"


def comparison_lines(c: Comparison) -> list[tuple[str, str]]:
    """Key statistics of a comparison as (label, value) pairs.

    For top-k-only data (``scope == "top-k"``, the openai engine) the labels say
    "returned top-k" and mark the statistics that are lower bounds with ≥.
    """
    topk_only = c.scope == "top-k"
    width = f"returned top-{c.n_vocab}" if topk_only else f"{c.n_vocab} vocab"
    bound = "≥ " if topk_only else ""
    n_entries = c.n_positions * c.n_vocab
    lines = [
        ("differing entries", f"{c.differing_entries:,} of {n_entries:,} "
                              f"({plural(c.n_positions, 'position')} × {width})"),
        ("rows differing", f"{c.differing_rows} of {c.n_positions}"),
    ]
    first = c.first_mismatch
    if first:
        lines.append(("first mismatch",
                      f"position {first['position']}, token id {first['token_id']}: reference "
                      f"{first['reference_hex']} ({first['reference_bits']}) observed "
                      f"{first['observed_hex']} ({first['observed_bits']}), {first['ulp']} ULP"))
    lines += [
        ("max |Δ| / mean |Δ|", f"{bound}{fmt_num(c.max_abs_diff)} / {fmt_num(c.mean_abs_diff)}"),
        ("mean Δ (signed) / sd Δ", f"{fmt_num(c.mean_diff)} / {fmt_num(c.std_diff)}"),
        ("ULP histogram", "  ".join(f"{k}: {v:,}" for k, v in c.ulp_histogram.items())),
        ("max ULP distance", f"{bound}{c.max_ulp:,} element-wise, {bound}{fmt_num(c.max_scaled_ulp)} "
                             "at the row's scale"),
        ("top-1 agreement", _pct(c.argmax_agreement)),
        (f"top-{c.top_k} set agreement", _pct(c.topk_agreement)),
        ("KLD (nats)" + (", lower bound" if topk_only else ""), "mean {mean}  p99 {p99}  max {max}".format(
            **{k: fmt_num(c.kld.get(k)) for k in ("mean", "p99", "max")})),
    ]
    bad = {k: getattr(c, k) for k in ("nan_ref", "nan_obs", "inf_ref", "inf_obs")}
    if any(bad.values()):
        lines.append(("NaN / Inf", ", ".join(f"{k} {v}" for k, v in bad.items())))
    return lines


def aa_signature_rows(controls: Sequence[Any]) -> list[tuple[str, ...]]:
    """One row per non-reference control run: the seed report's slot-order signature."""
    rows = []
    for run in controls:
        c = run.comparison
        worst_row = max(c.row_differing) if c.row_differing else 0
        rows.append((
            str(run.slot), str(run.block), str(run.position),
            f"{c.differing_rows}/{c.n_positions}",
            f"{worst_row}/{c.n_vocab}",
            f"{c.max_ulp:,}",
            "yes" if c.argmax_agreement == 1.0 else "NO",
            "yes" if c.topk_agreement == 1.0 else "NO",
        ))
    return rows


FLIP_HEADER = ("pos", "ref token (logit)", "cand token (logit)", "ref margin", "cand margin", "ref top-5",
               "cand top-5")


def flip_rows(c: Comparison) -> list[tuple[str, ...]]:
    """One row per argmax flip; columns as :data:`FLIP_HEADER`."""
    return [(
        str(f["position"]),
        f"{f['token_ref']} ({f['logit_ref_top']:.4f})",
        f"{f['token_obs']} ({f['logit_obs_top']:.4f})",
        f"{f['margin_ref']:.4f}",
        f"{f['margin_obs']:.4f}",
        " ".join(map(str, f["topk_ref"])),
        " ".join(map(str, f["topk_obs"])),
    ) for f in c.flips]


def _ci(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"{low:.3f}–{high:.3f}"


SPEED_HEADER = ("phase", "control", "candidate", "ratio (95% CI)", "bootstrap CI", "call", "δ", "MDE",
                "slot position")


def _geomeans(blocks: Sequence[Any]) -> tuple[str, str]:
    """Geometric means of the control (A) and candidate (B) slots of the blocks a ratio was computed from.

    With every block complete, candidate/control of these two is exactly the
    geometric-mean ratio of the paired comparison (the mean over blocks of
    ``mean(log B) - mean(log A)``), so the columns and the ratio agree.
    """
    logs = {"A": [], "B": []}
    for block in blocks:
        for letter, value in zip(block.pattern, block.values):
            logs[letter].append(math.log(value))
    return tuple(f"{math.exp(sum(v) / len(v)):.1f}" if v else "n/a" for v in (logs["A"], logs["B"]))  # type: ignore


def speed_rows(result: Any, blocks: dict[str, Sequence[Any]]) -> list[tuple[str, ...]]:
    """One row per phase (decode, prefill) of the paired speed decision; columns as SPEED_HEADER.

    ``blocks``: per phase, the :class:`~logitlab.perf.design.Block` s the ratio was computed from;
    the control and candidate columns are their geometric means (see :func:`_geomeans`).
    """
    rows = []
    for phase, p in result.speed.items():
        position = p.position
        pos_text = "n/a"
        if position is not None and position.ratio is not None:
            pos_text = f"{position.ratio:.3f} p={fmt_num(position.p_value, 2)}" + (" (!)" if position.significant else "")
        rows.append((
            phase,
            *_geomeans(blocks.get(phase, [])),
            "n/a" if p.ratio is None else f"{p.ratio:.3f} ({_ci(p.ci_low, p.ci_high)})",
            _ci(p.bootstrap_ci_low, p.bootstrap_ci_high),
            p.call,
            f"{100 * p.margin:.1f}% {p.margin_source}",
            _pct1(p.mde),
            pos_text,
        ))
    return rows


def localization_lines(loc: dict[str, Any]) -> list[str]:
    """The ``ab --localize`` dump-diff summary as plain lines."""
    lines = [f"localized {loc['pair'][0]} vs {loc['pair'][1]} (slot {loc['slot']}): dumps over the prompt + "
             f"{loc['decode_steps']} decode step(s), up to the first mismatch at position {loc['first_mismatch_position']}",
             f"dump-diff: {loc['verdict']} — {loc['n_compared']} tensor-positions compared, {loc['n_differing']} differ"]
    first = loc.get("first_divergence")
    if first:
        s = first["stats"]
        layer = f"layer {first['layer']}" if first["layer"] is not None else "outside the layers"
        lines.append(f"first divergent tensor: {first['label']} ({layer}, {first['kind']}): {s['differing']}/{s['n']} "
                     f"differ, max |Δ| {fmt_num(s['max_abs_diff'])}, NMSE {fmt_num(s['nmse'])}, "
                     f"cosine {fmt_num(s['cosine'], 9)}; {loc['bit_exact_before_first']} earlier tensor-positions "
                     "bit-exact")
    for group in loc.get("only_left", [])[:3]:
        lines.append(f"only in {loc['pair'][0]}: {group.get('label', group)}")
    lines += [f"problem: {p}" for p in loc.get("problems", [])[:5]]
    return lines


#: ``result.error`` of a run that Ctrl-C stopped (:meth:`logitlab.experiments.base.Experiment.measure`).
INTERRUPTED = "interrupted"


def stopped_line(error: str, *, done: int | None = None, planned: int | str | None = None, unit: str = "run",
                 units: str | None = None, detail: str | None = None, rests_on: str = "the verdicts") -> str:
    """The line a report of a run that stopped early shows (``error``: the result's ``error``).

    For a run Ctrl-C stopped (``error == "interrupted"``): ``"stopped early by the user (Ctrl-C) after 2 of 50
    planned ABBA/BAAB blocks (11 runs measured): the verdict and the speed calls rest on those only"``;
    ``done``/``planned`` the parts finished and planned (``planned`` None: not known; text such as ``"at most
    12"`` is shown as given), ``unit`` their noun (singular; ``units`` an irregular plural), ``detail`` a
    parenthesis after them, ``rests_on``
    what the report concludes. Any other error: ``"stopped early: <error>"``.
    """
    if error != INTERRUPTED:
        return f"stopped early: {error}"
    if done is None:
        return f"stopped early by the user (Ctrl-C): {rests_on} rest on what was measured before it only"
    of = f" of {planned} planned" if planned is not None else ""
    noun = unit if (planned if isinstance(planned, int) else done) == 1 else units or unit + "s"
    more = f" ({detail})" if detail else ""
    return f"stopped early by the user (Ctrl-C) after {done}{of} {noun}{more}: {rests_on} rest on those only"
