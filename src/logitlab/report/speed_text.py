"""The sentences that explain a speed decision, written from the result's numbers.

The statistics (:mod:`logitlab.perf`) return numbers and a call; this module
says in words why the call is what it is — for a paired ABBA/BAAB comparison
(:func:`paired_reason`) and for one scenario of ``bench compare``
(:func:`scenario_reason`).
"""

from __future__ import annotations

import math

from logitlab.perf.compare_files import MIN_SAMPLES_FOR_CI, FileComparison, ScenarioComparison
from logitlab.perf.equivalence import three_way_call
from logitlab.perf.paired import PairedComparison, better_orientation
from logitlab.perf.power import blocks_needed
from logitlab.perf.sequential import SequentialDecision, offset_floor, repeated_ci_mde
from logitlab.perf.spending import SPENDING_NAMES
from logitlab.report.text import plural

__all__ = ["paired_reason", "scenario_reason", "sequential_reason", "margin_origin", "stopping_note"]


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _log(x: float | None) -> float | None:
    return None if x is None else math.log(x)


def paired_reason(p: PairedComparison) -> str:
    """One paragraph explaining ``p.call`` with the numbers that decided it.

    Names the ratio and its CI (paired t, df), where the CI lies against 1
    and the equivalence region ``1/(1+δ) … 1+δ`` (and δ's source), the block
    sd and the MDE, the blocks needed to detect δ when inconclusive, whether
    the bootstrap CI gives the same call, and a significant slot-position
    effect.
    """
    n, delta, source = p.n_blocks, p.margin, p.margin_source
    ci_pct = f"{100 * p.confidence:g}%"
    m_label = f"{p.metric} ({p.unit})" if p.metric and p.unit else (p.metric or p.unit or "metric")
    side = "above" if p.higher_is_better else "below"
    margin_text = f"delta {_pct(delta)}, from {source}"
    if n < 2:
        reason = (f"inconclusive: {n} block{'s' if n != 1 else ''} of {m_label}; a paired CI needs at "
                  f"least 2 blocks")
        if p.mean_log_ratio is not None:
            reason += f" (the single block's candidate/control ratio is {math.exp(p.mean_log_ratio):.4g})"
        return reason + "."
    call = p.call
    head = (f"candidate/control geometric-mean {m_label} ratio {p.ratio:.4g}, "
            f"{ci_pct} CI {p.ci_low:.4g}-{p.ci_high:.4g} (paired t over {n} blocks, df {n - 1})")
    region = f"equivalence region {1 / (1 + delta):.4g}-{1 + delta:.4g} ({margin_text})"
    if call == "equivalent":
        body = f"the CI lies inside the {region}"
    elif call == "faster":
        body = f"the whole CI is on the better side of 1 ({side} 1 for this metric) and not inside the {region}"
    elif call == "slower":
        body = (f"the whole CI is on the worse side of 1 ({'below' if p.higher_is_better else 'above'}"
                f" 1 for this metric) and not inside the {region}")
    else:
        body = f"the CI includes 1 and reaches beyond the {region}"
    reason = f"{call}: {head}; {body}."
    if p.sd_log_ratio == 0.0:
        reason += (f" All {n} block log ratios are identical (sd 0), so the CI has zero width: "
                   f"this is only meaningful if the measurements are truly noiseless.")
    else:
        reason += (f" Block log-ratio sd {p.sd_log_ratio:.3g}: {n} blocks detect a {_pct(p.mde)} change "
                   f"(80% power, alpha 0.05)")
        if call == "inconclusive":
            reason += f"; about {blocks_needed(p.sd_log_ratio, delta)} blocks would detect a {_pct(delta)} change"
        reason += "."
    if p.bootstrap_method in ("BCa", "percentile"):
        lo, hi = better_orientation(_log(p.bootstrap_ci_low), _log(p.bootstrap_ci_high), p.higher_is_better)
        b_call = three_way_call(lo, hi, math.log1p(delta))
        agree = "agrees" if b_call == call else f"would call it {b_call}: treat the call with care"
        reason += f" Bootstrap ({p.bootstrap_method}) CI {p.bootstrap_ci_low:.4g}-{p.bootstrap_ci_high:.4g} {agree}."
    position = p.position
    if position is not None and position.significant:
        reason += (f" Slot position effect: the second slot of a pair measures {position.ratio:.4g}x the first "
                   f"(p {position.p_value:.2g}); it cancels only when ABBA and BAAB blocks are balanced "
                   f"({p.n_abba} vs {p.n_baab} here).")
    return reason


