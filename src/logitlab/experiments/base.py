"""The lifecycle every experiment shares: progress events, the run log, and partial results on errors and Ctrl-C.

An experiment class derives from :class:`Experiment`, names its result kind
(``KIND``) and the result fields its run log's end line leaves out
(``LOG_END_EXCLUDE``: those the header or the run lines already hold), and
runs its measuring part through :meth:`Experiment.measure`:

- progress leaves through ``self.on_event(kind, data)`` (:mod:`logitlab.events`);
- the run log (:mod:`logitlab.runlog`) is opened with :meth:`~Experiment.open_log`,
  fed with :meth:`~Experiment.log_run` / :meth:`~Experiment.log_update`, and
  ended by ``measure`` — ``complete``, ``error`` or ``interrupted`` — with the
  fields computed at the end, then closed;
- a :class:`~logitlab.errors.LogitlabError` raised while measuring leaves with
  the result measured so far as its ``partial`` (and ``result.error`` set), and
  Ctrl-C becomes an :class:`~logitlab.errors.Interrupted` carrying it, so that
  the command line writes every report before it says what stopped the run
  (:func:`logitlab.cli.common.finish`).

A crash of the engine under test is not an error: the engines an experiment
loads with :meth:`~Experiment.load` run supervised
(:mod:`logitlab.engines.supervised`: in a worker process that logitlab
outlives) and are closed by :meth:`~Experiment.close_engines`; an
:class:`~logitlab.errors.EngineCrashed` raised while measuring goes to
``measure``'s ``on_crash``, which records the experiment's ``crashed`` outcome
on the result (an experiment that goes on after a crash, as ``ab`` does slot by
slot, catches it itself where it can go on).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, ClassVar

from logitlab.errors import EngineCrashed, Interrupted, LogitlabError
from logitlab.events import Event, ignore_event
from logitlab.lazy import preload_statistics
from logitlab.runlog import RunLog

__all__ = ["Experiment"]


class Experiment:
    """Base of the experiments: ``on_event``, the run log, and :meth:`measure`.

    Attributes
    ----------
    KIND : str
        The result kind, the run log's ``kind`` (the result class's ``KIND``).
    LOG_END_EXCLUDE : tuple of str
        Top-level result fields the end line leaves out.
    on_event : Event
        Progress callback (:func:`~logitlab.events.ignore_event` by default).
    log_path : Path or None
        The run log's file; None: no run log.
    config : Any
        What the experiment runs (its config dataclass), validated on construction; None: none given.
    """

    KIND: ClassVar[str]
    LOG_END_EXCLUDE: ClassVar[tuple[str, ...]] = ("config", "manifest", "kind", "schema_version")

    def __init__(self, config: Any = None, *, on_event: Event | None = None, log_path: str | Path | None = None):
        """Keep ``config`` after its ``validate()`` (which raises InputError naming the bad value), the progress
        callback and the run log's path."""
        if config is not None:
            config.validate()
        self.config = config
        self.on_event = on_event or ignore_event
        self.log_path = Path(log_path) if log_path else None
        self._runlog: RunLog | None = None
        self._engines: list[Any] = []

    # -- the engines under test ------------------------------------------------------
    def load(self, variant: Any, *, timeout: float | None = None,
             loader: Callable[[Any], Any] | None = None) -> Any:
        """The variant's engine, loaded supervised (or by ``loader``), to be closed by :meth:`close_engines`.

        ``timeout``: seconds a run may take before the supervised worker is killed (a crash with status
        ``hung``). An in-process engine loads in its worker while this process goes on: its first call waits
        for the load (and raises what the load raised).

        Raises:
            InputError: bad options (before any process starts).
            EngineCrashed: ``loader`` loaded it here and it died (a supervised load reports that on first use).
        """
        if loader is None:
            from logitlab.engines.supervised import load_supervised

            engine = load_supervised(variant, timeout=timeout)
        else:
            engine = loader(variant)
        self._engines.append(engine)
        return engine

    def release(self, engine: Any) -> None:
        """Close one engine :meth:`load` returned, now (before the experiment ends: a probe done with it)."""
        self._engines.remove(engine)
        engine.close()

    def close_engines(self) -> None:
        """Close every engine :meth:`load` returned (idempotent); call it in the experiment's ``finally``."""
        engines, self._engines = self._engines, []
        for engine in engines:
            engine.close()

    # -- the run log ----------------------------------------------------------------
    def open_log(self, header: dict[str, Any]) -> None:
        """Start the run log with ``header`` (nothing without ``log_path``).

        Raises:
            InputError: the file cannot be written (:class:`~logitlab.runlog.RunLog`).
        """
        if self.log_path is not None:
            self._runlog = RunLog(self.log_path, self.KIND, header)

    @property
    def has_log(self) -> bool:
        """Whether a run log is open (so that lines costly to build are built only then)."""
        return self._runlog is not None

    def log_run(self, line: dict[str, Any]) -> None:
        """Append one finished run's line (nothing without a run log)."""
        if self._runlog is not None:
            self._runlog.run(line)

    def log_update(self, **fields: Any) -> None:
        """Append header fields learned during the run (nothing without a run log)."""
        if self._runlog is not None:
            self._runlog.update(**fields)

    def _end_log(self, how: str, result: Any) -> None:
        """The end line, with every result field computed at the end; a failing write here hides no error."""
        if self._runlog is None:
            return
        final = {k: v for k, v in result.to_dict().items() if k not in self.LOG_END_EXCLUDE}
        try:
            self._runlog.end(how, final, error=result.error)
        except LogitlabError:
            pass

    def close_log(self) -> None:
        """Close the run log (idempotent); call it in the experiment's ``finally``."""
        if self._runlog is not None:
            self._runlog.close()

    # -- the measuring part ------------------------------------------------------------
    def measure(self, result: Any, body: Callable[[], None], *,
                on_stop: Callable[[Any], None] | None = None,
                on_crash: Callable[[Any, EngineCrashed], None] | None = None) -> Any:
        """Run ``body()``, which fills ``result``; end the run log with how it went; return ``result``.

        ``on_stop(result)`` (optional) completes what can be computed from a
        partial result (a verdict over the slots measured) before the log's end
        line is written. ``on_crash(result, crash)`` (optional) records an
        engine crash that stopped ``body`` as the experiment's outcome (its
        ``crashed`` verdict and evidence); the run then ends ``complete``:
        a crash of the engine under test is a result. Without it a crash is
        an error like any other.

        Raises:
            LogitlabError: what ``body`` raised, with ``partial`` = ``result``
                and ``result.error`` its message.
            Interrupted: on Ctrl-C, with ``partial`` = ``result`` and
                ``result.error`` = ``"interrupted"``.
        """
        try:
            try:
                preload_statistics()  # before the first slot: a Ctrl-C must not land in the import the analysis needs
                body()
            except EngineCrashed as crash:
                if on_crash is None:
                    raise
                on_crash(result, crash)
        except LogitlabError as exc:
            result.error = str(exc)
            exc.partial = result
            self._stop(on_stop, result)
            self._end_log("error", result)
            raise
        except KeyboardInterrupt:
            result.error = "interrupted"
            self._stop(on_stop, result)
            self._end_log("interrupted", result)
            raise Interrupted("interrupted", partial=result) from None
        self._end_log("complete", result)
        return result

    @staticmethod
    def _stop(on_stop: Callable[[Any], None] | None, result: Any) -> None:
        """``on_stop(result)``; what stopped the run stays the error reported, even when this fails or a
        second Ctrl-C stops it (the partial result is then as measured, without what ``on_stop`` adds)."""
        if on_stop is None:
            return
        try:
            on_stop(result)
        except (Exception, KeyboardInterrupt):  # noqa: BLE001 - the first error is the one to report
            pass
