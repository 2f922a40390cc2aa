"""Supervised engines: an in-process engine run in a worker process that the harness outlives.

An engine under test may crash — a kernel that reads out of bounds, a build flag
that enables a broken path (llama.cpp's AMX weight repacking on batched
evaluation), an out-of-memory kill. Run in logitlab's own process, such a crash
ends logitlab and loses every result measured before it. :class:`SupervisedEngine`
loads the engine in one long-lived worker (:mod:`logitlab.engines.supervised_worker`)
and offers what a whole-run experiment needs of it (tokenize, describe, run the
workload); a run's logits come back through ``/dev/shm``: a small run through the
worker's logits buffer, one file that both processes map for the worker's whole life
(the worker gathers the rows into it, this process copies them out: one copy across
the boundary); a large one (over :data:`KEEP_BUFFER_BYTES`) in a file of its own that
the worker writes and this process then keeps, mapped, as the run's array (no copy:
the run is held once, :meth:`SupervisedEngine.run_workload`); once nothing views it,
the next run of its size is written into the same pages (:mod:`logitlab.engines.run_files`).
An experiment that drives the engine step by step (sessions, verify blocks,
batches, dump capture) runs each step there: :func:`call_engine` with a
module-level function of the engine, its result pickled back.

When the worker dies — a signal, an abort, a non-zero exit, or a run past its
``timeout`` (then the worker's process group is killed) — the call raises
:class:`~logitlab.errors.EngineCrashed` with a :class:`~logitlab.engines.crash.CrashEvidence`: the phase
(load, prefill, decode step N, tokenize), the exit status or signal, the tail of
the worker's stderr with the Python stack :mod:`faulthandler` printed, the
engine's build identity and a hint where the engine knows one
(:meth:`~logitlab.engines.base.Engine.crash_hint`). The next call starts a new
worker, which loads the engine again (a crash in that load is a crash too).

An adapter whose libraries are slow to import names them in its ``PRELOAD`` (``hf``: PyTorch and
transformers); its workers are then forked from a fork server that imported them once under the worker's
environment (:mod:`logitlab.engines.forkserver`: 1.2 s a worker instead of 5.5 s), seen here as a
:class:`subprocess.Popen` is; where no server can be reached, a new process as for any engine.

Engines that already run out of process (the ``workload`` ability: ``cmd``,
``openai``) are not supervised: :func:`supervise` returns them as they are.
"""

from __future__ import annotations

import base64
import json
import mmap
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from logitlab.engines import forkserver
from logitlab.engines.base import Engine, StepTiming
from logitlab.engines.call_buffers import OUT_OF_BAND_BYTES, map_buffers
from logitlab.engines.crash import CrashEvidence, read_phase
from logitlab.engines.run_files import RUN_FILES, KeptRun, keep_file
from logitlab.engines.spill import SPILL_BYTES, spill_folder
from logitlab.engines.worker_folders import new_folder, remove_folder, write_owner
from logitlab.errors import EngineCrashed, EngineError, InputError, InternalError, LogitlabError

__all__ = ["SupervisedEngine", "supervise", "load_supervised", "call_engine", "engine_supports", "is_supervised",
           "close_now"]

