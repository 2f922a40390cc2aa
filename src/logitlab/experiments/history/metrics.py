"""What a result contributes to the history: its metrics per variant, with their raw per-block samples.

:func:`record_from_result` turns any result that can be recorded (``ab``,
``verify``, ``bench run``, ``bench compare``, ``golden check``; see :data:`EXTRACTORS`) into a
:class:`~logitlab.experiments.history.HistoryRecord` for one engine commit on
one machine. Per result kind (variant / metric, unit, sense):

``ab``
    ``control`` and ``candidate``: ``decode``, ``prefill`` (tokens/s, higher
    is better; value: the geometric mean over the measured slots, samples:
    per block the geometric mean of the variant's two slots) and ``logits``
    (fingerprint: SHA-256 of the logits' bits of its first measured run).
    ``candidate`` also: ``kld_mean``, ``kld_p99`` (nats, lower is better) and
    ``bit_exact_share`` (% of positions whose logits are bit-identical with
    the reference, higher is better) of the verdict's run; ``ratio``:
    ``decode``, ``prefill`` (candidate/control geometric-mean ratio, samples:
    each block's ratio) — the speed relative to a pinned control build.
    An A/A (the same variant on both sides) is one build: only ``control``,
    with every measured slot as a sample and ``bit_exact_share`` the % of
    compared runs that reproduce the reference bit for bit.
``verify``
    ``verify``: ``K=k bit_exact_share`` (% of M=K rows bit-exact with M=1)
    and ``K=k flips`` (argmax flips, lower is better) per K, ``m1 decode`` (tokens/s; samples per prompt) and ``greedy`` (fingerprint
    of every prompt's M=1 greedy token ids).
``bench-run``
    ``control`` and ``candidate``: every compared metric (``wall``, ``user``,
    ``sys``, ``max_rss``, the ``--metric``) in its unit and sense (value: the
    geometric mean, samples: per block the variant's geometric mean);
    ``ratio``: each metric's candidate/control ratio (samples per block). An
    A/A (``--aa``): only ``control``.
``bench-compare``
    ``candidate``: each scenario's summary in its unit and sense (the files
    carry no samples a comparison keeps); ``ratio``: each scenario's
    candidate/base ratio. The base file is another build, so its values are
    not recorded under this commit.

A crash of the engine under test is recorded as such: a fingerprint metric ``crashed`` of the variant that
crashed (``candidate`` for ``ab``, ``verify``, ``golden:NAME``) whose value names the phase and the status
(``decode step 2: killed by SIGSEGV (signal 11)``), so that the commit where an engine starts (or stops)
crashing shows in that series.

Another result kind joins with one entry in :data:`EXTRACTORS`
(``"kind": "module:function"``, the function taking the result and returning
variant -> metric name -> :class:`~logitlab.experiments.history.Metric`).

Nothing here prints or logs.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
from typing import Any, Callable, Iterable, Mapping

from logitlab.errors import InputError
from logitlab.experiments.history.store import HistoryRecord, Metric, new_record
from logitlab.jsonio import to_jsonable

__all__ = [
    "EXTRACTORS",
    "HIGHER",
    "LOWER",
    "FINGERPRINT",
    "result_metrics",
    "result_manifest",
    "record_from_result",
    "is_numerics_metric",
    "ab_metrics",
    "verify_metrics",
    "bench_run_metrics",
    "bench_compare_metrics",
]

HIGHER, LOWER, FINGERPRINT = "higher-is-better", "lower-is-better", "fingerprint"

#: result kind -> ``"module:function"`` giving its metrics (imported when first used).
EXTRACTORS: dict[str, str] = {
    "ab": "logitlab.experiments.history.metrics:ab_metrics",
    "verify": "logitlab.experiments.history.metrics:verify_metrics",
    "bench-run": "logitlab.experiments.history.metrics:bench_run_metrics",
    "bench-compare": "logitlab.experiments.history.metrics:bench_compare_metrics",
    "golden-check": "logitlab.experiments.history.metrics:golden_check_metrics",
}

Metrics = dict[str, dict[str, Metric]]

#: Metric names (of the extractors above) that measure numerics, not speed.
NUMERICS_METRICS = ("logits", "greedy", "kld_mean", "kld_p99", "bit_exact_share")


def is_numerics_metric(name: str) -> bool:
    """True for a metric about the numbers an engine computes (fingerprints, KLD, bit-exact shares, flips),
    False for speed and resources: which ``bisect --probe`` finds its change."""
    return name in NUMERICS_METRICS or name.endswith((" bit_exact_share", " flips"))


# ---------------------------------------------------------------------------
# Helpers


def _geomean(values: Iterable[float]) -> float | None:
    vals = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return float(math.exp(sum(math.log(v) for v in vals) / len(vals))) if vals else None


def _speed(name_values: Mapping[int, list[float]], unit: str, kind: str) -> Metric | None:
    """A speed metric from ``block -> slot values``: geometric mean of all, samples per block."""
    samples = [g for g in (_geomean(v) for _, v in sorted(name_values.items())) if g is not None]
    value = _geomean(v for values in name_values.values() for v in values)
    if value is None:
        return None
    return Metric(kind, value, unit, tuple(samples))


def _ratio(comparison: Any) -> Metric | None:
    """candidate/control ratio of a PairedComparison, samples: each block's ratio."""
    if comparison is None or comparison.ratio is None:
        return None
    kind = HIGHER if comparison.higher_is_better else LOWER
    return Metric(kind, float(comparison.ratio), "ratio",
                  tuple(float(math.exp(x)) for x in comparison.block_log_ratios))


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _put(metrics: Metrics, variant: str, name: str, metric: Metric | None) -> None:
    if metric is not None:
        metrics.setdefault(variant, {})[name] = metric


