"""``ab --speed-design interleaved``: the decode speed call from interleaved blocks, a new pair of engines each.

The whole-run design (:mod:`logitlab.experiments.ab`) times each run as one slot of an ABBA/BAAB block. Here a
block is :func:`~logitlab.experiments.interleave.interleaved_block`: both arms decode the reference's tokens,
``chunk`` steps a turn in the block's pattern order, so a change of the machine's state reaches both arms within
two turns and cancels in their ratio. Before every block a new pair of supervised engines is loaded (new worker
processes) and warmed (:func:`~logitlab.experiments.interleave.warm_engine`, ``warm_steps`` untimed steps): an
offset of one pair of engine objects (their buffers, thread pools, memory placement: an instance effect, which
counterbalancing cannot cancel) becomes block noise, which the CI carries. The pattern's first arm is loaded first
(the control in ABBA, the candidate in BAAB). Measured, that arm (loaded first, and decoding the block's first
turn) decodes 0.55-0.66 % slower (8 + 8 real A/As, quiet and at load); loading the control first in every block
made that an offset of the arms (0.5 %).

Measured on a 2-core machine at a load of 2x its cores (``benchmarks/bench_interleave.py``, issue #36 item 3):
one pair of objects a run differed by tau = 3.59 % (p < 0.01) between runs; a new pair every block, 0 (p 0.88);
120 s of such blocks reached an MDE of 1.34 % at 80 % power.

The clock (:func:`plan`): where both arms decode on one thread on the CPU (llama.cpp's ``n_threads`` 1, no GPU
layers), each step is timed by the CPU time of the worker's calling thread (``time.thread_time``), which leaves
out the time it waited for a CPU (most of the noise on a loaded machine), and both workers decode on one CPU
(the last of this process's): every thread of this process, and the workers it starts (which inherit that), run
on the others while the phase runs. (A worker forked from a fork server, an engine with ``PRELOAD``, inherits the
server's CPUs instead: it loads wherever the server runs, and still decodes on the pinned CPU.) Otherwise
(several decode threads, a GPU, an engine that does not say) the wall clock, unpinned.

Nothing here prints; ``on_block`` hears of each block, ``on_crash`` of an engine crash.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

from logitlab.engines.supervised import call_engine, close_now
from logitlab.engines.variant import Variant
from logitlab.errors import EngineCrashed, EngineError, InputError
from logitlab.experiments.ab_results import InterleavedRecord, InterleavedSpeed
from logitlab.experiments.interleave import interleaved_block, pin_process, warm_engine
from logitlab.perf.design import PATTERNS

__all__ = ["plan", "interleaved_blocks"]


def plan(control: dict[str, Any], candidate: dict[str, Any], cpus: Sequence[int]) -> tuple[str, list[int] | None, str]:
    """The clock and the decode CPUs for two engines as they describe themselves (``Engine.describe()``).

    ``cpu`` on the last of ``cpus`` where both decode on one thread with nothing offloaded to a GPU
    (``effective.n_threads`` 1 and ``options.n_gpu_layers`` absent or 0); otherwise ``wall``, unpinned.

    Returns:
        ``(clock, decode_cpus or None, reason)``.
    """
    def single_threaded(described: dict[str, Any]) -> bool:
        threads = (described.get("effective") or {}).get("n_threads")
        gpu = (described.get("options") or {}).get("n_gpu_layers", 0)
        return threads == 1 and str(gpu) in ("0", "")

    if single_threaded(control) and single_threaded(candidate) and cpus:
        return ("cpu", [sorted(cpus)[-1]],
                "both decode on one CPU thread: each step timed by the worker thread's CPU time, both workers on "
                "one CPU")
    return ("wall", None, "an engine decodes on several threads or a GPU (or does not say): each step timed by the "
                          "wall clock, unpinned; on a loaded machine the wall clock counts the waits for a CPU")


def interleaved_blocks(control: Variant, candidate: Variant, prompt_ids: Sequence[int], tokens: Sequence[int], *,
                       speed: InterleavedSpeed, load: Callable[[Variant], Any], stop: Callable[[int], bool],
                       on_block: Callable[[InterleavedRecord], None] | None = None,
                       on_crash: Callable[[str, EngineCrashed], None] | None = None) -> InterleavedSpeed:
    """Run interleaved blocks until ``stop(blocks so far)`` says so (asked after each even number of blocks, so
    that as many ABBA as BAAB blocks run), appending each to ``speed.blocks``.

    Parameters:
        control, candidate: the variants; ``load(variant)`` loads one supervised (a new worker process).
        prompt_ids: the prompt's token ids.
        tokens: the decode inputs both arms replay (the reference's greedy tokens); an odd count drops its last.
        speed: the phase's plan and record (:func:`plan`); its ``cpus``, where set, is where both arms decode;
            its ``plant`` the candidate's planted slowdown (validity benchmarks).
        on_block: told of each finished block.
        on_crash: told of an engine crash, with the side (``control`` or ``candidate``) whose engine died.

    A crash or failure of either engine (``EngineCrashed``, ``EngineError``) ends the phase: ``speed.stopped`` and
    ``speed.stopped_side`` say where; the blocks before it are kept. Both engines of a block are closed, and this
    process's CPUs given back, on every path.

    Returns:
        ``speed``, its ``blocks`` filled.

    Raises:
        InputError: fewer than two tokens to replay; what ``stop`` raises.
    """
    steps = list(tokens)[:len(tokens) // 2 * 2]
    if len(steps) < 2:
        raise InputError(f"the interleaved speed design decodes at least 2 tokens; the reference has {len(tokens)}")
    own = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    others = [c for c in own if c not in (speed.cpus or [])]
    if speed.cpus and others:
        pin_process(None, others)  # every thread; the workers started below inherit it
    try:
        index = 0
        while not (index % 2 == 0 and stop(index)):
            record = _one_block(control, candidate, prompt_ids, steps, index, speed, load, on_crash)
            if record is None:
                break
            speed.blocks.append(record)
            if on_block is not None:
                on_block(record)
            index += 1
    finally:
        if speed.cpus and others:
            pin_process(None, own)
    return speed


def _one_block(control: Variant, candidate: Variant, prompt_ids: Sequence[int], steps: list[int], index: int,
               speed: InterleavedSpeed, load: Callable[[Variant], Any],
               on_crash: Callable[[str, EngineCrashed], None] | None) -> InterleavedRecord | None:
    """Load and warm a new pair, run block ``index``, close both; None (``speed.stopped`` set) where an engine
    crashed or failed."""
    pattern = PATTERNS[index % 2]
    order = ("control", "candidate") if pattern == "ABBA" else ("candidate", "control")  # the pattern's arm first
    variants = {"control": control, "candidate": candidate}
    engines: dict[str, Any] = {}
    side: str | None = order[0]
    try:
        start = time.perf_counter()
        for side in order:
            engines[side] = engine = load(variants[side])
            call_engine(engine, warm_engine, list(prompt_ids), speed.warm_steps, phase=f"warming {side}")
        loaded = time.perf_counter() - start
        side = None  # in the block: the crash's phase names the side ("interleaved candidate decode steps 4-7")
        block = interleaved_block(engines["control"], engines["candidate"], prompt_ids, steps,
                                  pattern=pattern, chunk=speed.chunk, clock=speed.clock, plant=speed.plant,
                                  cpus=speed.cpus)
    except (EngineCrashed, EngineError) as failure:
        if side is None:
            side = "candidate" if "candidate" in _phase(failure) else "control"
        speed.stopped, speed.stopped_side = f"block {index}: {failure}", side
        if isinstance(failure, EngineCrashed) and on_crash is not None:
            on_crash(side, failure)
        return None
    finally:
        for engine in engines.values():
            close_now(engine)  # its worker gone before the next pair loads (memory)
    return InterleavedRecord(block=index, pattern=block.pattern, steps=len(steps), first_loaded=order[0],
                             rates=[float(v) for v in block.decode_block().values],
                             control_seconds=float(block.control_steps.sum()),
                             candidate_seconds=float(block.candidate_steps.sum()),
                             load_seconds=round(loaded, 4), prefill_seconds=[float(s) for s in block.prefill_seconds],
                             wall_seconds=round(time.perf_counter() - start, 4))


def _phase(failure: Exception) -> str:
    """The phase an engine failure names (a crash's evidence, else its message)."""
    evidence = getattr(failure, "evidence", None)
    return f"{getattr(evidence, 'phase', '')} {failure}"
