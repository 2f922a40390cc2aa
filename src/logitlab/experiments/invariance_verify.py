"""The ``verify`` invariance probe: the same greedy continuation scored one token per decode call (M=1) vs in
verify blocks of K tokens (M=K, the speculative-decoding verify path).

The primitives are ``verify``'s own (:mod:`logitlab.experiments.verify.run`): :func:`~logitlab.experiments.verify.run.
greedy_m1` decodes the prompt's ``n_decode`` greedy tokens one per call and keeps every row;
:func:`~logitlab.experiments.verify.run.replay_mk` feeds the same tokens as blocks of K draft tokens (the session's
``verify`` hook where the adapter has one, else a decode of K tokens), so that verify row i has exactly the causal
inputs of M=1 decode row i, and any difference is the engine's numerics. Row i of the check is decode row i: input
token ``g[i]`` at position ``n_prompt + i``.
"""

from __future__ import annotations

from logitlab.engines.base import Engine
from logitlab.engines.supervised import call_engine
from logitlab.errors import check_at_least
from logitlab.experiments.invariance_results import InvarianceResult
from logitlab.experiments.verify.run import greedy_m1, replay_mk

__all__ = ["VERIFY_K", "MIN_TOKENS", "VerifyAxis"]

#: The verify block size K of the ``verify`` axis: ``logitlab verify``'s guarded block size (``--guard-k``,
#: :class:`~logitlab.experiments.verify.run.VerifyConfig`'s ``guard_k``), a draft of 4 tokens per verify call.
#: With fewer greedy tokens (``--tokens`` < K) the one block holds them all.
VERIFY_K = 4
#: Greedy tokens the axis needs: a verify block of 1 token is the M=1 path itself.
MIN_TOKENS = 2


class VerifyAxis:
    """The ``verify`` probe of :class:`~logitlab.experiments.invariance.InvarianceProbe` (a mixin: it uses the
    probe's ``config``, ``on_event``, ``_checked`` and ``_detokenize``)."""

    def _verify(self, result: InvarianceResult, engine: Engine) -> InvarianceResult:
        """M=1 greedy decode vs M=K verify blocks (K = :data:`VERIFY_K`, at most ``n_decode``) on the probe's
        engine: one check of ``n_decode`` rows, each ``(n_vocab,)`` float32.

        Raises:
            InputError: the engine has no sessions; ``n_decode`` < :data:`MIN_TOKENS`.
            EngineCrashed: the engine died (the probe's verdict ``crashed``).
        """
        cfg, ids = self.config, result.prompt_ids
        check_at_least("--tokens", cfg.n_decode, MIN_TOKENS, "the verify axis scores greedy tokens in blocks of K")
        engine.require("sessions", "the verify axis (decode of K tokens in a session)")
        k = min(VERIFY_K, cfg.n_decode)
        self.on_event("start", {"steps": 2})
        reference = call_engine(engine, greedy_m1, ids, cfg.n_decode, phase="M=1 greedy")
        self.on_event("step", {"what": "M=1 greedy"})
        observed, _ = call_engine(engine, replay_mk, ids, reference.tokens, k, phase=f"verify blocks M={k}")
        self.on_event("step", {"what": f"M={k} verify"})
        n_blocks = -(-cfg.n_decode // k)
        details = {"k": k, "row_offset": len(ids), "blocks": n_blocks,
                   "exercised": f"M=1: {cfg.n_decode} decode calls of 1 row; M={k}: {n_blocks} decode calls of up to "
                                f"{k} rows (row i: position {len(ids)} + i)"}
        result.checks.append(self._checked(
            f"M={k} vs M=1", "M=1 greedy decode, one token per decode call",
            f"the same greedy tokens in verify blocks of {k} (one call per block)", reference.decode_rows, observed,
            cfg, reference.tokens, details))
        result.details = {"k": k, "generated_text": self._detokenize(reference.tokens)}
        return result