def scenario_reason(s: ScenarioComparison, comparison: FileComparison) -> str:
    """One line: which numbers gave scenario ``s`` of ``comparison`` its status."""
    if s.ci_low is None or s.ci_high is None:
        if not (s.base_n and s.candidate_n):
            where = "both sides" if not s.base_n and not s.candidate_n else "one side"
            why = f"only a summary ({s.statistic.split(' (')[0]}) on {where}"
        else:
            why = f"{min(s.base_n, s.candidate_n)} samples on a side (< {MIN_SAMPLES_FOR_CI})"
        return f"inconclusive: no CI can be given ({why}); change {100 * (s.ratio - 1):+.1f}% shown for reference"
    sign = -1.0 if s.higher_is_better else 1.0  # log ratio -> "worse" orientation
    w_lo, w_hi = sorted((sign * math.log(s.ci_low), sign * math.log(s.ci_high)))
    bound = math.log1p(s.margin)
    ci_txt = f"CI {s.ci_low:.3f}-{s.ci_high:.3f}"
    region = f"margin ±{100 * s.margin:.1f}% ({s.margin_source})"
    if s.status in ("regressed", "improved"):
        return f"{s.status}: {ci_txt} lies beyond the {region}; Holm-adjusted p {s.p_holm:.2g}"
    if s.status == "unchanged":
        return f"unchanged: {ci_txt} lies inside the {region}"
    if w_lo > bound or w_hi < -bound:
        tested = sum(x.p_change is not None for x in comparison.scenarios)
        return (f"inconclusive: {ci_txt} lies beyond the {region}, but not after Holm's adjustment "
                f"over {tested} scenarios (p {s.p_holm:.2g})")
    return f"inconclusive: {ci_txt} straddles an edge of the {region}"


