"""What is known of an engine's crash: :class:`CrashEvidence`, read from the process that died.

An engine process — a supervised worker (:mod:`logitlab.engines.supervised`), a process-isolated slot
(:mod:`logitlab.experiments.isolation`) or a ``cmd`` program — that dies of a signal, exits without
answering, or is killed as hung leaves its return code, the phase it last wrote, and its stderr (with the
Python stack :mod:`faulthandler` prints on SIGSEGV, SIGFPE, SIGABRT, SIGBUS and SIGILL). Experiments
record the evidence as the outcome of the run (the verdict ``crashed``).
"""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["CrashEvidence", "exit_status", "read_phase", "STDERR_LINES"]

#: Lines of the engine process's stderr kept as evidence.
STDERR_LINES = 30


def exit_status(code: int) -> str:
    """``exit 1``, or ``killed by SIGSEGV (signal 11)`` for a negative return code (a signal)."""
    if code >= 0:
        return f"exit {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "a signal"
    return f"killed by {name} (signal {-code})"


@dataclass
class CrashEvidence:
    """What is known of an engine crash.

    Attributes:
        phase: what the engine was doing: ``load``, ``prefill``, ``decode step N``, ``tokenize``, …
        status: ``killed by SIGSEGV (signal 11)``, ``exit 1``, or ``hung: killed after 30 s``.
        signal: the signal's number, None for an exit or a hang.
        exit_code: the exit code, None for a signal or a hang.
        stderr_tail: the last lines of the engine process's stderr.
        stack: the Python stack :mod:`faulthandler` printed (its lines from ``Fatal Python error``), or [].
        engine: the engine's name.
        build: the engine's version and build line (``engine_version``, ``system_info``) as it described itself.
        hint: what to try, where the engine knows a cause (None otherwise).
        slot, variant: the run's slot and variant, filled by the experiment that ran it.
    """

    phase: str
    status: str
    signal: int | None = None
    exit_code: int | None = None
    stderr_tail: list[str] = field(default_factory=list)
    stack: list[str] = field(default_factory=list)
    engine: str = ""
    build: dict[str, Any] = field(default_factory=dict)
    hint: str | None = None
    slot: int | None = None
    variant: str | None = None

    def summary(self) -> str:
        """One line: ``candidate slot 3 crashed in decode step 2 (killed by SIGSEGV (signal 11))``."""
        who = " ".join(x for x in (self.variant, None if self.slot is None else f"slot {self.slot}") if x)
        return f"{who or 'the engine'} crashed in {self.phase} ({self.status})"

    def lines(self) -> list[str]:
        """The evidence, one fact a line, for reports."""
        out = [f"phase: {self.phase}", f"status: {self.status}"]
        if self.build:
            out.append("build: " + "; ".join(f"{k} {v}" for k, v in self.build.items()))
        if self.stack:
            out.append("Python stack: " + " | ".join(s.strip() for s in self.stack[:8] if s.strip()))
        tail = [line for line in self.stderr_tail if line.strip() and line not in self.stack][-3:]
        if tail:
            out.append("stderr: " + " | ".join(line.strip() for line in tail))
        if self.hint:
            out.append(f"hint: {self.hint}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of_process(cls, code: int, hung: str | None, phase: str, stderr: list[str], engine: str,
                   described: dict[str, Any], hint: Callable[[], str | None]) -> "CrashEvidence":
        """The evidence of an engine process that died with return code ``code`` (negative: a signal) or was
        killed as ``hung`` (``hung: killed after 30 s``), from its last phase and its stderr lines; ``hint`` is
        asked only for a signal (None on any error of its own: a hint never hides the crash)."""
        try:
            told = hint() if code < 0 and not hung else None
        except Exception:  # noqa: BLE001 - a hint never hides the crash
            told = None
        return cls(phase=phase, status=hung or exit_status(code), signal=-code if code < 0 and not hung else None,
                   exit_code=code if code >= 0 and not hung else None, stderr_tail=stderr[-STDERR_LINES:],
                   stack=_stack(stderr)[:STDERR_LINES], engine=engine,
                   build={k: described[k] for k in ("engine_version", "system_info") if described.get(k)},
                   hint=told)

    @classmethod
    def of(cls, crash: Exception) -> "CrashEvidence":
        """The evidence an :class:`~logitlab.errors.EngineCrashed` carries, or (none carried) its message as the
        status of an ``unknown`` phase."""
        return getattr(crash, "evidence", None) or cls(phase="unknown", status=str(crash))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CrashEvidence":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def read_phase(path: Path) -> str:
    """The phase a worker wrote last into ``path`` (``start`` when it wrote none)."""
    try:
        return path.read_bytes().decode("utf-8", "replace").strip() or "start"
    except OSError:
        return "start"


def _stack(lines: list[str]) -> list[str]:
    """faulthandler's block: from its ``Fatal Python error`` line to the end."""
    for i, line in enumerate(lines):
        if line.startswith("Fatal Python error"):
            return lines[i:]
    return []