def _crashed(metrics: Metrics, variant: str, crash: Mapping[str, Any] | None) -> None:
    """The ``crashed`` fingerprint of a variant whose engine crashed (``crash``: its evidence as a dict)."""
    if crash:
        _put(metrics, variant, "crashed", Metric(FINGERPRINT, f"{crash.get('phase')}: {crash.get('status')}"))


def _same_variant(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return {k: v for k, v in a.items() if k != "label"} == {k: v for k, v in b.items() if k != "label"}


# ---------------------------------------------------------------------------
# Per kind


def ab_metrics(result: Any) -> Metrics:
    """Metrics of an :class:`~logitlab.experiments.ab.AbResult` (see the module docstring)."""
    from logitlab.perf.design import CANDIDATE, CONTROL

    aa = _same_variant(result.config["control"], result.config["candidate"])
    out: Metrics = {}
    measured = [r for r in result.runs if r.block is not None]
    sides = {CONTROL: measured} if aa else {v: [r for r in measured if r.variant == v] for v in (CONTROL, CANDIDATE)}
    for variant, runs in sides.items():
        for phase in ("decode", "prefill"):
            per_block: dict[int, list[float]] = {}
            for r in runs:
                per_block.setdefault(r.block, []).append(getattr(r, f"{phase}_tokens_per_second"))
            _put(out, variant, phase, _speed(per_block, "tokens/s", HIGHER))
        if variant in result.fingerprints:
            _put(out, variant, "logits", Metric(FINGERPRINT, result.fingerprints[variant]))
    compared = [r for r in measured if r.comparison is not None]
    if aa:
        if compared:
            share = sum(bool(r.comparison.bit_exact) for r in compared) / len(compared)
            _put(out, CONTROL, "bit_exact_share", Metric(HIGHER, 100.0 * share, "%"))
        return out
    worst = next((r for r in result.runs if r.slot == result.verdict_slot), None)
    _crashed(out, CANDIDATE, worst.crash if worst is not None else None)
    if worst is not None and worst.comparison is not None:
        c = worst.comparison
        for name, key in (("kld_mean", "mean"), ("kld_p99", "p99")):
            if c.kld.get(key) is not None:
                _put(out, CANDIDATE, name, Metric(LOWER, float(c.kld[key]), "nats"))
        if c.n_positions:
            _put(out, CANDIDATE, "bit_exact_share",
                 Metric(HIGHER, 100.0 * (1.0 - c.differing_rows / c.n_positions), "%"))
    for phase, comparison in result.speed.items():
        _put(out, "ratio", phase, _ratio(comparison))
    return out


def golden_check_metrics(result: Any) -> Metrics:
    """Metrics of a :class:`~logitlab.experiments.golden.GoldenCheckResult`: per prompt (variant
    ``golden:NAME``) ``kld_mean``, ``kld_p99`` (nats, lower is better) and ``bit_exact_share`` (% of
    positions bit-identical with the golden, higher is better) — the numerics of each build against one
    recorded reference."""
    out: Metrics = {}
    for prompt in result.prompts:
        c, variant = prompt.comparison, f"golden:{prompt.name}"
        _crashed(out, variant, prompt.crash)
        if c is None:
            continue
        for name, key in (("kld_mean", "mean"), ("kld_p99", "p99")):
            if c.kld.get(key) is not None:
                _put(out, variant, name, Metric(LOWER, float(c.kld[key]), "nats"))
        if c.n_positions:
            _put(out, variant, "bit_exact_share", Metric(HIGHER, 100.0 * (1.0 - c.differing_rows / c.n_positions),
                                                         "%"))
    return out


def verify_metrics(result: Any) -> Metrics:
    """Metrics of a :class:`~logitlab.experiments.verify.results.VerifyResult` (see the module docstring)."""
    out: Metrics = {}
    _crashed(out, "verify", result.crash)
    for total in result.totals:
        if total.rows:
            _put(out, "verify", f"K={total.k} bit_exact_share",
                 Metric(HIGHER, 100.0 * total.bit_exact_rows / total.rows, "%"))
        _put(out, "verify", f"K={total.k} flips", Metric(LOWER, float(total.flips), "flips"))
    tokens = sum(len(p.generated_ids) for p in result.prompts)
    seconds = sum(p.m1_decode_seconds for p in result.prompts)
    if tokens and seconds > 0:
        per_prompt = tuple(len(p.generated_ids) / p.m1_decode_seconds for p in result.prompts
                           if p.m1_decode_seconds > 0)
        _put(out, "verify", "m1 decode", Metric(HIGHER, tokens / seconds, "tokens/s", per_prompt))
    if result.prompts:
        _put(out, "verify", "greedy",
             Metric(FINGERPRINT, _digest([[p.name, p.generated_ids] for p in result.prompts])))
    return out


def bench_run_metrics(result: Any) -> Metrics:
    """Metrics of a :class:`~logitlab.perf.commands.BenchRunResult` (see the module docstring)."""
    from logitlab.perf.design import CANDIDATE, CONTROL

    out: Metrics = {}
    failed = set(result.failed_blocks)
    valid = [r for r in result.runs if r.block is not None and r.ok and r.block not in failed]
    aa = bool(result.config.get("aa"))
    for name, comparison in result.comparisons.items():
        kind = HIGHER if comparison.higher_is_better else LOWER
        for variant in ((CONTROL,) if aa else (CONTROL, CANDIDATE)):
            per_block: dict[int, list[float]] = {}
            for r in valid:
                if aa or r.variant == variant:
                    per_block.setdefault(r.block, []).append(_run_value(r, name))
            _put(out, variant, name, _speed(per_block, comparison.unit, kind))
        if not aa:
            _put(out, "ratio", name, _ratio(comparison))
    return out


def _run_value(run: Any, metric: str) -> float:
    return {"wall": run.wall_s, "user": run.user_s, "sys": run.sys_s,
            "max_rss": float(run.max_rss_bytes)}.get(metric, run.metric)


def bench_compare_metrics(result: Any) -> Metrics:
    """Metrics of a :class:`~logitlab.perf.compare_files.FileComparison` (see the module docstring)."""
    out: Metrics = {}
    for s in result.scenarios:
        kind = HIGHER if s.higher_is_better else LOWER
        if s.candidate > 0 and math.isfinite(s.candidate):
            _put(out, "candidate", s.name, Metric(kind, float(s.candidate), s.unit))
        if math.isfinite(s.ratio):
            _put(out, "ratio", s.name, Metric(kind, float(s.ratio), "ratio"))
    return out


# ---------------------------------------------------------------------------
# The record


def _extractor(kind: str) -> Callable[[Any], Metrics]:
    if kind not in EXTRACTORS:
        raise InputError(f"a {kind or 'non-logitlab'} result cannot be recorded in the history: results of "
                         f"{', '.join(sorted(EXTRACTORS))} can")
    module, _, name = EXTRACTORS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def result_metrics(result: Any) -> Metrics:
    """Variant -> metric name -> Metric of a result (see the module docstring).

    Raises
    ------
    InputError
        If the kind of result cannot be recorded, or it holds no metric
        (e.g. a run that measured nothing).
    """
    kind = getattr(result, "KIND", "")
    metrics = _extractor(kind)(result)
    if not metrics:
        raise InputError(f"this {kind} result holds no metric to record (nothing was measured)")
    return metrics


def result_manifest(result: Any) -> dict[str, Any]:
    """What ran: the result's kind, its manifest (or host), and its configuration, as JSON types."""
    data: dict[str, Any] = {"result_kind": getattr(result, "KIND", "")}
    for name in ("manifest", "config", "host", "base_path", "candidate_path", "format", "base_context",
                 "candidate_context"):
        value = getattr(result, name, None)
        if value is not None and value != {}:
            data[name] = value
    return to_jsonable(data)


def record_from_result(result: Any, *, machine: str, commit: str, commit_date: str | None,
                       recorded_at: str | None = None) -> HistoryRecord:
    """A :class:`~logitlab.experiments.history.HistoryRecord` of ``result`` for one commit on one machine.

    Raises
    ------
    InputError
        If the result cannot be recorded (kind, no metric) or a key is not
        valid (machine, commit, dates).
    """
    return new_record(machine=machine, commit=commit, commit_date=commit_date, manifest=result_manifest(result),
                      metrics=result_metrics(result), recorded_at=recorded_at)
