"""A result's metrics for the history: the :class:`Metric` type, its senses, and the steps every kind shares.

A result kind that can be recorded in the history
(:mod:`logitlab.experiments.history`) defines ``history_metrics()`` on its
result class, returning variant -> metric name -> :class:`Metric`
(:data:`Metrics`); the helpers here build the usual ones: a speed metric
from per-block values, a candidate/control ratio from a paired comparison,
a comparison's KLD and bit-exact share, the ``crashed`` fingerprint.

This module lives in ``perf/`` (not beside the history store) so that the
result classes of ``perf/`` (``bench run``, ``bench compare``) can build
their own metrics; it imports nothing heavy. Nothing here prints or logs.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from logitlab.errors import InputError, check_choice

__all__ = [
    "HIGHER",
    "LOWER",
    "FINGERPRINT",
    "SERIES_KINDS",
    "Metric",
    "Metrics",
    "geomean",
    "speed_metric",
    "ratio_metric",
    "digest",
    "put_metric",
    "put_crash",
    "put_comparison",
]

HIGHER, LOWER, FINGERPRINT = "higher-is-better", "lower-is-better", "fingerprint"
#: Kinds of series: the metric's sense, or a hash per build.
SERIES_KINDS = (HIGHER, LOWER, FINGERPRINT)


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric of one variant in one record.

    Attributes
    ----------
    kind : {'higher-is-better', 'lower-is-better', 'fingerprint'}
    value : float or str
        The run's summary (e.g. geometric-mean tokens/s over blocks); a
        non-empty string (hash) for a fingerprint.
    unit : str
        E.g. ``'tokens/s'``, ``'s'``, ``'nats'``; ``''`` for fingerprints.
    samples : tuple of float
        Raw per-block samples behind ``value`` (empty if none).
    """

    kind: str
    value: float | str
    unit: str = ""
    samples: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        check_choice("metric kind", self.kind, SERIES_KINDS)
        if self.kind == "fingerprint":
            if not isinstance(self.value, str) or not self.value:
                raise InputError(f"a fingerprint metric's value is a non-empty string, not {self.value!r}")
        else:
            object.__setattr__(self, "value", _finite(self.value, "metric value"))
        if not isinstance(self.unit, str):
            raise InputError(f"metric unit {self.unit!r} is not a string")
        if isinstance(self.samples, (str, bytes)) or not isinstance(self.samples, (Sequence, tuple)):
            raise InputError(f"metric samples {self.samples!r} is not a sequence of numbers")
        object.__setattr__(self, "samples", tuple(_finite(s, "metric sample") for s in self.samples))


#: variant -> metric name -> :class:`Metric`: what ``history_metrics()`` returns.
Metrics = dict[str, dict[str, Metric]]


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{what} {value!r} is not a number")
    x = float(value)
    if not math.isfinite(x):
        raise InputError(f"{what} {value!r} is not finite")
    return x


def geomean(values: Iterable[float]) -> float | None:
    """The geometric mean of the finite, positive ``values``; None when there is none."""
    vals = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return float(math.exp(sum(math.log(v) for v in vals) / len(vals))) if vals else None


def speed_metric(name_values: Mapping[int, list[float]], unit: str, kind: str) -> Metric | None:
    """A speed metric from ``block -> slot values``: the geometric mean of all, samples per block
    (each block's geometric mean); None when no value is finite and positive."""
    samples = [g for g in (geomean(v) for _, v in sorted(name_values.items())) if g is not None]
    value = geomean(v for values in name_values.values() for v in values)
    if value is None:
        return None
    return Metric(kind, value, unit, tuple(samples))


def ratio_metric(comparison: Any) -> Metric | None:
    """The candidate/control ratio of a :class:`~logitlab.perf.paired.PairedComparison` (unit ``ratio``,
    samples: each block's ratio); None without a comparison or a ratio."""
    if comparison is None or comparison.ratio is None:
        return None
    kind = HIGHER if comparison.higher_is_better else LOWER
    return Metric(kind, float(comparison.ratio), "ratio",
                  tuple(float(math.exp(x)) for x in comparison.block_log_ratios))


def digest(data: Any) -> str:
    """The SHA-256 (hex) of ``data`` as sorted-key JSON: a fingerprint's value."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def put_metric(metrics: Metrics, variant: str, name: str, metric: Metric | None) -> None:
    """Add ``metric`` to ``metrics`` under ``variant``/``name``, unless it is None."""
    if metric is not None:
        metrics.setdefault(variant, {})[name] = metric


def put_crash(metrics: Metrics, variant: str, crash: Mapping[str, Any] | None) -> None:
    """The ``crashed`` fingerprint of a variant whose engine crashed (``crash``: its evidence as a dict,
    or None: nothing added), its value naming the phase and the status."""
    if crash:
        put_metric(metrics, variant, "crashed", Metric(FINGERPRINT, f"{crash.get('phase')}: {crash.get('status')}"))


def put_comparison(metrics: Metrics, variant: str, comparison: Any) -> None:
    """A logits comparison's ``kld_mean``, ``kld_p99`` (nats, lower is better) and ``bit_exact_share`` (% of
    positions bit-identical, higher is better) under ``variant`` (those it has the numbers for)."""
    for name, key in (("kld_mean", "mean"), ("kld_p99", "p99")):
        if comparison.kld.get(key) is not None:
            put_metric(metrics, variant, name, Metric(LOWER, float(comparison.kld[key]), "nats"))
    if comparison.n_positions:
        put_metric(metrics, variant, "bit_exact_share",
                   Metric(HIGHER, 100.0 * (1.0 - comparison.differing_rows / comparison.n_positions), "%"))
