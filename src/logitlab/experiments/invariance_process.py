"""The ``process`` invariance probe: the same run in a freshly started engine process vs in a warm one.

The reference is the prompt's greedy run (prompt + ``n_decode`` tokens, every row) as the first work of a new
engine process: a second supervised engine (:meth:`~logitlab.experiments.base.Experiment.load`, the worker the
probes start theirs in: :mod:`logitlab.engines.supervised`), loaded, run once and closed. The observed side is the
same run, replaying the reference's tokens, on the probe's own engine after it has served other work: one greedy
run of another prompt (:data:`WARMUP_RUNS` runs of :func:`~logitlab.experiments.invariance_steps.filler_sequences`'
first sequence: the prompt rotated by 3 tokens, 4 tokens longer, so that it also writes KV-cache cells the prompt
never reaches). Both sides go through the same supervised path, so only the process's history differs: state that
outlives a run (a cache, a pool, an allocator, a lazily built kernel table, a counter) shows as a difference.

A run in a subprocess of its own (``--isolation process``: :func:`~logitlab.experiments.isolation.run_in_subprocess`)
would also change how the rows come back (a file instead of the supervisor's shared buffer); the supervised worker
keeps that path the same on both sides.
"""

from __future__ import annotations

from logitlab.engines.base import Engine
from logitlab.engines.workload import environment, run_workload
from logitlab.experiments.invariance_results import InvarianceResult
from logitlab.experiments.invariance_steps import filler_sequences

__all__ = ["WARMUP_RUNS", "ProcessAxis"]

#: Unrelated greedy runs the warm engine serves before the compared run.
WARMUP_RUNS = 1


class ProcessAxis:
    """The ``process`` probe of :class:`~logitlab.experiments.invariance.InvarianceProbe` (a mixin: it uses the
    probe's ``config``, ``on_event``, ``load``, ``release``, ``_checked`` and ``_detokenize``)."""

    def _process(self, result: InvarianceResult, engine: Engine) -> InvarianceResult:
        """The prompt's greedy run as the first run of a fresh engine process vs the same run (its tokens
        replayed) on ``engine`` after :data:`WARMUP_RUNS` runs of another prompt: one check of
        ``len(prompt) + n_decode`` rows, each ``(n_vocab,)`` float32.

        Raises:
            EngineCrashed: either engine died (the probe's verdict ``crashed``).
        """
        cfg, ids = self.config, result.prompt_ids
        self.on_event("start", {"steps": 2 + WARMUP_RUNS})
        fresh_engine = self.load(cfg.variant)
        try:
            with environment(cfg.variant.env):
                fresh = run_workload(fresh_engine, ids, cfg.n_decode, None)
        finally:
            self.release(fresh_engine)
        self.on_event("step", {"what": "a fresh process"})
        other = filler_sequences(ids, 1)[0]
        for run in range(WARMUP_RUNS):
            with environment(cfg.variant.env):
                run_workload(engine, other, cfg.n_decode, None)
            self.on_event("step", {"what": f"warm-up run {run + 1}"})
        with environment(cfg.variant.env):
            warm = run_workload(engine, ids, cfg.n_decode, fresh.generated)
        self.on_event("step", {"what": "the warm process"})
        warmup = f"{WARMUP_RUNS} greedy run(s) of another prompt ({len(other)} tokens + {cfg.n_decode})"
        details = {"warmup_runs": WARMUP_RUNS, "warmup_prompt_tokens": len(other),
                   "exercised": f"a new engine process's first run vs the probe's engine process after {warmup}"}
        result.checks.append(self._checked(
            "warm vs fresh", "the run as a fresh engine process's first work",
            f"the same run (its tokens replayed) in an engine process after {warmup}",
            fresh.logits, warm.logits, cfg, fresh.input_ids, details))
        result.details = {"warmup_runs": WARMUP_RUNS, "warmup_prompt_tokens": len(other),
                          "generated_text": self._detokenize(fresh.generated)}
        return result
