"""Engines a sweep worker keeps loaded between jobs.

A big model takes minutes to load; the jobs of one sweep share the control
and often a candidate. A worker (a process of the local pool, a Ray actor)
keeps up to ``capacity`` engines, least recently used first out, and hands
them to the experiments wrapped so that an experiment's ``close()`` leaves
them loaded. Each slot still gets a fresh session (``session`` isolation), so
a job sees what it would see with an engine of its own; the A/A of every
``ab`` job checks exactly that.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from logitlab.engines.base import Engine
from logitlab.engines.variant import Variant
from logitlab.experiments.isolation import load_supervised

__all__ = ["EngineCache", "variant_key"]


def variant_key(variant: Variant) -> str:
    """What makes two variants load the same engine: engine, model, options and environment (not the label)."""
    return json.dumps([variant.engine, variant.model, sorted((k, str(v)) for k, v in variant.options.items()),
                       sorted(variant.env.items())])


class _Kept:
    """A cached engine as an experiment sees it: every attribute is the engine's, ``close()`` does nothing."""

    def __init__(self, engine: Engine):
        object.__setattr__(self, "_engine", engine)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def close(self) -> None:
        """The cache closes the engine when it evicts it."""


class EngineCache:
    """Up to ``capacity`` loaded engines, keyed by :func:`variant_key`.

    Use one job at a time: ``with cache.job() as job: ... cache.load(variant)``.
    Engines loaded during a job stay until the job ends, even beyond
    ``capacity``; then the least recently used are closed down to
    ``capacity`` (0: every engine is closed after its job). A job that
    failed (``job.failed = True``) closes the engines it used: an engine that
    crashed or raised is not handed to the next job.
    """

    def __init__(self, capacity: int = 2):
        self.capacity = capacity
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._used: set[str] = set()
        self.loads = 0  # engines loaded so far
        self.hits = 0  # loads avoided

    def load(self, variant: Variant) -> Engine:
        """The variant's engine, loaded now or kept from an earlier job (wrapped: ``close()`` is a no-op).

        Raises:
            LogitlabError: the engine failed to load (see :func:`load_supervised`: an in-process engine is
                loaded in its supervised worker, whose crash in a later job is that job's ``crashed`` result).
        """
        key = variant_key(variant)
        engine = self._engines.get(key)
        if engine is None:
            engine = load_supervised(variant)
            self.loads += 1
            self._engines[key] = engine
        else:
            self.hits += 1
        self._engines.move_to_end(key)
        self._used.add(key)
        return _Kept(engine)  # type: ignore[return-value]

    def job(self) -> "JobScope":
        """A context for one job: on exit, close the engines of a failed job, then trim to ``capacity``."""
        self._used = set()
        return JobScope(self)

    def _end_job(self, failed: bool) -> None:
        if failed:
            for key in self._used:
                engine = self._engines.pop(key, None)
                if engine is not None:
                    engine.close()
        self._used = set()
        while len(self._engines) > self.capacity:
            _, engine = self._engines.popitem(last=False)
            engine.close()

    def close(self) -> None:
        """Close every engine."""
        while self._engines:
            _, engine = self._engines.popitem(last=False)
            engine.close()

    def __len__(self) -> int:
        return len(self._engines)


class JobScope:
    """One job's use of an :class:`EngineCache`; set ``failed`` when the job failed."""

    def __init__(self, cache: EngineCache):
        self.cache = cache
        self.failed = False

    def __enter__(self) -> "JobScope":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.cache._end_job(self.failed or exc_type is not None)
