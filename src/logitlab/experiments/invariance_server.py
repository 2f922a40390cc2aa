"""The server probes of the invariance matrix: what a server returns for the same request under other conditions.

Two probes, each R runs of one request compared as ``determinism`` compares
its runs (run 1 the reference; K distinct arrays and K distinct greedy texts of
R runs; each distinct one compared with run 1 up to its first different greedy
token), on the top-k log-probabilities the server returns:

``concurrent`` (engine ability ``concurrent-requests``)
    run 1 alone, runs 2..R each while N other requests (other prompts) are in
    flight on the server's other slots
    (:meth:`~logitlab.engines.base.Engine.background_requests`); each run is
    the engine's whole workload (greedy generation, then the teacher-forced
    scoring of every position), after one discarded run so that every compared
    run starts from the prefix cache that run leaves.
``prefix-cache`` (engine ability ``prefix-cache``)
    run 1 a cache miss (the server evaluates the whole prompt), runs 2..R the
    same request again with the prefix cache on (the prompt's prefix taken
    from the request before); compared on the generation's own rows (row t:
    the distribution that chose decode step t,
    :meth:`~logitlab.engines.base.Engine.greedy_request`).

An engine without the slots or the switch these need raises
:class:`AxisUnavailable` before anything runs; the matrix lists the axis as
skipped with its message. :class:`ServerProbes` is a mixin of
:class:`~logitlab.experiments.invariance.InvarianceProbe`, which dispatches to it.
"""

from __future__ import annotations

import json
from typing import Any

from logitlab.engines.topk import TopKRows
from logitlab.engines.workload import RunOutput, environment, run_workload
from logitlab.errors import InputError
from logitlab.experiments.invariance_results import Check, InvarianceResult
from logitlab.numerics import classify
from logitlab.numerics.topk import compare_topk

__all__ = ["SERVER_PROBES", "AxisUnavailable", "ServerProbes"]

#: The probes of this module (also in :data:`~logitlab.experiments.invariance_results.PROBES`).
SERVER_PROBES = ("concurrent", "prefix-cache")


class AxisUnavailable(InputError):
    """The engine declares the probe's ability but cannot run it here (a server with one slot; a server without a
    per-request prefix-cache switch): the matrix lists the axis as skipped with this message."""


class ServerProbes:
    """The ``concurrent`` and ``prefix-cache`` probes, methods of
    :class:`~logitlab.experiments.invariance.InvarianceProbe` (its config, events, ``_texts``, ``_detokenize`` and
    ``_compare_runs``)."""

    def _concurrent(self: Any, result: InvarianceResult, engine: Any) -> InvarianceResult:
        cfg, ids = self.config, result.prompt_ids
        try:
            engine.background_requests(cfg.background)  # checks the slots; nothing runs until entered
        except InputError as exc:
            raise AxisUnavailable(str(exc)) from None
        self.on_event("start", {"steps": cfg.runs + 1})
        with environment(cfg.variant.env):
            run_workload(engine, ids, cfg.n_decode, None)
        self.on_event("step", {"what": "warm-up run"})
        outputs: list[RunOutput] = []
        self._outputs = outputs  # compared as they stand if the runs are stopped
        loads = []
        for index in range(cfg.runs):
            with environment(cfg.variant.env):
                if index == 0:
                    outputs.append(run_workload(engine, ids, cfg.n_decode, None))
                else:
                    with engine.background_requests(cfg.background) as load:
                        outputs.append(run_workload(engine, ids, cfg.n_decode, None))
                    loads.append(load.summary())
            generated = tuple(outputs[-1].generated)
            if generated not in self._texts:
                self._texts[generated] = self._detokenize(list(generated))
            self.on_event("step", {"what": f"run {index + 1}" + (" alone" if index == 0 else " under load")})
        self._compare_runs(result, outputs)
        result.details.update({"alone": [1], "under_load": list(range(2, cfg.runs + 1)),
                               "background": cfg.background, "loads": loads})
        failed = [error for load in loads for error in load["errors"]]
        if failed:
            result.notes.append(f"{len(failed)} background request thread(s) failed, the runs after it had fewer "
                                f"requests beside them: {failed[0]}")
        return result

    def _prefix_cache(self: Any, result: InvarianceResult, engine: Any) -> InvarianceResult:
        cfg, ids = self.config, result.prompt_ids
        self.on_event("start", {"steps": cfg.runs})
        runs: list[tuple[list[int], TopKRows]] = []
        for index in range(cfg.runs):
            try:
                runs.append(engine.greedy_request(ids, cfg.n_decode, prefix_cache=index > 0))
            except InputError as exc:
                if index:
                    raise
                raise AxisUnavailable(str(exc)) from None
            generated = tuple(runs[-1][0])
            if generated not in self._texts:
                self._texts[generated] = self._detokenize(list(generated))
            self.on_event("step", {"what": f"run {index + 1}: " + ("hit" if index else "miss")})
        self._compare_requests(result, runs)
        result.details.update({"miss": [1], "hit": list(range(2, cfg.runs + 1))})
        return result

    def _compare_requests(self: Any, result: InvarianceResult, runs: list[tuple[list[int], TopKRows]]) -> None:
        """``prefix-cache``'s checks: each distinct run (ids and rows) against run 1, on the generation's rows up to
        and with the row that chose its first different token (decode step t is row t)."""
        cfg, ids = self.config, result.prompt_ids
        groups: dict[str, list[int]] = {}
        texts: dict[tuple[int, ...], list[int]] = {}
        for index, (generated, rows) in enumerate(runs):
            key = json.dumps([generated, rows.to_dict()], sort_keys=True)
            groups.setdefault(key, []).append(index + 1)
            texts.setdefault(tuple(generated), []).append(index + 1)
        first, reference = runs[0]
        compared = list(groups.values())[1:] or ([list(range(2, len(runs) + 1))] if len(runs) > 1 else [])
        for members in compared:
            generated, rows = runs[members[0] - 1]
            diverge = next((t for t, (a, b) in enumerate(zip(first, generated)) if a != b), None)
            n_rows = min(len(reference.keys), len(rows.keys), len(first) if diverge is None else diverge + 1)
            comparison = compare_topk(reference.head(n_rows), rows.head(n_rows), top_k=cfg.top_k,
                                      token_ids=([ids[-1]] + list(first))[:n_rows])
            same = len(groups) == 1
            name = f"runs 2..{len(runs)}" if same else f"runs {', '.join(map(str, members))}"
            observed = (f"{name} (all identical)" if same else f"run {members[0]}, a hit" +
                        ("" if diverge is None else f" (compared up to its first different greedy token, decode "
                                                    f"step {diverge})"))
            details = {"runs": members, "first_differing_token": diverge, "rows_compared": n_rows,
                       "same_text": diverge is None, "decode_steps": True}  # row t chose decode step t
            result.checks.append(Check(name, "run 1, a miss (the whole prompt evaluated)", observed, comparison,
                                       classify(comparison, cfg.thresholds), details))
        result.notes.append(f"the server returns the top-{reference.requested_k} log-probabilities of each generated "
                            "token: the requests are compared on those (row t: decode step t), not on full logits, "
                            "and no detection limit is measured")
        result.details = {"runs": len(runs), "distinct_logits": len(groups), "distinct_texts": len(texts),
                          "logit_groups": list(groups.values()),
                          "text_groups": [{"runs": r, "text": self._texts[g]} for g, r in texts.items()]}
