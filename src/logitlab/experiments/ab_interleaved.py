"""``ab --speed-design interleaved``: the decode speed call from interleaved blocks, a new pair of engines each.

The whole-run design (:mod:`logitlab.experiments.ab`) times each run as one slot of an ABBA/BAAB block. Here a
block is :func:`~logitlab.experiments.interleave.interleaved_block`: both arms decode the reference's tokens,
``chunk`` steps a turn in the block's pattern order, so a change of the machine's state reaches both arms within
two turns and cancels in their ratio. Before every block a new pair of supervised engines is loaded (new worker
processes) and warmed (:func:`~logitlab.experiments.interleave.warm_engine`, ``warm_steps`` untimed steps): an
offset of one pair of engine objects (their buffers, thread pools, memory placement: an instance effect, which
counterbalancing cannot cancel) becomes block noise, which the CI carries.

Measured on a 2-core machine at a load of 2x its cores (``benchmarks/bench_interleave.py``, issue #36 item 3):
one pair of objects a run differed by tau = 3.59 % (p < 0.01) between runs; a new pair every block, 0 (p 0.88);
120 s of such blocks reached an MDE of 1.34 % at 80 % power.

The clock (:func:`plan`): where both arms decode on one thread on the CPU (llama.cpp's ``n_threads`` 1, no GPU
layers), each step is timed by the CPU time of the worker's calling thread (``time.thread_time``), which leaves
out the time it waited for a CPU (most of the noise on a loaded machine), and both workers decode on one CPU
(the last of this process's): this process and the new workers' loads run on the others. Otherwise (several
decode threads, a GPU, an engine without sessions in a worker) the wall clock, unpinned.

Nothing here prints; ``on_block`` hears of each block.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

from logitlab.engines.supervised import call_engine
from logitlab.engines.variant import Variant
from logitlab.errors import EngineCrashed, InputError
from logitlab.experiments.ab_results import InterleavedRecord, InterleavedSpeed
from logitlab.experiments.interleave import interleaved_block, warm_engine
from logitlab.perf.design import PATTERNS

__all__ = ["plan", "interleaved_blocks"]

#: ``ab --speed-design``: ``runs`` (each run a slot of an ABBA/BAAB block) or ``interleaved`` (this module).
SPEED_DESIGNS = ("runs", "interleaved")

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
                       speed: InterleavedSpeed, load: Callable[[Variant], Any],
                       stop: Callable[[int], bool], plant: float = 0.0,
                       on_block: Callable[[InterleavedRecord], None] | None = None) -> InterleavedSpeed:
    """Run interleaved blocks until ``stop(blocks so far)`` says so (asked after each even number of blocks, so
    that as many ABBA as BAAB blocks run), appending each to ``speed.blocks``.

    Parameters:
        control, candidate: the variants; ``load(variant)`` loads one supervised (a new worker process).
        prompt_ids: the prompt's token ids.
        tokens: the decode inputs both arms replay (the reference's greedy tokens); an odd count drops its last.
        speed: the phase's plan and record (:func:`plan`); its ``cpus``, where set, is where both arms decode, and
            this process (with the workers it starts) keeps off it while the phase runs.
        plant: the candidate's planted slowdown (a fraction of each step's own time, busy-waited; validity
            benchmarks only).
        on_block: told of each finished block.

    A crash of either engine ends the phase with ``speed.stopped`` naming it; the blocks before it are kept.

    Raises:
        InputError: fewer than two tokens to replay.
    """
    steps = list(tokens)[:len(tokens) // 2 * 2]
    if len(steps) < 2:
        raise InputError(f"the interleaved speed design decodes at least 2 tokens; the reference has {len(tokens)}")
    own = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    others = [c for c in own if c not in (speed.cpus or [])]
    if speed.cpus and others:
        os.sched_setaffinity(0, others)  # the workers started below inherit it; they decode on speed.cpus
    try:
        index = 0
        while not (index % 2 == 0 and stop(index)):
            engines: list[Any] = []
            try:
                start = time.perf_counter()
                for variant in (control, candidate):
                    engines.append(engine := load(variant))
                    call_engine(engine, warm_engine, list(prompt_ids), speed.warm_steps,
                                phase=f"warming {variant.label}")
                loaded = time.perf_counter() - start
                block = interleaved_block(engines[0], engines[1], prompt_ids, steps,
                                          pattern=PATTERNS[index % 2], chunk=speed.chunk,
                                          clock=speed.clock, plant=plant, cpus=speed.cpus)
            except EngineCrashed as crash:
                speed.stopped = f"block {index}: {crash}"
                break
            finally:
                for engine in engines:
                    engine.close()
            record = InterleavedRecord(block=index, pattern=block.pattern, steps=len(steps),
                                       rates=[float(v) for v in block.decode_block().values],
                                       control_seconds=float(block.control_steps.sum()),
                                       candidate_seconds=float(block.candidate_steps.sum()),
                                       load_seconds=round(loaded, 4))
            speed.blocks.append(record)
            if on_block is not None:
                on_block(record)
            index += 1
    finally:
        if speed.cpus and others:
            os.sched_setaffinity(0, own)
    return speed
