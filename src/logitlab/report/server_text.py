"""Plain-text pieces about engines that return top-k log-probabilities only (servers).

How a server scored the positions: its mode, endpoint, requests, their time,
and the alignment check. Every function returns strings or rows of strings;
none prints.
"""

from __future__ import annotations

from typing import Any

from logitlab.report.text import plural

__all__ = ["scoring_rows", "run_scoring_text", "retries_text"]


def scoring_rows(engine: dict[str, Any], label: str = "scoring") -> list[tuple[str, str]]:
    """Header rows from a manifest engine entry's ``scoring`` (none for engines that return logits)."""
    scoring = engine.get("scoring")
    if not scoring:
        return []
    text = f"{scoring['mode']} ({scoring['chosen']}): {scoring['endpoint']}, {scoring['requests']}"
    skipped = scoring.get("tried_before") or []
    if skipped:
        text += "; not used: " + "; ".join(f"{t['mode']} ({t['why_not']})" for t in skipped)
    probe = scoring.get("probe_alignment")
    if probe is not None:
        text += (f"; rows checked against the server's greedy completion on the probe: top-1 agrees at "
                 f"{probe['agree']} of {probe['confident']} confident positions" if probe["checked"] else
                 "; alignment not checkable on the probe (no confident position)")
    return [(label, text)]


def run_scoring_text(scoring: dict[str, Any]) -> str:
    """One run's scoring: ``teacher-forced: 13 requests, 0.74 s; 1 token evaluated per request; alignment …``."""
    text = (f"{scoring['mode']}: {plural(scoring['requests'], 'request')} for {scoring['positions']} positions, "
            f"{scoring['seconds']:.3g} s")
    evaluated = scoring.get("evaluated_per_request")
    if evaluated and len(evaluated) == 1:
        n = next(iter(evaluated))
        text += f"; each evaluated {plural(int(n), 'new token')} (the server's count)"
    elif evaluated:
        parts = [f"{plural(int(n), 'token')} × {count}" for n, count in evaluated.items()]
        text += "; new tokens evaluated per request (the server's count): " + ", ".join(parts)
    check = scoring.get("alignment")
    if check is None:
        text += "; alignment: no greedy completion in this run to check against"
    elif check["checked"]:
        shifted = ", ".join(f"{v} shifted by {int(k):+d}" for k, v in sorted(check["agree_shifted"].items()))
        text += (f"; alignment: top-1 agrees with the server's greedy completion at {check['agree']} of "
                 f"{check['confident']} confident positions ({shifted})")
    else:
        text += "; alignment: no confident position in this run's completion"
    return text


def retries_text(scorings: list[dict[str, Any] | None]) -> str | None:
    """One line about the requests a server made us retry over some runs, or None when there were none.

    Args:
        scorings: each run's ``scoring`` (None for engines that return logits).

    Returns:
        ``"3 retried requests in 2 of 4 runs (HTTP 429 × 2, HTTP 503 × 1), 2.5 s waited; …"`` or None.
    """
    retries = [(i, r) for i, s in enumerate(scorings) if s for r in s.get("retries") or []]
    if not retries:
        return None
    kinds: dict[str, int] = {}
    for _, r in retries:
        kind = str(r.get("failure", "?")).split(":", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    runs = len({i for i, _ in retries})
    waited = sum(float(r.get("waited_s") or 0.0) for _, r in retries)
    asked = sum(1 for _, r in retries if "retry_after_s" in r)
    text = (f"{plural(len(retries), 'retried request')} in {runs} of {plural(len(scorings), 'run')} ("
            + ", ".join(f"{k} × {n}" for k, n in kinds.items()) + f"), {waited:.3g} s waited")
    if asked:
        text += f" ({asked} as the server's Retry-After asked)"
    return text + "; the waits are not in the timings (runs[].scoring.retries in the JSON)"
