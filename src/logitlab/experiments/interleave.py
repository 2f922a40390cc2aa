"""Decode steps interleaved between two loaded engines: a speed block whose slots are chunks of steps.

``ab`` times whole runs in ABBA/BAAB order, so whatever changes between two runs a few seconds apart (the
clock frequency, another process's burst, the page cache) is block noise: on a quiet 2-core machine 64
decode tokens vary by 4-10 % from run to run. Here one block opens a session on each arm, prefills both
(in the block's pattern order) and then decodes the same replayed tokens ``chunk`` steps at a time, the
arms alternating in the block's pattern at the chunk level (``ABBA``: A B B A A B B A ...), so a change of
the machine's state reaches both arms within two chunks and cancels in the ratio of their sums.

The clock is the wall time (``time.perf_counter``) or the CPU time of the thread that calls the engine
(``time.thread_time``, user + system). CPU time leaves out the time the thread waited for a CPU, which is most
of the noise on a loaded machine; it is a measure of speed only where the step's work is done on that thread:
a CPU engine decoding with one thread (llama.cpp's ``n_threads=1``, its default on a 2-core machine), not a GPU
kernel, a server or a thread pool. (The process's CPU time is no better there: it counts the pool's threads
spinning while they wait for work: in one loaded run it read a planted 3 % slowdown as 12 %.)

``plant`` (the candidate's steps only) busy-waits after each step until the clock has run ``plant`` × the
step's own measured time more, counted in the step: a slowdown of exactly ``(1 + plant)``× in CPU time, and
of at least that in wall time (more where the wait is pre-empted), for checking that a true change is
detected (issue #36 item 3).

Where the two arms run on different cores they differ by the cores' own speeds (another process on a
core's SMT sibling, its cache, its clock): ``cpus`` places both arms' processes on the same CPUs for the
decode steps (``os.sched_setaffinity``, every thread; the prefills run as the processes were). On a quiet
2-core machine (``benchmarks/bench_interleave.py``) pinned blocks of 64 steps, 4 steps a turn, varied by 0.8 %
in CPU time, against 4.1 % for the whole-run design; under a load of 2× the cores by 2.1 %, unpinned 4.3 %.
Pin to fewer CPUs than the engine's threads and they wait on each other.

Each arm's engine may be supervised (:func:`logitlab.engines.supervised.call_engine` runs each chunk in its
worker, the timing taken there) or in this process. Nothing here prints or logs.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from logitlab.engines.base import Session, check_fits
from logitlab.engines.supervised import call_engine, engine_supports
from logitlab.errors import InputError
from logitlab.perf.design import PATTERNS, Block

__all__ = ["CLOCKS", "InterleavedBlock", "interleaved_block", "open_stream", "step_stream",
           "close_stream", "pin_process", "renew_engine", "warm_engine"]

#: The clocks a step can be timed with (seconds): wall time, or the CPU time of the thread calling the engine.
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}

# The open sessions of this process, by key (in a supervised engine's worker: that worker's).
_STREAMS: dict[str, Session] = {}


def open_stream(engine: Any, key: str, prompt_ids: list[int], clock: str) -> float:
    """(Run where the engine is.) Open a session under ``key`` (closing one left there) and prefill
    ``prompt_ids``; the prefill's seconds in ``clock``."""
    close_stream(engine, key)
    session = engine.open_session()
    _STREAMS[key] = session
    now = CLOCKS[clock]
    start = now()
    session.prefill(prompt_ids)
    return now() - start


def step_stream(engine: Any, key: str, tokens: list[int], clock: str, plant: float) -> list[tuple[float, float]]:
    """(Run where the engine is.) Decode ``tokens`` one step each on ``key``'s session; per step, its seconds
    in ``clock`` and the engine's part of them: the same, but where ``plant`` > 0, which busy-waits after the
    step until ``plant`` × the engine's part more has passed in ``clock``."""
    session = _STREAMS[key]
    now = CLOCKS[clock]
    out = []
    for token in tokens:
        start = now()
        session.decode([token])
        seconds = engine_part = now() - start
        if plant > 0:
            end = start + (1.0 + plant) * engine_part
            while now() < end:
                pass
            seconds = now() - start
        out.append((seconds, engine_part))
    return out


def pin_process(engine: Any, cpus: list[int]) -> list[int]:
    """(Run where the engine is.) Set the CPU affinity of every thread of this process to ``cpus``
    (``os.sched_setaffinity`` per thread of ``/proc/self/task``; threads started later inherit it); the
    process's CPUs before it."""
    before = sorted(os.sched_getaffinity(0))
    tasks = Path("/proc/self/task")
    for tid in ([int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]):
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    return before


def close_stream(engine: Any, key: str) -> None:
    """(Run where the engine is.) Close ``key``'s session, if one is open."""
    session = _STREAMS.pop(key, None)
    if session is not None:
        session.close()


