"""The bar a comparison must clear: an allowed verdict, KLD limits, a same-top-1 rate.

A golden check (and the pytest assertions) pass or fail a comparison against
a :class:`Bar`: the verdict may be no worse than ``allow``; where given, the
mean and the 99th percentile of the per-position KL divergence may not exceed
their limits; and where given, the rate of positions whose top-1 token agrees
must be at least ``min_top1`` *with confidence*: its Wilson score lower bound
(Wilson 1927, "Probable inference, the law of succession, and statistical
inference", JASA 22:209-212; ``scipy.stats.binomtest(...).proportion_ci(method="wilson")``)
must reach it, so a rate measured on a handful of positions cannot pass a
high bar by luck. (The golden-logits issue cites vLLM's accuracy gate for the
idea; vLLM's own code was not consulted here.)

Nothing here prints or knows about engines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from logitlab.errors import InputError
from logitlab.numerics.comparison import Comparison
from logitlab.numerics.verdict import VERDICTS, severity

__all__ = ["Bar", "GateCheck", "GateResult", "wilson_interval", "judge"]


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial rate (two-sided), via scipy.

    Parameters
    ----------
    successes, trials : int
        ``0 <= successes <= trials``, ``trials >= 1``.
    confidence : float
        Two-sided confidence level in (0, 1). Default 0.95.

    Returns
    -------
    (low, high) : tuple of float
        With ``n`` trials all successes, ``low = n / (n + z²)`` (z = 1.96 at
        95 %): 100 positions that all agree bound the rate below at 0.963.

    Raises
    ------
    InputError
        Counts or confidence out of range.
    """
    from scipy.stats import binomtest

    if trials < 1 or not 0 <= successes <= trials:
        raise InputError(f"a rate needs 0 <= successes <= trials and trials >= 1, got {successes}/{trials}")
    if not 0 < confidence < 1:
        raise InputError(f"confidence must be in (0, 1), got {confidence}")
    ci = binomtest(int(successes), int(trials)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Bar:
    """What a comparison must clear.

    Attributes
    ----------
    allow : str
        The worst verdict accepted (one of :data:`~logitlab.numerics.verdict.VERDICTS`). Default ``bit-exact``.
    max_kld_mean, max_kld_p99 : float or None
        Limits (nats) on the mean and the 99th percentile of the per-position KL(P_ref || P_obs); None: no limit.
    min_top1 : float or None
        Required rate of positions whose argmax agrees, judged by its Wilson lower bound at ``confidence``.
    confidence : float
        Two-sided confidence of the Wilson interval. Default 0.95.
    """

    allow: str = "bit-exact"
    max_kld_mean: float | None = None
    max_kld_p99: float | None = None
    min_top1: float | None = None
    confidence: float = 0.95

    def __post_init__(self) -> None:
        severity(self.allow)  # raises InputError naming the valid words
        for name in ("max_kld_mean", "max_kld_p99"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value >= 0):
                raise InputError(f"{name} must be a number >= 0, got {value!r}")
        if self.min_top1 is not None and not 0 <= self.min_top1 <= 1:
            raise InputError(f"min_top1 must be a rate in [0, 1], got {self.min_top1!r}")
        if not 0 < self.confidence < 1:
            raise InputError(f"confidence must be in (0, 1), got {self.confidence!r}")

    @property
    def limits(self) -> bool:
        """Whether any limit besides the verdict is set."""
        return any(v is not None for v in (self.max_kld_mean, self.max_kld_p99, self.min_top1))

    def describe(self, verdict: bool = True) -> str:
        """One line: ``verdict ≤ near-tie, mean KLD ≤ 0.01`` (``verdict=False``: the limits only)."""
        parts = [f"verdict ≤ {self.allow}"] if verdict else []
        if self.max_kld_mean is not None:
            parts.append(f"mean KLD ≤ {self.max_kld_mean:g} nats")
        if self.max_kld_p99 is not None:
            parts.append(f"p99 KLD ≤ {self.max_kld_p99:g} nats")
        if self.min_top1 is not None:
            parts.append(f"same top-1 ≥ {self.min_top1:g} (Wilson {100 * self.confidence:g} % lower bound)")
        return ", ".join(parts) or "no limits"


@dataclass(frozen=True)
class GateCheck:
    """One condition of the bar: its name, the measured value, the limit, and whether it held."""

    name: str
    value: float | str | None
    limit: float | str
    passed: bool
    line: str


@dataclass(frozen=True)
class GateResult:
    """Every condition of a :class:`Bar` against the measured comparisons; ``passed`` iff all held."""

    passed: bool
    checks: list[GateCheck] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failures(self) -> list[str]:
        return [c.line for c in self.checks if not c.passed]


def _kld_values(parts: Sequence[Comparison]) -> np.ndarray:
    return np.asarray([x for p in parts for x in p.row_kld if x is not None], dtype=np.float64)


def _top1_counts(parts: Sequence[Comparison]) -> tuple[int, int]:
    agree = trials = 0
    for p in parts:
        for ref, obs in zip(p.row_argmax_ref, p.row_argmax_obs):
            if ref is None or obs is None:  # a top-k position that was not compared
                continue
            trials += 1
            agree += int(ref == obs)
    return agree, trials


def judge(parts: Sequence[Comparison], verdict: str, bar: Bar) -> GateResult:
    """Check comparisons (e.g. one per prompt) and their overall verdict against ``bar``.

    Parameters
    ----------
    parts : sequence of Comparison
        Full-vocabulary or top-k comparisons; KLD and top-1 statistics are
        pooled over all their positions (a top-k comparison's KLD is a lower
        bound, see :mod:`logitlab.numerics.topk`).
    verdict : str
        The overall verdict word (e.g. the worst of the parts').
    bar : Bar

    Returns
    -------
    GateResult
        One :class:`GateCheck` per condition the bar sets, in the order
        verdict, mean KLD, p99 KLD, top-1 rate.

    Raises
    ------
    InputError
        An unknown verdict word, or no parts.
    """
    if not parts:
        raise InputError("judge needs at least one comparison")
    checks = [GateCheck("verdict", verdict, bar.allow, severity(verdict) <= severity(bar.allow),
                        f"verdict {verdict} {'≤' if severity(verdict) <= severity(bar.allow) else '>'} "
                        f"allowed {bar.allow}")]
    kld = _kld_values(parts)
    agree, trials = _top1_counts(parts)
    checks += limit_checks(float(kld.mean()) if kld.size else None,
                           float(np.percentile(kld, 99)) if kld.size else None, agree, trials, bar)
    return GateResult(all(c.passed for c in checks), checks)


def limit_checks(kld_mean: float | None, kld_p99: float | None, agree: int, trials: int, bar: Bar) -> list[GateCheck]:
    """The checks of ``bar``'s KLD limits and top-1 rate, from the measured values.

    Args:
        kld_mean, kld_p99: mean and 99th percentile of the per-position KLD (nats); None when undefined.
        agree, trials: positions whose top-1 token agrees, and positions compared.
        bar: the limits (its ``allow`` is not used here).

    Returns:
        One :class:`GateCheck` per limit the bar sets (mean KLD, p99 KLD, top-1 rate), in that order.
    """
    checks = []
    for name, value, limit in (("kld_mean", kld_mean, bar.max_kld_mean), ("kld_p99", kld_p99, bar.max_kld_p99)):
        if limit is None:
            continue
        ok = value is not None and value <= limit
        shown = "n/a (no finite KLD)" if value is None else f"{value:.4g}"
        label = "mean KLD" if name == "kld_mean" else "p99 KLD"
        checks.append(GateCheck(name, value, limit, ok, f"{label} {shown} nats {'≤' if ok else '>'} limit {limit:g}"))
    if bar.min_top1 is not None:
        low = wilson_interval(agree, trials, bar.confidence)[0] if trials else None
        ok = low is not None and low >= bar.min_top1
        rate = f"{agree}/{trials}" + (f" = {agree / trials:.4f}" if trials else "")
        bound = "n/a" if low is None else f"{low:.4f}"
        checks.append(GateCheck("top1", low, bar.min_top1, ok,
                                f"same top-1 {rate}, Wilson {100 * bar.confidence:g} % lower bound {bound} "
                                f"{'≥' if ok else '<'} required {bar.min_top1:g}"))
    return checks


def worst_verdict(words: Sequence[str]) -> str:
    """The most severe of verdict words (``bit-exact`` for none)."""
    return max(words, key=severity) if words else VERDICTS[0]


def positions_for_rate(rate: float, confidence: float = 0.95) -> int:
    """Fewest positions that, all agreeing, give a Wilson lower bound of at least ``rate`` (for messages).

    ``n / (n + z²) >= rate``  ⇔  ``n >= z² rate / (1 - rate)``; inf-free for rate < 1.
    """
    from scipy.stats import norm

    if not 0 <= rate < 1:
        raise InputError(f"rate must be in [0, 1), got {rate}")
    z = norm.ppf(0.5 + confidence / 2)
    return int(math.ceil(z * z * rate / (1 - rate)))


__all__ += ["worst_verdict", "positions_for_rate", "limit_checks"]
