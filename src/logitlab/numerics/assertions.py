"""Assertions on logit arrays, for tests: equal, close, a verdict, and a check that can fail.

The one home of "assert something about two logit arrays" (the pytest plugin
and ``logitlab.numerics`` re-export these):

- :func:`assert_logits_equal` — bit-exact, every entry;
- :func:`assert_logits_close` — within tolerances: ULPs at the row's scale
  (the ``--max-ulp`` of every logitlab command), KLD;
- :func:`assert_verdict` — the verdict (:func:`~logitlab.numerics.verdict.classify`) is an allowed one;
- :func:`assert_logits_equivalent` — element-wise ULPs, in the style of
  ``numpy.testing.assert_array_max_ulp`` (returns the ULP array);
- :func:`assert_probe_sensitive` — the inverse control: a check passes on
  identical inputs and fails on a perturbed one, so it is not a check that
  cannot fail.

The first three return the :class:`~logitlab.numerics.compare.LogitComparison`
(:func:`assert_verdict`: a :class:`VerdictComparison`, which also carries the
verdict and, with ``detection=True``, the detection limits) and raise
``AssertionError`` whose text is (numpy/torch ``assert_close`` style)::

    near-tie: first divergence at position 3, token 17: reference 0x1.8p+1 (0x40400000), observed ...
    Mismatched elements: 12 / 4096 (0.293 %) in 2 / 8 positions
    Greatest absolute difference: 0.25 at index (3, 17) (reference 3, observed 3.25)
    Greatest ULP difference: 1048576 at index (3, 17) element-wise; 8192 at the row's scale (position 3)
    Top-1 agreement: 7 / 8 positions; KLD (nats) mean 0.0001, p99 0.002, max 0.002
    Verdict evidence: ...
    Detection limit (logits): argmax-up 1.85, ...    (assert_verdict(..., detection=True) only)
    Smallest tolerance that would have passed: ...

``__tracebackhide__`` keeps pytest's tracebacks on the caller's line.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from logitlab.errors import InputError
from logitlab.numerics.compare import LogitComparison, compare_logits
from logitlab.numerics.detection import DetectionLimits, detection_limits
from logitlab.numerics.ulp import check_pair, float_bits, float_hex, ulp_distance
from logitlab.numerics.verdict import VERDICTS, Thresholds, Verdict, classify, severity

__all__ = [
    "assert_logits_equal",
    "assert_logits_close",
    "assert_verdict",
    "assert_logits_equivalent",
    "assert_probe_sensitive",
    "perturb_ulps",
    "failure_message",
    "VerdictComparison",
]


def _g(x: float | None) -> str:
    return "n/a" if x is None or isinstance(x, float) and math.isnan(x) else f"{x:.6g}"


def _worst_index(values: list, fallback: int = 0) -> int:
    finite = [(v if v is not None and not (isinstance(v, float) and math.isnan(v)) else -math.inf) for v in values]
    return int(np.argmax(finite)) if finite else fallback


@dataclass(frozen=True, kw_only=True)
class VerdictComparison(LogitComparison):
    """What :func:`assert_verdict` returns: the comparison (every field of
    :class:`~logitlab.numerics.compare.LogitComparison`), the verdict it was judged by, and its detection limits.

    Attributes
    ----------
    verdict : Verdict
        :func:`~logitlab.numerics.verdict.classify` of the comparison.
    detection : DetectionLimits or None
        With ``detection=True``: per fault shape, the smallest planted fault
        that reads ``divergent`` wherever it lands
        (:func:`~logitlab.numerics.detection.detection_limits`), e.g.
        ``c.detection.shape("argmax-up").limit`` (logits). None otherwise.
    """

    verdict: Verdict
    detection: DetectionLimits | None = None


def failure_message(c: LogitComparison, verdict: Verdict, reference: Any, observed: Any,
                    tolerance: str, detection: DetectionLimits | None = None) -> str:
    """The text of an assertion failure (see the module docstring).

    Parameters
    ----------
    c : LogitComparison
        A comparison that is not bit-exact.
    verdict : Verdict
        Its verdict.
    reference, observed : ndarray, shape (n_positions, n_vocab)
        The compared arrays (to locate the greatest |Δ| and ULP entries).
    tolerance : str
        The last line's content: the smallest tolerance that would have passed.
    detection : DetectionLimits, optional
        Adds a line with each fault shape's detection limit (:meth:`DetectionLimits.summary
        <logitlab.numerics.detection.DetectionLimits.summary>`).
    """
    ref, obs = np.asarray(reference), np.asarray(observed)
    first = c.first_mismatch
    lines = []
    if first is not None:
        lines.append(f"{verdict.word}: first divergence at position {first['position']}, token {first['token_id']}: "
                     f"reference {first['reference_hex']} ({first['reference_bits']}), observed "
                     f"{first['observed_hex']} ({first['observed_bits']}), {first['ulp']} ULP")
    else:
        lines.append(f"{verdict.word}: no entry differs")
    total = c.n_positions * c.n_vocab
    lines.append(f"Mismatched elements: {c.differing_entries} / {total} ({100 * c.differing_entries / total:.3g} %) "
                 f"in {c.differing_rows} / {c.n_positions} positions")
    r = _worst_index(c.row_max_abs_diff)
    with np.errstate(invalid="ignore", over="ignore"):
        delta = np.abs(obs[r].astype(np.float64) - ref[r].astype(np.float64))
    col = int(np.nanargmax(delta)) if np.isfinite(delta).any() else int(np.argmax(ref[r] != obs[r]))
    lines.append(f"Greatest absolute difference: {_g(c.max_abs_diff)} at index ({r}, {col}) "
                 f"(reference {_g(float(ref[r, col]))}, observed {_g(float(obs[r, col]))})")
    u = _worst_index(c.row_max_ulp)
    ucol = int(np.argmax(ulp_distance(ref[u], obs[u])))
    s = _worst_index(c.row_scaled_ulp)
    lines.append(f"Greatest ULP difference: {c.max_ulp} at index ({u}, {ucol}) element-wise; "
                 f"{_g(c.max_scaled_ulp)} at the row's scale (position {s})")
    agree = round(c.argmax_agreement * c.n_positions)
    lines.append(f"Top-1 agreement: {agree} / {c.n_positions} positions; KLD (nats) mean {_g(c.kld.get('mean'))}, "
                 f"p99 {_g(c.kld.get('p99'))}, max {_g(c.kld.get('max'))}")
    if c.nonfinite_mismatch:
        lines.append(f"NaN/Inf: {c.nonfinite_mismatch} entries finite on one side only "
                     f"(reference NaN {c.nan_ref}, Inf {c.inf_ref}; observed NaN {c.nan_obs}, Inf {c.inf_obs})")
    lines.append("Verdict evidence: " + "; ".join(verdict.evidence))
    if detection is not None:
        lines.append(f"Detection limit (logits; the smallest planted fault that reads divergent wherever it lands): "
                     f"{detection.summary()}")
    lines.append(f"Smallest tolerance that would have passed: {tolerance}")
    return "\n".join(lines)


def _compare(reference: Any, observed: Any, top_k: int, token_ids: Any) -> LogitComparison:
    ref, obs = check_pair(reference, observed)
    if ref.ndim == 1:  # one position
        ref, obs = ref.reshape(1, -1), obs.reshape(1, -1)
    return compare_logits(ref, obs, top_k=top_k, token_ids=token_ids)


def _needed_ulp(c: LogitComparison) -> str:
    if c.nonfinite_mismatch:
        return "none (NaN/Inf on one side only)"
    return f"max_ulp={math.ceil(c.max_scaled_ulp):d}"


def assert_logits_equal(reference: Any, observed: Any, *, top_k: int = 5, token_ids: Any = None,
                        thresholds: Thresholds = Thresholds()) -> LogitComparison:
    """Assert that two logit arrays are bit-exact (every entry has identical bits).

    Parameters
    ----------
    reference, observed : ndarray, shape (n_positions, n_vocab) or (n_vocab,)
        Same shape and dtype (``float32``, ``float16`` or ``bfloat16``).
    top_k : int
        k of the top-k statistics in the comparison. Default 5.
    token_ids : sequence of int, optional
        Token fed at each position (kept in the comparison).
    thresholds : Thresholds
        For the verdict the failure message names.

    Returns
    -------
    LogitComparison
        :func:`~logitlab.numerics.compare.compare_logits` of the two (a 1-D pair as one position).

    Raises
    ------
    AssertionError
        Some entry differs; the message (module docstring) ends with the
        verdict and the ULP tolerance that would have passed.
    InputError
        Shapes or dtypes differ, or an unsupported dtype.
    """
    __tracebackhide__ = True  # noqa: F841
    c = _compare(reference, observed, top_k, token_ids)
    if not c.bit_exact:
        verdict = classify(c, thresholds)
        raise AssertionError(failure_message(
            c, verdict, *_rows(reference, observed),
            f"allowed={{'{verdict.word}'}} (assert_verdict); {_needed_ulp(c)} (assert_logits_close, ULPs at the "
            f"row's scale); element-wise max_ulp={c.max_ulp} (assert_logits_equivalent)"))
    return c


def assert_logits_close(reference: Any, observed: Any, *, max_ulp: float | None = None,
                        kld_p99: float | None = None, kld_mean: float | None = None, top_k: int = 5,
                        token_ids: Any = None, thresholds: Thresholds = Thresholds()) -> LogitComparison:
    """Assert that two logit arrays are within the given tolerances.

    Parameters
    ----------
    reference, observed : ndarray, shape (n_positions, n_vocab) or (n_vocab,)
        Same shape and dtype.
    max_ulp : float, optional
        Largest |Δ| of a row in ULPs of that row's largest |reference| value
        (``max_scaled_ulp``, the unit of ``--max-ulp``; element-wise ULPs
        explode for logits near zero — for those use :func:`assert_logits_equivalent`).
    kld_p99, kld_mean : float, optional
        Limits (nats) on the 99th percentile and the mean of the per-position KL(P_ref || P_obs).
    top_k, token_ids, thresholds
        As for :func:`assert_logits_equal`.

    Returns
    -------
    LogitComparison
        As for :func:`assert_logits_equal`.

    Raises
    ------
    AssertionError
        A tolerance is exceeded, or an entry is NaN/Inf on one side only;
        the last line gives the smallest value of each tolerance that would have passed.
    InputError
        No tolerance given, a negative tolerance, or shapes/dtypes differ.
    """
    __tracebackhide__ = True  # noqa: F841
    given = {"max_ulp": max_ulp, "kld_p99": kld_p99, "kld_mean": kld_mean}
    if all(v is None for v in given.values()):
        raise InputError("assert_logits_close needs a tolerance: max_ulp=, kld_p99= or kld_mean= "
                         "(assert_logits_equal for bit-exact)")
    for name, value in given.items():
        if value is not None and not value >= 0:
            raise InputError(f"{name} must be >= 0, got {value!r}")
    c = _compare(reference, observed, top_k, token_ids)
    if c.bit_exact:
        return c
    failed, needed = [], []
    if max_ulp is not None:
        needed.append(_needed_ulp(c))
        if c.nonfinite_mismatch or c.max_scaled_ulp > max_ulp:
            failed.append("max_ulp")
    for name, key, limit in (("kld_p99", "p99", kld_p99), ("kld_mean", "mean", kld_mean)):
        if limit is None:
            continue
        value = c.kld.get(key)
        needed.append(f"{name}={_g(value)}" if value is not None else f"{name}=none (undefined KLD)")
        if value is None or c.nonfinite_mismatch or value > limit:
            failed.append(name)
    if failed:
        raise AssertionError(failure_message(c, classify(c, thresholds), *_rows(reference, observed),
                                             ", ".join(needed)))
    return c


def _allowed_words(allowed: str | Iterable[str]) -> set[str]:
    if isinstance(allowed, str):
        return set(VERDICTS[:severity(allowed) + 1])
    words = set(allowed)
    if not words:
        raise InputError("allowed needs at least one verdict word")
    for word in words:
        severity(word)  # raises InputError naming the valid words
    return words


def assert_verdict(reference: Any, observed: Any, allowed: str | Iterable[str] = "bit-exact", *,
                   thresholds: Thresholds = Thresholds(), top_k: int = 5, token_ids: Any = None,
                   detection: bool = False) -> VerdictComparison:
    """Assert that the verdict of two logit arrays is an allowed one.

    Parameters
    ----------
    reference, observed : ndarray, shape (n_positions, n_vocab) or (n_vocab,)
        Same shape and dtype.
    allowed : str or set of str
        A set lists every acceptable word (``{"bit-exact", "ulp-noise"}``);
        a single word means that word or anything less severe
        (``"near-tie"`` accepts bit-exact, ulp-noise and near-tie). Default ``"bit-exact"``.
    thresholds : Thresholds
        Verdict thresholds (``max_ulp``, ``near_tie_margin``, ``offset_ratio``).
    top_k, token_ids
        As for :func:`assert_logits_equal`.
    detection : bool
        Also measure the detection limits (:mod:`logitlab.numerics.detection`:
        standard faults planted into a copy of ``observed``): on the returned
        object, and a line of the failure message. Off by default: it costs
        about 80 comparisons of the arrays (for 121 × 49,152 float32 logits on
        2 cores: 3 s, 5-8 s when the machine is busy).

    Returns
    -------
    VerdictComparison
        The comparison, with ``verdict`` and (``detection=True``) ``detection``.

    Raises
    ------
    AssertionError
        The verdict is not allowed; the last line names the set that would have passed.
    InputError
        An unknown verdict word, or shapes/dtypes differ.
    """
    __tracebackhide__ = True  # noqa: F841
    words = _allowed_words(allowed)
    c = _compare(reference, observed, top_k, token_ids)
    verdict = classify(c, thresholds)
    limits = detection_limits(*_rows(reference, observed), c, thresholds=thresholds) if detection else None
    if verdict.word not in words:
        ordered = ", ".join(repr(w) for w in VERDICTS if w in words)
        raise AssertionError(failure_message(
            c, verdict, *_rows(reference, observed),
            f"allowed={{'{verdict.word}'}} (this run's verdict; allowed was {{{ordered}}})", limits))
    return VerdictComparison(**{f.name: getattr(c, f.name) for f in dataclasses.fields(c)}, verdict=verdict,
                             detection=limits)


def _rows(reference: Any, observed: Any) -> tuple[np.ndarray, np.ndarray]:
    ref, obs = np.asarray(reference), np.asarray(observed)
    return (ref.reshape(1, -1), obs.reshape(1, -1)) if ref.ndim == 1 else (ref, obs)


def assert_logits_equivalent(reference: Any, observed: Any, max_ulp: int = 0) -> np.ndarray:
    """Assert that two logit arrays are within ``max_ulp`` ULPs element-wise.

    In the style of ``numpy.testing.assert_array_max_ulp``.

    Parameters
    ----------
    reference, observed : ndarray
        Same shape and dtype (``float32``, ``float16`` or ``bfloat16``).
    max_ulp : int, optional
        Largest allowed ULP distance.  Default 0: equal values (``+0 == -0``
        and NaN == NaN; use :func:`assert_logits_equal` for bits).

    Returns
    -------
    ndarray of int64
        The element-wise ULP distances (:func:`~logitlab.numerics.ulp.ulp_distance`).

    Raises
    ------
    AssertionError
        If some distance exceeds ``max_ulp``; the message states the
        tolerance, the worst distance and where it is, with both values.
    InputError
        If shapes or dtypes differ.
    """
    __tracebackhide__ = True  # noqa: F841  (pytest hides this frame)
    dist = ulp_distance(reference, observed)
    if dist.size == 0:
        return dist
    worst = int(dist.max())
    if worst > max_ulp:
        ref = np.asarray(reference)
        obs = np.asarray(observed)
        at = np.unravel_index(int(dist.argmax()), dist.shape)
        n_bad = int(np.count_nonzero(dist > max_ulp))
        where = f"position {at[0]}, token {at[1]}" if len(at) == 2 else f"index {tuple(int(i) for i in at)}"
        raise AssertionError(
            f"Logits not equivalent to {max_ulp} ULP (max is {worst} ULP at {where}: "
            f"reference {float_hex(ref[at])} ({float_bits(ref[at])}), "
            f"observed {float_hex(obs[at])} ({float_bits(obs[at])})); "
            f"{n_bad} of {dist.size} entries exceed the tolerance"
        )
    return dist


def perturb_ulps(logits: Any, ulps: int = 1, position: int = -1, token: int | None = None) -> np.ndarray:
    """A copy of ``logits`` with one entry moved by ``ulps`` ULPs (its bit pattern plus ``ulps``).

    Parameters
    ----------
    logits : ndarray, shape (n_positions, n_vocab), float32/float16/bfloat16
    ulps : int
        ULPs to move (>= 1); the magnitude grows, so the sign stays.
    position : int
        Row to perturb. Default the last.
    token : int, optional
        Column to perturb. Default the row's argmax (where a change matters most).

    Raises
    ------
    InputError
        ``ulps < 1``, an unsupported dtype, or an index out of range.
    """
    x = np.array(logits, copy=True)
    if x.ndim != 2:
        raise InputError(f"logits must have shape (n_positions, n_vocab), got {x.shape}")
    if ulps < 1:
        raise InputError(f"ulps must be >= 1, got {ulps}")
    width = {4: np.uint32, 2: np.uint16}.get(x.dtype.itemsize)
    if width is None or x.dtype.kind not in "fV":
        raise InputError(f"cannot perturb dtype {x.dtype}")
    row = x[position]
    col = int(np.argmax(row)) if token is None else int(token)
    bits = x.view(width)
    bits[position, col] = bits[position, col] + width(ulps)
    return x


def assert_probe_sensitive(check: Callable[[Any, Any], Any], reference: Any, perturbed: Any = None, *,
                           ulps: int = 1) -> AssertionError:
    """Inverse control: prove that ``check`` passes on identical inputs and fails on a perturbed one.

    A test whose check cannot fail asserts nothing. Call this once next to
    such a check, with a perturbation the check must catch: by default the
    reference with one entry moved by ``ulps`` ULPs (:func:`perturb_ulps`),
    or ``perturbed``: e.g. the logits of a variant known to differ
    (``flash_attn=1``).

    Parameters
    ----------
    check : callable (reference, observed) -> Any
        The check, raising AssertionError when it fails (e.g.
        ``lambda r, o: assert_verdict(r, o, "ulp-noise")``).
    reference : ndarray, shape (n_positions, n_vocab)
    perturbed : ndarray, optional
        Observed logits the check must reject. Default :func:`perturb_ulps`\\ (reference, ulps).
    ulps : int
        Size of the default perturbation.

    Returns
    -------
    AssertionError
        What the check raised on the perturbed input.

    Raises
    ------
    AssertionError
        The check failed on an identical copy of the reference (it rejects
        everything), or it passed on the perturbed input (it cannot catch that change).
    """
    __tracebackhide__ = True  # noqa: F841
    name = getattr(check, "__name__", "check")
    try:
        check(reference, np.array(reference, copy=True))
    except AssertionError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise AssertionError(f"probe not usable: {name} fails on an identical copy of the reference ({first}); "
                             "a check that rejects everything proves nothing") from None
    if perturbed is None:
        perturbed = perturb_ulps(reference, ulps)
        what = f"the reference with one entry moved by {ulps} ULP"
    else:
        what = "the perturbed input"
    try:
        check(reference, perturbed)
    except AssertionError as exc:
        return exc
    raise AssertionError(f"probe not sensitive: {name} passed on {what}; it cannot catch that change")