def sequential_reason(d: SequentialDecision) -> str:
    """One paragraph with the numbers behind a sequential call (``ab`` and ``bench run --repeats auto``).

    The repeated CI, where it lies against 1 and the equivalence region, and the MDE at this look
    (:func:`~logitlab.perf.sequential.repeated_ci_mde`) with, when the CI carries a run's own offset, the
    change no number of blocks detects (:func:`~logitlab.perf.sequential.offset_floor`).
    """
    call, stop_reason, n, min_blocks, max_blocks = d.call, d.stop_reason, d.n_blocks, d.min_blocks, d.max_blocks
    look, n_looks, alpha, spending, nominal = d.look, d.n_looks, d.alpha, d.spending, d.nominal_confidence
    mean, sd, delta = d.mean_log_ratio, d.sd_log_ratio, d.margin
    metric, unit, higher_is_better = d.metric, d.unit, d.higher_is_better
    lo, hi = _log(d.ci_low), _log(d.ci_high)
    label = f"{metric} ({unit})" if metric and unit else (metric or unit or "metric")
    design = (f"sequential design, {SPENDING_NAMES[spending]} alpha spending over looks after blocks "
              f"{min_blocks}-{max_blocks}")
    where = {"decided": "stopped", "max-blocks": "budget spent", "max-time": "time budget spent",
             None: "running"}[stop_reason]
    head = f"{call}: {where} after {n} of at most {max_blocks} blocks ({design})"
    if lo is None:
        if look is None:
            body = f"the first look is after block {min_blocks}"
        else:
            body = f"look {look} of {n_looks} spends no alpha yet"
        if mean is not None:
            body += f"; the geometric-mean {label} ratio so far is {math.exp(mean):.4g}"
        return f"{head}; {body}."
    ci = f"{100 * (1 - alpha):g}% repeated CI {math.exp(lo):.4g}-{math.exp(hi):.4g}"
    carries = (f"; its width carries a run's own offset, sd {100 * d.between_run_sd:.2f}% from the calibration"
               if d.between_run_sd else "")
    stats_text = (f"candidate/control geometric-mean {label} ratio {math.exp(mean):.4g}, {ci} (look {look} of "
                  f"{n_looks}: paired t at nominal {100 * nominal:.4g}%, df {n - 1}; valid at any stopping time"
                  f"{carries})")
    region = f"equivalence region {1 / (1 + delta):.4g}-{1 + delta:.4g} ({margin_origin(d)})"
    side = "above" if higher_is_better else "below"
    other = "below" if higher_is_better else "above"
    if call == "equivalent":
        body = f"the repeated CI lies inside the {region}"
    elif call == "faster":
        body = f"the whole repeated CI is on the better side of 1 ({side} 1 for this metric), not inside the {region}"
    elif call == "slower":
        body = f"the whole repeated CI is on the worse side of 1 ({other} 1 for this metric), not inside the {region}"
    else:
        body = f"the repeated CI includes 1 and reaches beyond the {region}"
        if call == "continue":
            body += f"; up to {max_blocks - n} more block{'s' if max_blocks - n != 1 else ''}"
    text = f"{head}: {stats_text}; {body}."
    if sd == 0.0 and not d.between_run_sd:
        text += f" All {n} block log ratios are identical (sd 0): the CI has zero width."
        return text
    mde, floor = repeated_ci_mde(d), offset_floor(d)
    if mde is not None:
        text += (f" At this look the repeated CI detects a {_pct(mde)} change with 80% power (alpha {alpha:g} "
                 f"over all looks)")
        text += (f"; with the run's own offset no number of blocks detects less than {_pct(floor)}."
                 if floor is not None else ".")
    return text




def margin_origin(d: SequentialDecision) -> str:
    """Where a sequential decision's δ came from, as a phrase: ``"delta 2.0%, the default of a sequential run,
    fixed before the first look"``; a calibration names its file and what it was measured on."""
    origin = {"option": "from --margin, fixed before the first look",
              "default": "the default of a sequential run, fixed before the first look",
              "calibration": f"from the calibration {d.margin_file}"
                             + (f" ({d.margin_basis})" if d.margin_basis else "") + ", fixed before the first look",
              "a/a": "from the A/A slots of the blocks so far, a decision saved before δ was pre-registered",
              }.get(d.margin_source, f"from {d.margin_source}")
    return f"delta {_pct(d.margin)}, {origin}"


def stopping_note(d: SequentialDecision | None, blocks_run: int, mode_flag: str) -> str:
    """One line: the blocks run against the budget, why the run stopped, and what the CIs shown are."""
    if d is None:
        return f"{mode_flag}: no look was reached in {plural(blocks_run, 'block')}"
    why = {"decided": f"decided: {d.metric or 'metric'} {d.call}",
           "max-blocks": "budget of blocks spent without a call",
           "max-time": "time budget spent without a call",
           None: "stopped before a call"}[d.stop_reason]
    return (f"{mode_flag}: ran {blocks_run} of at most {d.max_blocks} blocks ({why}); sequential design with "
            f"{SPENDING_NAMES[d.spending]} alpha spending, looks after every block from {d.min_blocks}: the CIs "
            f"and calls shown are {100 * (1 - d.alpha):g}% repeated CIs, valid at this stopping time; "
            + (margin_origin(d) if d.margin_source == "a/a" else
               f"delta {_pct(d.margin)} fixed before the first look ({d.margin_source})"))
