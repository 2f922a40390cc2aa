"""Fuzzing settings and the per-reader tally (imported by the fuzz tests).

In ``make test`` each fuzz test tries a fixed, derandomized set of inputs
(``SHORT_EXAMPLES`` each): the same inputs on every run. The long run is a
documented command::

    LOGITLAB_FUZZ_EXAMPLES=5000 python -m pytest tests/fuzz -q

which draws that many random inputs per test (Hypothesis keeps any failure in
``.hypothesis/`` and replays it first next time) and prints, at the end, one
line per reader: inputs tried, inputs rejected with a logitlab error, inputs
read. ``LOGITLAB_FUZZ_TALLY=FILE`` also writes that tally as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, settings

SHORT_EXAMPLES = 60
LONG = "LOGITLAB_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("LOGITLAB_FUZZ_EXAMPLES", SHORT_EXAMPLES))

settings.register_profile(
    "logitlab-fuzz", max_examples=EXAMPLES, derandomize=not LONG, deadline=None, database=None if not LONG else
    settings.default.database, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.large_base_example])
settings.load_profile("logitlab-fuzz")

#: reader -> Counter(tried=, rejected=, read=)
TALLY: dict[str, Counter] = {}


def tally(reader: str, outcome: str) -> None:
    TALLY.setdefault(reader, Counter())[outcome] += 1
    TALLY[reader]["tried"] += 1


def report(terminalreporter) -> None:
    """Print the tally at the end of the session (called by ``tests/conftest.py``)."""
    if not TALLY:
        return
    terminalreporter.section("logitlab fuzz tally")
    terminalreporter.write_line(f"{'reader':38s} {'tried':>8s} {'rejected':>9s} {'read':>8s}")
    for reader, counts in sorted(TALLY.items()):
        terminalreporter.write_line(f"{reader:38s} {counts['tried']:8d} {counts['rejected']:9d} {counts['read']:8d}")
    target = os.environ.get("LOGITLAB_FUZZ_TALLY")
    if target:
        Path(target).write_text(json.dumps({k: dict(v) for k, v in TALLY.items()}, indent=1) + "\n")


#: The seed files: tests/data (bench/, fuzz/)
DATA = Path(__file__).resolve().parents[1] / "data"