def warm_engine(engine: Any, warm_ids: list[int], warm_steps: int) -> float:
    """(Run where the engine is.) Warm a loaded engine, untimed: prefill ``warm_ids`` in a session of its own and
    decode ``warm_steps`` tokens (``warm_ids`` again, cycled); the seconds it took (wall).

    Raises:
        InputError: ``warm_ids`` is empty, or the engine has no sessions. EngineError: the engine failed.
    """
    if not warm_ids:
        raise InputError("warming an engine needs at least one prompt token")
    start = time.perf_counter()
    session = engine.open_session()
    try:
        session.prefill(warm_ids)
        for step in range(warm_steps):
            session.decode([warm_ids[step % len(warm_ids)]])
    finally:
        session.close()
    return time.perf_counter() - start


def renew_engine(engine: Any, warm_ids: list[int], warm_steps: int) -> float:
    """(Run where the engine is.) Close every session this process keeps open here (:func:`open_stream`'s, of any
    engine in the process), load the engine again (:meth:`~logitlab.engines.base.Engine.reload`: the same object,
    a new loaded state) and warm it (:func:`warm_engine`); the seconds it took (wall).

    An object's own buffers and threads can give it a speed of its own that all the blocks of one pair of objects
    share (an instance effect); renewing the objects between blocks turns it into block noise the CI carries.
    (Measured on a loaded 2-core machine, ``benchmarks/bench_interleave.py``: it does, but a renewal inside the
    worker cost about 12 s a block there; a new pair of worker processes cost less.)

    Raises:
        InputError: ``warm_ids`` is empty, or the engine has no sessions. EngineError: the load or a step failed.
    """
    if not warm_ids:
        raise InputError("warming an engine needs at least one prompt token")
    start = time.perf_counter()
    for key in list(_STREAMS):
        close_stream(engine, key)
    engine.reload()
    warm_engine(engine, warm_ids, warm_steps)
    return time.perf_counter() - start


@dataclass(frozen=True)
class InterleavedBlock:
    """One interleaved block: both arms' prefill and per-step decode times.

    Attributes:
        pattern: ``ABBA`` or ``BAAB``: the order of the prefills and of the arms' chunks (``A`` control).
        chunk: decode steps an arm runs before the other takes its turn.
        clock: ``wall`` or ``cpu`` (see the module).
        prefill_seconds: ``(control, candidate)``, seconds in ``clock`` (in ``cpu``: the calling thread's only, so
            a prefill on several threads is undercounted).
        control_steps, candidate_steps: shape ``(n_steps,)`` float64, each decode step's seconds in ``clock``.
        candidate_engine_steps: shape ``(n_steps,)`` float64, the engine's part of each candidate step (the
            step's seconds without the plant; equal to ``candidate_steps`` where nothing is planted).
        n_prompt: the prompt's tokens.
    """

    pattern: str
    chunk: int
    clock: str
    prefill_seconds: tuple[float, float]
    control_steps: np.ndarray
    candidate_steps: np.ndarray
    candidate_engine_steps: np.ndarray
    n_prompt: int

    def decode_log_ratio(self) -> float:
        """log(candidate decode tokens/s / control's) over the whole block: log(sum control / sum candidate)."""
        return math.log(float(self.control_steps.sum()) / float(self.candidate_steps.sum()))

    def decode_block(self) -> Block:
        """The block as the ABBA/BAAB analysis (:mod:`logitlab.perf`) takes it: four decode tokens/s, each
        arm's first and second half of the steps in the pattern's slot order, so the block's log ratio is
        the mean of the halves' (drift between the halves cancels as in a whole-run block) and its A/A is the
        control's second half against its first."""
        half = len(self.control_steps) // 2
        rates = {}
        for arm, steps in (("A", self.control_steps), ("B", self.candidate_steps)):
            first, second = steps[:half], steps[half:2 * half]
            rates[arm] = [len(first) / float(first.sum()), len(second) / float(second.sum())]
        return Block(self.pattern, tuple(rates[arm].pop(0) for arm in self.pattern))

    def prefill_block(self) -> tuple[float, float]:
        """``(control, candidate)`` prefill tokens/s (one prefill each, not interleaved; see ``prefill_seconds``)."""
        return (self.n_prompt / self.prefill_seconds[0], self.n_prompt / self.prefill_seconds[1])


def _check_cpus(cpus: Sequence[int] | None) -> list[int] | None:
    if cpus is None:
        return None
    if not hasattr(os, "sched_setaffinity"):
        raise InputError("cpus needs os.sched_setaffinity (Linux)")
    wanted = sorted({int(c) for c in cpus})
    count = os.cpu_count() or 1
    if not wanted or wanted[0] < 0 or wanted[-1] >= count:
        raise InputError(f"cpus must be a non-empty set of this machine's CPUs (0-{count - 1}), not {wanted}")
    return wanted


