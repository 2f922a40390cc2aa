"""Fuzzing settings and the per-reader tally (imported by the fuzz tests).

In ``make test`` each fuzz test tries a fixed, derandomized set of inputs
(``SHORT_EXAMPLES`` per test and seed): the same inputs on every run. The long run is a
documented command::

    LOGITLAB_FUZZ_EXAMPLES=2000 python -m pytest tests/fuzz -q -p no:cacheprovider

which draws that many random inputs per test (Hypothesis keeps any failure in
``.hypothesis/`` and replays it first next time) and prints, at the end, one
line per reader: inputs tried, inputs rejected with a logitlab error, inputs
read. ``LOGITLAB_FUZZ_TALLY=FILE`` also writes that tally as JSON.

``LOGITLAB_FUZZ_CENSUS=1`` counts instead of failing: every other exception is
recorded by its type and the innermost logitlab line it came from, and the
run goes on — to count the distinct crashes of a version (the table on docs/concepts/robustness.md
counts those of the code before the fixes this way), not to test one.
"""

from __future__ import annotations

import json
import os
import traceback
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from hypothesis import HealthCheck, settings

#: inputs per fuzz test (per seed) in the short, derandomized run of ``make test``
SHORT_EXAMPLES = 25
LONG = "LOGITLAB_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("LOGITLAB_FUZZ_EXAMPLES", SHORT_EXAMPLES))

settings.register_profile(
    "logitlab-fuzz", max_examples=EXAMPLES, derandomize=not LONG, deadline=None, database=None if not LONG else
    settings.default.database, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.large_base_example])
settings.load_profile("logitlab-fuzz")

CENSUS = os.environ.get("LOGITLAB_FUZZ_CENSUS") == "1"

#: reader -> Counter(tried=, rejected=, read=, crashed=)
TALLY: dict[str, Counter] = {}
#: census mode: reader -> {crash signature: count}
CRASHES: dict[str, Counter] = {}


def tally(reader: str, outcome: str) -> None:
    TALLY.setdefault(reader, Counter())[outcome] += 1
    TALLY[reader]["tried"] += 1


def _signature(exc: BaseException) -> str:
    """``TypeError at logitlab/perf/readers/gbench.py:62`` (the innermost frame in logitlab, else the test's)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/logitlab/" in f.filename] or frames[-1:]
    where = f"{ours[-1].filename.split('/src/')[-1]}:{ours[-1].lineno}" if ours else "?"
    return f"{type(exc).__name__} at {where}"


@contextmanager
def outcome(reader: str, names: Sequence[str | Path] = (), error: type[BaseException] | None = None
            ) -> Iterator[None]:
    """Tally one fuzz input: ``read`` when the block ends, ``rejected`` on a LogitlabError (re-raised as nothing).

    Any other exception is a bug: it propagates (Hypothesis shrinks it), or in census mode is counted as
    ``crashed`` under its signature. With ``error`` (e.g. ``InputError``) only that class of logitlab error
    is a rejection; with ``names``, its message must name one of them (the file or folder read, as given
    or by its name): an error that does not say which file is wrong fails the test.
    """
    from logitlab.errors import LogitlabError

    try:
        yield
    except LogitlabError as exc:
        if error is not None and not isinstance(exc, error) and not CENSUS:
            raise AssertionError(f"{reader}: {type(exc).__name__}, not {error.__name__}: {exc}") from exc
        if names and not names_one(str(exc), names) and not CENSUS:
            raise AssertionError(f"{reader}: the error does not name {', '.join(map(str, names))}: {exc}") from exc
        tally(reader, "rejected")
    except Exception as exc:  # noqa: BLE001 - the census counts every kind
        if not CENSUS:
            raise
        tally(reader, "crashed")
        CRASHES.setdefault(reader, Counter())[_signature(exc)] += 1
    else:
        tally(reader, "read")


def names_one(message: str, names: Sequence[str | Path]) -> bool:
    """Whether ``message`` names one of ``names`` (a path as given, or its last part)."""
    return any(str(n) in message or Path(n).name in message for n in names)


def report(terminalreporter) -> None:
    """Print the tally at the end of the session (called by ``tests/conftest.py``)."""
    if not TALLY:
        return
    terminalreporter.section("logitlab fuzz tally")
    terminalreporter.write_line(f"{'reader':38s} {'tried':>8s} {'rejected':>9s} {'read':>8s} {'crashed':>8s}")
    for reader, counts in sorted(TALLY.items()):
        terminalreporter.write_line(f"{reader:38s} {counts['tried']:8d} {counts['rejected']:9d} {counts['read']:8d} "
                                    f"{counts['crashed']:8d}")
    for reader, crashes in sorted(CRASHES.items()):
        for signature, count in crashes.most_common():
            terminalreporter.write_line(f"  crash  {reader}: {signature} ({count} inputs)")
    target = os.environ.get("LOGITLAB_FUZZ_TALLY")
    if target:
        Path(target).write_text(json.dumps({"tally": {k: dict(v) for k, v in TALLY.items()},
                                            "crashes": {k: dict(v) for k, v in CRASHES.items()}}, indent=1) + "\n")


#: The seed files: tests/data (bench/, fuzz/)
DATA = Path(__file__).resolve().parents[1] / "data"
