"""The speed designs of ``ab`` (what each means: :mod:`logitlab.experiments.ab_interleaved`) and the interleaved
design's fixed settings.

Standard library only: the CLI's ``--speed-design`` choices come from here without loading numpy or an engine.
"""

from __future__ import annotations

__all__ = ["SPEED_DESIGNS", "CHUNK", "WARM_STEPS"]

#: ``runs``: each run is a slot of an ABBA/BAAB block; ``interleaved``: the two arms alternate decode steps inside
#: a block, a new pair of engines each block (:mod:`logitlab.experiments.ab_interleaved`).
SPEED_DESIGNS = ("runs", "interleaved")

#: Decode steps an arm runs before the other takes its turn (the configuration ``benchmarks/bench_interleave.py``
#: measured: 4 steps a turn).
CHUNK = 4

#: Untimed decode steps that warm each new engine before its block.
WARM_STEPS = 8