#: Seconds a worker has to exit after ``close`` before it is killed.
CLOSE_TIMEOUT = 10.0
#: A run's logits larger than this (bytes) are not copied out of the worker's logits buffer: the worker writes
#: them into a file of their own that this process keeps as the run's array (a long prompt's run is held once,
#: never twice, not even while it crosses); smaller runs go through the buffer, whose pages are kept for the next
#: run (allocating them again costs about 1.2 ms per MB on a 2-core machine: 30 ms for 121 × 49,152 logits).
KEEP_BUFFER_BYTES = 64 << 20
def _reap(proc: subprocess.Popen | None, folder: Path | None, streams: Sequence[Any]) -> None:
    """Wait for a closing worker (kill its group after :data:`CLOSE_TIMEOUT`), close its pipes, remove its folder."""
    if proc is not None:
        try:
            proc.wait(timeout=CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            SupervisedEngine._kill(proc)
            proc.wait()
        streams = (proc.stdin, *streams)
    for stream in streams:
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    if folder is not None:
        remove_folder(folder)


class SupervisedEngine:
    """An engine loaded in a worker process: a crash there is an :class:`~logitlab.errors.EngineCrashed` here.

    Offers the part of the :class:`~logitlab.engines.base.Engine` contract a whole-run experiment uses:
    ``name``, ``model``, ``options``, ``load_seconds``, :meth:`supports` (``workload`` and ``logits``),
    :meth:`require`, :meth:`tokenize`, :meth:`detokenize`, ``n_vocab``, ``n_ctx``, :meth:`describe`,
    :meth:`run_workload`, :meth:`crash_hint` and :meth:`close`; a step that needs sessions, batches or
    another ability of the adapter runs in the worker through :meth:`call_in_worker` (:func:`call_engine`).

    Args:
        engine_cls: the adapter class (it is imported again in the worker by its ``"module:Class"``).
        target: ``"module:Class"`` of the adapter.
        model: the model path (None: the engine's default).
        options: engine options, validated here before any process starts.
        timeout: seconds a run may take before the worker is killed and the run is a crash (None: none).

    The worker loads while this process goes on (two engines constructed one after the other load side by
    side); the first call that needs the engine waits for its load, and raises what the load raised.

    Raises:
        InputError: bad options (here, before any process starts); from the first call: what the engine's load
            raised.
        EngineError: from the first call: the engine failed to load.
        EngineCrashed: from the first call: the worker died while loading.
    """

    def __init__(self, engine_cls: type[Engine], target: str, model: str | None, options: dict[str, Any], *,
                 timeout: float | None = None):
        self.engine_cls = engine_cls
        self.target = target
        self.name = engine_cls.name
        self.OPTIONS = engine_cls.OPTIONS  # the adapter's option table, for messages that name an option
        self.options = engine_cls.validate_options(dict(options))
        self._raw_options = dict(options)
        self.model = model
        self.timeout = timeout
        self._proc: subprocess.Popen | None = None
        self._folder: Path | None = None
        self._runs = 0
        self.restarts = 0
        self._loaded_answer: dict[str, Any] = {}
        self._pending = False
        self._closed = False
        self._start()

    # -- the contract ---------------------------------------------------------------------------------
    ABILITIES = frozenset({"workload", "logits"})

    def supports(self, ability: str) -> bool:
        """``workload`` always; ``logits`` when the engine returns full logits; nothing else (no sessions here).

        Raises:
            InputError: an unknown ability.
        """
        known = self.engine_cls.supports(ability)  # validates the name
        return ability == "workload" or (ability == "logits" and known)

    def require(self, ability: str, what: str) -> None:
        """Raise the adapter's InputError unless it has ``ability`` (in its worker: a step that needs sessions,
        batches or rollback runs there through :func:`call_engine`)."""
        self.engine_cls.require(ability, what)

    @property
    def _loaded(self) -> dict[str, Any]:
        """The worker's answer to the load (waited for on first use)."""
        if self._pending:
            try:
                try:
                    self._loaded_answer = self._read(self._proc, None)
                except EngineCrashed:
                    if not self._not_forked:
                        raise
                    self._start(fork=False)  # its fork server ended or refused before forking it: a new process
                    self._loaded_answer = self._read(self._proc, None)
            except KeyboardInterrupt:
                self._abandon()
                raise
            finally:
                self._pending = False
            write_owner(self._folder, self._proc.pid)
            if self.model is None:
                self.model = self._loaded_answer.get("model")
        return self._loaded_answer

    @property
    def load_seconds(self) -> float:
        return float(self._loaded.get("load_seconds", 0.0))

    @property
    def n_vocab(self) -> int:
        return int(self._loaded["n_vocab"])

    @property
    def n_ctx(self) -> int | None:
        return self._loaded.get("n_ctx")

    def describe(self) -> dict[str, Any]:
        return {**self._loaded["describe"], "supervised": True}

    def crash_hint(self, options: dict[str, Any]) -> str | None:
        return self.engine_cls.crash_hint(options)

    def tokenize(self, text: str) -> list[int]:
        return self._ask({"op": "tokenize", "text": text})["ids"]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._ask({"op": "detokenize", "ids": [int(t) for t in tokens]})["text"]

    def run_workload(self, prompt_ids: Sequence[int], n_decode: int, replay: Sequence[int] | None = None, *,
                     fresh: bool = False) -> Any:
        """Run the workload in the worker (:func:`~logitlab.engines.workload.run_workload` there).

        ``fresh``: on a new engine object in the worker, closed after the run. A worker that died in an
        earlier call is started again first (and loads the engine again).

        Returns:
            A :class:`~logitlab.engines.workload.RunOutput` whose ``logits`` (n_positions, n_vocab) float32 are a
            copy out of the worker's buffer for a small run, and for one over :data:`KEEP_BUFFER_BYTES` a view of
            a mapped file: a new one, or the kept file of an earlier run of the same size that nothing views any
            more, written again (:mod:`logitlab.engines.run_files`).

        Raises:
            EngineCrashed: the worker died, or the run passed ``timeout``.
            InputError, EngineError: what the engine raised.
        """
        from logitlab.engines.topk import TopKRows
        from logitlab.engines.workload import RunOutput

        self._ensure()
        self._runs += 1
        positions = len(prompt_ids) + int(n_decode)
        held = self._held_file(positions)  # a kept file of an earlier run to write this one into (run_files.py)
        own = self._own_file(positions, held is not None)
        answered = used = False
        try:
            answer = self._ask({"op": "run", "prompt_ids": [int(t) for t in prompt_ids], "n_decode": int(n_decode),
                                "replay": None if replay is None else [int(t) for t in replay], "fresh": fresh,
                                "options": self._raw_options, "own_file": None if own is None else str(own),
                                "reuse_file": None if held is None else held.proc_path},
                               timeout=self.timeout)
            answered = True
            shape = tuple(answer["shape"])
            if held is not None and answer.get("reused"):
                logits, used = held.array(shape), True
            elif answer.get("own_file") is None:
                logits = self._take_logits(shape)
            else:
                logits = keep_file(Path(answer["own_file"]), shape)
        except BaseException:
            if own is not None:
                own.unlink(missing_ok=True)
            raise
        finally:
            if held is not None and not used:
                # the worker is done with it once it answered or is gone; else (Ctrl-C while the request was
                # being sent) it may still write into it: never handed out again
                done = answered or self._proc is None or self._proc.poll() is not None
                (RUN_FILES.put_back if done else RUN_FILES.forget)(held)
        topk = answer.get("topk")
        return RunOutput(logits=logits, input_ids=answer["input_ids"], generated=answer["generated"],
                         timings=[StepTiming(**t) for t in answer["timings"]],
                         topk=None if topk is None else TopKRows.from_dict(topk), scoring=answer.get("scoring"))

    def _run_bytes(self, positions: int) -> int | None:
        """Bytes of a run of ``positions`` rows' logits (None: the engine does not say its vocabulary)."""
        try:
            return positions * self.n_vocab * 4
        except (KeyError, TypeError):
            return None

    def _held_file(self, positions: int) -> KeptRun | None:
        """A free kept run file of the size of a run of ``positions`` rows, to write it into (the other free ones
        are closed first, so the space check of :meth:`_own_file` sees their room); for a run that goes through
        the buffer, every free one is closed (:mod:`logitlab.engines.run_files`)."""
        need = self._run_bytes(positions)
        if need is None or need <= KEEP_BUFFER_BYTES:
            RUN_FILES.release()
            return None
        return RUN_FILES.take(need)

    def _own_file(self, positions: int, held: bool = False) -> Path | None:
        """The file a run of ``positions`` rows is to be written into and kept from (None: the logits buffer, copied
        out): a run over :data:`KEEP_BUFFER_BYTES` whose logits fit the free space of the worker's folder (its
        width is the engine's vocabulary; ``/dev/shm`` is a RAM file system whose size is capped, by default at
        half the memory: a run that would not fit it goes through the buffer, as before). ``held``: a kept file
        of the run's size is to be written instead, which needs no room (the path is the worker's fallback)."""
        need = self._run_bytes(positions)
        if need is None or need <= KEEP_BUFFER_BYTES:  # no vocabulary said, or small: through the buffer
            return None
        if held:
            return self._folder / f"run-{self._runs}.f32"
        try:
            free = os.statvfs(self._folder)
        except OSError:
            return None
        if free.f_bavail * free.f_frsize < need:
            return None
        return self._folder / f"run-{self._runs}.f32"

    def _take_logits(self, shape: tuple[int, int]) -> np.ndarray:
        """A run's logits, copied out of the worker's logits buffer (mapped here once, again when it grew).

        Returns:
            A new float32 array of ``shape`` (n_positions, n_vocab), owned by this process.
        """
        need = int(np.prod(shape)) * 4
        if self._buffer is None or len(self._buffer) < need:
            with open(self._folder / "logits.f32", "r+b") as f:
                self._buffer = mmap.mmap(f.fileno(), 0)
        logits = np.frombuffer(self._buffer, dtype=np.float32, count=int(np.prod(shape))).reshape(shape).copy()
        if need > KEEP_BUFFER_BYTES and hasattr(mmap, "MADV_REMOVE"):  # (Linux) a large run's pages are given
            try:                                                       # back: memory, not time, is short then
                self._buffer.madvise(mmap.MADV_REMOVE, 0, len(self._buffer))
            except OSError:  # a file system that cannot free a range: the pages stay until the worker ends
                pass
        return logits

    def call_in_worker(self, fn: Callable[..., Any], *args: Any, phase: str,
                       on_event: Callable[[str, Any], None] | None = None) -> Any:
        """``fn(engine, *args)`` run in the worker on its engine, and its return value.

        For experiments that drive the engine step by step (sessions, verify blocks, batches): the whole step
        runs in the worker, so its timings are the engine's own and a crash in it is an
        :class:`~logitlab.errors.EngineCrashed` here with ``phase`` (for example ``verify M=4 (prompt p1)``).
        ``fn`` is a module-level function (imported in the worker by name); ``args`` and the return value are
        pickled through one file each in the worker's folder (``/dev/shm`` where it exists), but for the return
        value's array buffers over :data:`~logitlab.engines.call_buffers.OUT_OF_BAND_BYTES`: each in an unlinked
        file of its own, on disk where the spill folder has room, that the returned array maps
        (:mod:`~logitlab.engines.call_buffers`). With ``on_event``,
        ``fn`` is called with ``on_event=`` a function whose calls come back here, in order, while it runs
        (progress: each event's data is pickled).

        Raises:
            EngineCrashed: the worker died, or the call passed ``timeout``.
            InputError, EngineError: what ``fn`` raised; EngineError too where an array's file cannot be mapped.
        """
        self._ensure()
        self._runs += 1
        RUN_FILES.release()  # a step allocates as it likes: no dropped run's pages wait beside it
        request, out = self._folder / f"call-{self._runs}.in", self._folder / f"call-{self._runs}.out"
        request.write_bytes(pickle.dumps(args, protocol=pickle.HIGHEST_PROTOCOL))
        # the return value's large arrays: in files of their own, on disk where it can (call_buffers.py)
        spilled = spill_folder(max(OUT_OF_BAND_BYTES, SPILL_BYTES) + 1)
        try:
            answer = self._ask({"op": "call", "fn": f"{fn.__module__}:{fn.__qualname__}", "args": str(request),
                                "out": str(out), "phase": phase, "events": on_event is not None,
                                "spill": None if spilled is None else str(spilled)},
                               timeout=self.timeout, on_event=on_event)
            return pickle.loads(out.read_bytes(), buffers=map_buffers(answer.get("buffers", [])))
        finally:
            request.unlink(missing_ok=True)
            out.unlink(missing_ok=True)

    def close(self, wait: bool = False) -> None:
        """Ask the worker to close the engine and exit, and return; a thread waits for it (killing it after
        :data:`CLOSE_TIMEOUT`) and removes its folder. ``wait``: wait here instead. The kept run files nothing
        views are closed last (:mod:`logitlab.engines.run_files`)."""
        try:
            self._closed = True
            buffer, self._buffer = getattr(self, "_buffer", None), None
            if buffer is not None:
                buffer.close()  # every run was copied out of it: no view of it is left
            proc, self._proc = self._proc, None
            folder, self._folder = self._folder, None
            if proc is not None and proc.poll() is None:
                try:
                    proc.stdin.write(json.dumps({"op": "close"}) + "\n")
                    proc.stdin.flush()
                except (OSError, ValueError):
                    self._kill(proc)
            if proc is None and folder is None:
                return
            streams = (getattr(self, "_answers", None), getattr(self, "_stderr", None))
            if wait:
                _reap(proc, folder, streams)
            else:
                threading.Thread(target=_reap, args=(proc, folder, streams), daemon=True).start()
        finally:
            RUN_FILES.release()

    def __del__(self) -> None:
        try:
            self.close(wait=True)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- the worker -----------------------------------------------------------------------------------
    def _start(self, fork: bool = True) -> None:
        if self._folder is None:
            self._folder = new_folder()
        read_fd, write_fd = os.pipe()
        self._stderr = open(self._folder / "stderr.log", "w+b")
        # the worker imports the adapter by "module:Class": it gets this process's import path, so that an
        # engine registered at run time from any importable module loads there too
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(
            paths + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))}
        argv = [str(write_fd), str(self._folder / "phase")]
        try:
            self._proc, self._not_forked = None, False
            if fork and self.engine_cls.PRELOAD and forkserver.enabled():  # forked, the adapter's libraries imported
                try:
                    self._proc = forkserver.fork_worker(self.engine_cls.PRELOAD, argv, env, self._stderr.fileno(),
                                                        write_fd)
                except OSError:  # no server to reach: a new process, as for any engine
                    self._proc = None
            if self._proc is None:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "logitlab.engines.supervised_worker", *argv],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._stderr, pass_fds=(write_fd,),
                    text=True, start_new_session=True, env=env)
        finally:
            os.close(write_fd)
        # a forked worker's pid is known once the server forked it (after its imports, for its first worker):
        # this process alone is named until the load's answer (a folder of a live owner is never swept)
        write_owner(self._folder, self._proc.pid if isinstance(self._proc, subprocess.Popen) else None)
        self._answers = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = None  # the worker's logits buffer, mapped on its first run
        self._pending_bytes = b""
        self._send({"op": "load", "target": self.target, "name": self.name, "model": self.model,
                    "options": self._raw_options})
        self._pending = True

    def _send(self, request: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None:
            raise InternalError("the supervised engine was closed")
        try:
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._crashed(proc, None) from None

    def _ensure(self) -> None:
        """A worker that died in an earlier call is started again (it loads the engine again); then the load's
        answer is waited for (and what it raised is raised)."""
        if self._proc is None and not self._closed:
            self.restarts += 1
            self._start()
        self._loaded  # noqa: B018 - the load's answer first (raises what it raised)

    def _ask(self, request: dict[str, Any], timeout: float | None = None,
             on_event: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
        """Send ``request`` and read its answer. Ctrl-C while waiting ends the worker (:meth:`_abandon`): the
        answer still to come would be read as the next request's, and the work it stopped may take long."""
        self._ensure()
        self._send(request)
        try:
            return self._read(self._proc, timeout, on_event)
        except KeyboardInterrupt:
            self._abandon()
            raise

    def _abandon(self) -> None:
        """Kill the worker whose answer Ctrl-C left unread (not a crash: no evidence); the next call starts a new
        worker, which loads the engine again."""
        proc, self._proc, self._pending = self._proc, None, False
        if proc is not None:
            self._kill(proc)
            _reap(proc, None, (getattr(self, "_answers", None), getattr(self, "_stderr", None)))

    def _read(self, proc: subprocess.Popen, timeout: float | None,
              on_event: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
        """The worker's next answer (its event lines before it go to ``on_event``); raises what it reports, or
        EngineCrashed when it dies or passes ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            while b"\n" not in self._pending_bytes:  # lines are split here: a select sees only what is unread
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                ready, _, _ = select.select([self._answers], [], [], wait)
                if not ready:
                    self._kill(proc)
                    raise self._crashed(proc, f"hung: killed after {timeout:g} s") from None
                chunk = os.read(self._answers.fileno(), 1 << 16)
                if not chunk:
                    raise self._crashed(proc, None) from None  # EOF: the worker is gone
                self._pending_bytes += chunk
            line, _, self._pending_bytes = self._pending_bytes.partition(b"\n")
            answer = json.loads(line)
            if "event" not in answer:
                break
            if on_event is not None:
                on_event(answer["event"], pickle.loads(base64.b64decode(answer["data"])))
        if answer.get("ok"):
            return answer
        kinds = {"InputError": InputError, "EngineError": EngineError, "LogitlabError": LogitlabError}
        raise kinds.get(answer.get("type"), InternalError)(answer.get("message", "the engine failed"))

    def _crashed(self, proc: subprocess.Popen, hung: str | None) -> EngineCrashed:
        if hung is None and isinstance(proc, forkserver.ForkedWorker) and proc.never_started():
            self._not_forked = True  # no worker ever ran: not a crash of the engine (the load starts it afresh)
        try:
            code = proc.wait(timeout=CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            code = proc.wait()
        self._proc, self._pending = None, False
        _reap(None, None, (proc.stdin, getattr(self, "_answers", None), getattr(self, "_stderr", None)))
        try:
            lines = (self._folder / "stderr.log").read_bytes().decode("utf-8", "replace").splitlines()
        except OSError:
            lines = []
        evidence = CrashEvidence.of_process(code, hung, read_phase(self._folder / "phase"), lines, self.name,
                                            self._loaded_answer.get("describe") or {},
                                            lambda: self.engine_cls.crash_hint(self.options))
        return EngineCrashed(f"the {self.name} engine crashed in {evidence.phase} ({evidence.status})",
                             evidence=evidence)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            if isinstance(proc, forkserver.ForkedWorker):
                proc.killpg()  # (before it is forked: its server, which may be importing still)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        except OSError:  # gone already
            pass



def close_now(engine: Any) -> None:
    """Close ``engine``; a :class:`SupervisedEngine`'s worker is waited for (its group killed after
    :data:`CLOSE_TIMEOUT` s), so that its memory is free when this returns. Closing twice is a no-op."""
    if isinstance(engine, SupervisedEngine):
        engine.close(wait=True)
    else:
        engine.close()


def engine_supports(engine: Any, ability: str) -> bool:
    """Whether the engine has ``ability`` where it runs: a supervised engine's adapter in its worker
    (:meth:`SupervisedEngine.supports` answers only for what it offers here)."""
    cls = getattr(engine, "engine_cls", None) if is_supervised(engine) else None
    return cls.supports(ability) if cls is not None else engine.supports(ability)


def is_supervised(engine: Any) -> bool:
    """Whether ``engine`` is a :class:`SupervisedEngine` (or a wrapper that passes its attributes on, as a sweep's
    engine cache does)."""
    return callable(getattr(engine, "call_in_worker", None))


def call_engine(engine: Any, fn: Callable[..., Any], *args: Any, phase: str,
                on_event: Callable[[str, Any], None] | None = None) -> Any:
    """``fn(engine, *args)``: here for an engine in this process, in the worker for a :class:`SupervisedEngine`
    (see :meth:`SupervisedEngine.call_in_worker`; ``phase`` names the step in a crash's evidence; ``on_event``,
    when given, is passed to ``fn`` as ``on_event=``).

    Raises:
        EngineCrashed: a supervised engine's worker died in the call; what ``fn`` raised.
    """
    if is_supervised(engine):
        return engine.call_in_worker(fn, *args, phase=phase, on_event=on_event)
    return fn(engine, *args) if on_event is None else fn(engine, *args, on_event=on_event)


def load_supervised(variant: Any, *, timeout: float | None = None) -> Any:
    """Load a :class:`~logitlab.engines.variant.Variant`'s engine supervised: an in-process engine in a worker
    process started with the variant's environment knobs (a crash there is an EngineCrashed here); an engine
    that runs out of process by itself as it is (:func:`supervise`).

    ``timeout``: seconds a run (or a call) may take before the worker is killed and the run is a crash.

    Raises:
        InputError: bad options, before any process starts. EngineCrashed: the worker died while loading.
    """
    from logitlab.engines import engine_class, engine_target
    from logitlab.engines.workload import environment

    with environment(variant.env):
        return supervise(engine_class(variant.engine), engine_target(variant.engine), variant.model,
                         dict(variant.options), timeout=timeout)


def supervise(engine_cls: type[Engine], target: str, model: str | None, options: dict[str, Any], *,
              timeout: float | None = None) -> Any:
    """The engine loaded supervised (a :class:`SupervisedEngine`), or in this process when it already runs out
    of process (the ``workload`` ability).

    Raises:
        InputError, EngineError: as the engine's load; EngineCrashed: the worker died while loading.
    """
    if engine_cls.supports("workload"):
        return engine_cls(model=model, options=dict(options))
    return SupervisedEngine(engine_cls, target, model, options, timeout=timeout)