def interleaved_block(control: Any, candidate: Any, prompt_ids: Sequence[int], tokens: Sequence[int], *,
                      pattern: str = "ABBA", chunk: int = 1, clock: str = "wall", plant: float = 0.0,
                      cpus: Sequence[int] | None = None) -> InterleavedBlock:
    """Run one interleaved block (see the module) and return its timings.

    Parameters:
        control, candidate: loaded engines with sessions (supervised or in this process), two objects (each arm
            keeps a session open across the block: one object cannot serve both).
        prompt_ids: the prompt's token ids (at least one).
        tokens: the decode inputs, replayed by both arms (e.g. a control run's greedy tokens); an even count
            of at least two, so each arm has two halves.
        pattern: ``ABBA`` or ``BAAB``.
        chunk: decode steps per turn (1: every step alternates; ``len(tokens) // 2``: each arm's two halves in
            the pattern's order, the whole-run design at the scale of half runs).
        clock: ``wall`` or ``cpu``.
        plant: the candidate's planted slowdown (fraction, ≥ 0; 0.03: 3 % slower in ``clock``).
        cpus: where given, both arms' processes (each supervised engine's worker; this process for an engine in
            it) run the decode steps on these CPUs only, and get their own affinity back after them.

    Raises:
        InputError: bad arguments, an engine without sessions, a workload that does not fit, ``cpus`` empty or
            beyond this machine's CPUs, or a system without ``os.sched_setaffinity``.
        EngineCrashed: a supervised engine's worker died (its phase names the block's step).
    """
    if pattern not in PATTERNS:
        raise InputError(f"pattern must be one of {', '.join(PATTERNS)}, not {pattern!r}")
    if clock not in CLOCKS:
        raise InputError(f"clock must be one of {', '.join(CLOCKS)}, not {clock!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InputError(f"chunk must be a positive integer, not {chunk!r}")
    if not (isinstance(plant, (int, float)) and math.isfinite(plant) and plant >= 0):
        raise InputError(f"plant must be a finite fraction >= 0, not {plant!r}")
    prompt, steps = [int(t) for t in prompt_ids], [int(t) for t in tokens]
    if not prompt:
        raise InputError("the prompt needs at least one token")
    if len(steps) < 2 or len(steps) % 2:
        raise InputError(f"an interleaved block decodes an even number of steps, at least 2; got {len(steps)}")
    pinned = _check_cpus(cpus)
    arms = {"A": ("control", control, 0.0), "B": ("candidate", candidate, float(plant))}
    for key, engine, _ in arms.values():
        if not engine_supports(engine, "sessions"):
            raise InputError(f"the {key}'s engine has no sessions: decode steps cannot be interleaved")
        check_fits(engine, len(prompt), len(steps), side=key)
    prefill, restore = {}, {}
    times: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    try:
        for arm in pattern[:2]:
            key, engine, _ = arms[arm]
            prefill[arm] = call_engine(engine, open_stream, key, prompt, clock, phase=f"interleaved {key} prefill")
        if pinned is not None:
            for arm in pattern[:2]:
                key, engine, _ = arms[arm]
                restore[arm] = call_engine(engine, pin_process, pinned, phase=f"interleaved {key} pinning")
        # ceil(steps / chunk) turns an arm, in the pattern's order
        for arm in (pattern[i % 4] for i in range(2 * math.ceil(len(steps) / chunk))):
            done = len(times[arm])
            key, engine, extra = arms[arm]
            part = steps[done:done + chunk]
            times[arm] += call_engine(engine, step_stream, key, part, clock, extra,
                                      phase=f"interleaved {key} decode steps {done}-{done + len(part) - 1}")
    finally:
        # sessions closed, then affinities given back in the reverse order of pinning (two engines in this
        # process: the second pin saw the first's CPUs, so the first's restores the process's own)
        undo = [(close_stream, key, "close", engine) for key, engine, _ in arms.values()]
        undo += [(pin_process, restore[arm], "unpinning", arms[arm][1]) for arm in reversed(list(restore))]
        for fn, arg, what, engine in undo:
            try:
                call_engine(engine, fn, arg, phase=f"interleaved {what}")
            except Exception:  # noqa: BLE001 - a dead worker has nothing open; the first error is the one raised
                pass
    a_steps, b_steps = (np.asarray(times[arm], dtype=np.float64).reshape(-1, 2) for arm in "AB")
    return InterleavedBlock(pattern=pattern, chunk=chunk, clock=clock, prefill_seconds=(prefill["A"], prefill["B"]),
                            control_steps=a_steps[:, 0], candidate_steps=b_steps[:, 0],
                            candidate_engine_steps=b_steps[:, 1], n_prompt=len(prompt))
