"""The worker process of a supervised engine (:mod:`logitlab.engines.supervised`).

``python -m logitlab.engines.supervised_worker FD PHASE_FILE`` imports and loads
one engine, then answers requests, one JSON line each on standard input, with
one JSON line each on file descriptor ``FD`` (its own standard output goes to
standard error, so that what native code prints cannot corrupt the answers):

- ``{"op": "load", "target", "name", "model", "options"}`` →
  ``{"ok": true, "describe", "n_vocab", "n_ctx", "load_seconds"}``
- ``{"op": "tokenize", "text"}`` → ``{"ok": true, "ids"}``; ``{"op": "detokenize", "ids"}`` → ``{"ok": true, "text"}``
- ``{"op": "run", "prompt_ids", "n_decode", "replay", "fresh", "own_file", "reuse_file"}`` → the run's token
  ids, timings and the ``shape`` of its logits, which are in the worker's logits buffer (:class:`LogitsBuffer`:
  the file ``logits.f32`` in its folder, float32, C order, from offset 0; the parent maps it once and copies the
  run out), or, where the request names an ``own_file``, in that file (:class:`RunFile`: created for this run,
  float32, C order; the worker no longer maps it when it answers, and the answer's ``own_file`` names it: the
  parent keeps it as the run's array) — or in ``reuse_file``, where the request names one that opens at the
  run's size (the parent's kept file of an earlier run, ``/proc/<pid>/fd/<fd>``: the answer's ``reused`` is
  true and its ``own_file`` null); ``fresh``: on a new engine object, closed after the run (``--isolation
  engine``).
- ``{"op": "call", "fn": "module:function", "args", "out", "phase", "events", "spill"}`` →
  ``{"ok": true, "buffers"}`` after ``function(engine, *args)`` ran, its arguments unpickled from the file
  ``args`` and its return value pickled into the file ``out`` (protocol 5), each array buffer over 64 MiB in an
  unlinked file of its own in the folder ``spill`` (or the worker's own; in the pickle where neither has room)
  kept open until the next request, the
  answer's ``buffers`` naming them in order as ``/proc/<pid>/fd/<fd>`` (:mod:`logitlab.engines.call_buffers`);
  ``phase`` is written as the phase first. With ``events``, the function gets ``on_event=``: each of its calls
  is a line ``{"event": kind, "data": base64 pickle}`` before the answer.
- ``{"op": "close"}`` → ``{"ok": true}``, then the worker removes its folder (the one ``PHASE_FILE`` is in) and
  exits 0. When its standard input ends without a ``close`` — the parent exited or was killed — it removes its
  folder and exits 0 too: a parent that cannot clean up (killed, or its reaping thread cut off at exit) leaves
  nothing behind in ``/dev/shm``. A worker that crashes keeps its folder: the parent reads the evidence there.

An error the engine raises is an answer ``{"ok": false, "type": "InputError" | "EngineError", "message"}``.
Before every engine call the worker writes its phase (``load``, ``prefill``, ``decode step 17``, ``tokenize``)
into ``PHASE_FILE``; a crash leaves it there for the parent, with the Python stack that :mod:`faulthandler`
prints on SIGSEGV, SIGFPE, SIGABRT, SIGBUS and SIGILL in standard error.
"""

from __future__ import annotations

import base64
import dataclasses
import faulthandler
import importlib
import json
import mmap
import os
import pickle
import shutil
import sys
from typing import Any

import numpy as np


def phase_writer(path: str):
    """A function that overwrites ``path`` with a phase (200 bytes, padded): the last one stays after a crash.

    The file is mapped shared, so a phase is a memory write, not a system call (one per decode step); the
    kernel keeps what was written when the process dies.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, b" " * 200)
    mapped = mmap.mmap(fd, 200)
    os.close(fd)

    def write(phase: str) -> None:
        mapped[:200] = phase.encode()[:200].ljust(200)

    return write


class LogitsBuffer:
    """The worker's logits buffer: one file mapped for the worker's whole life, grown to the largest run.

    A run's rows go into it (float32, C order, from offset 0) and the parent copies them out of its own
    mapping of the same file: the pages are allocated once, not per run. For 121 × 49,152 logits on a
    2-core machine, gathering the rows and handing them over took 30 ms with a new file per run (tmpfs
    page allocation, mapping and freeing), 5.3 ms through this buffer, and 3.4 ms to gather them in one
    process (a micro-benchmark of the copies alone). In a whole run, with the engine's own allocations,
    ``benchmarks/bench_overhead.py`` measured 12.1 ms outside the engine's timed steps supervised against
    20.2 ms in process.
    """

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.size = 0
        self._map: mmap.mmap | None = None

    def array(self, shape: tuple[int, int]) -> np.ndarray:
        """A float32 view of shape ``shape`` on the buffer's first bytes (the file grows when it must; an older,
        smaller mapping stays alive while a view of it does)."""
        need = max(1, int(np.prod(shape)) * 4)
        if need > self.size:
            os.ftruncate(self.fd, need)
            self._map = mmap.mmap(self.fd, need)
            self.size = need
        return np.frombuffer(self._map, dtype=np.float32, count=int(np.prod(shape))).reshape(shape)


def remove_folder(phase_file: str) -> None:
    """Remove the worker's folder (the one ``phase_file`` is in) if it is a supervised engine's folder: the
    worker is done with it and the parent no longer needs it (closed, or gone)."""
    from logitlab.engines.worker_folders import FOLDER_PREFIX

    folder = os.path.dirname(os.path.abspath(phase_file))
    if os.path.basename(folder).startswith(FOLDER_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)


class RunFile:
    """One run's logits in a file of its own (``own_file`` of a run request): created at the run's size, mapped
    while the engine writes the rows into it, unmapped before the answer, so that the parent's mapping is then
    the only one (it keeps the file as the run's array: no copy, and no second buffer of the run here).

    With ``reuse`` (``reuse_file`` of the request: ``/proc/<parent>/fd/<fd>``, an unlinked file of an earlier run
    that the parent keeps, :mod:`logitlab.engines.run_files`), the rows go into that file when it opens and has
    the run's size, its existing pages mapped at once (``MAP_POPULATE``): no page is allocated or zeroed.
    :attr:`reused` says which file was written.
    """

    def __init__(self, path: str, reuse: str | None = None):
        self.path = path
        self.reuse = reuse
        self.reused = False
        self._map: mmap.mmap | None = None

    def _reuse(self, need: int) -> mmap.mmap | None:
        """The parent's file mapped here, or None (it cannot be opened, e.g. ``/proc`` access refused, or it is
        not ``need`` bytes)."""
        try:
            fd = os.open(self.reuse, os.O_RDWR)
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size != need:
                return None
            return mmap.mmap(fd, need, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        except OSError:
            return None
        finally:
            os.close(fd)

    def array(self, shape: tuple[int, int]) -> np.ndarray:
        """A float32 view of shape ``shape`` on the file, made at that size (once per run)."""
        need = int(np.prod(shape)) * 4
        if self.reuse and need:
            self._map = self._reuse(need)
            if self._map is not None:
                self.reused = True
                return np.frombuffer(self._map, dtype=np.float32, count=int(np.prod(shape))).reshape(shape)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, need)
            self._map = mmap.mmap(fd, need) if need else None
        finally:
            os.close(fd)
        if self._map is None:
            return np.empty(shape, dtype=np.float32)
        return np.frombuffer(self._map, dtype=np.float32, count=int(np.prod(shape))).reshape(shape)

    def close(self) -> None:
        """Unmap the file (every view of it must be gone: the run is the parent's now)."""
        if self._map is not None:
            self._map.close()
            self._map = None


def main(argv: list[str]) -> int:
    out_fd, phase_file = int(argv[0]), argv[1]
    buffer = LogitsBuffer(os.path.join(os.path.dirname(phase_file), "logits.f32"))
    answers = os.fdopen(out_fd, "w", buffering=1)
    os.dup2(2, 1)  # native code's prints go to stderr, never into the answers
    faulthandler.enable(file=sys.stderr, all_threads=True)
    phase = phase_writer(phase_file)

    from logitlab.engines import import_engine
    from logitlab.engines.workload import run_workload
    from logitlab.engines.call_buffers import OutOfBand
    from logitlab.errors import LogitlabError

    engine: Any = None
    engine_cls: Any = None
    request: dict[str, Any] = {}
    held: OutOfBand | None = None  # the last call's array files, open until the parent has mapped them

    def answer(data: dict[str, Any]) -> None:
        answers.write(json.dumps(data) + "\n")

    try:
        for line in sys.stdin:
            request = json.loads(line)
            op = request["op"]
            if held is not None:  # the parent asks again: it has mapped them (or given up on them)
                held.close()
                held = None
            try:
                if op == "load":
                    phase("load")
                    engine_cls = import_engine(request["target"], request["name"])
                    engine = engine_cls(model=request["model"], options=request["options"])
                    answer({"ok": True, "describe": engine.describe(), "n_vocab": int(engine.n_vocab),
                            "n_ctx": engine.n_ctx, "load_seconds": engine.load_seconds, "model": engine.model})
                elif op == "tokenize":
                    phase("tokenize")
                    answer({"ok": True, "ids": [int(t) for t in engine.tokenize(request["text"])]})
                elif op == "detokenize":
                    phase("detokenize")
                    answer({"ok": True, "text": engine.detokenize(request["ids"])})
                elif op == "run":
                    target = engine
                    if request.get("fresh"):
                        phase("load")
                        target = engine_cls(model=engine.model, options=request["options"])
                    shape = (len(request["prompt_ids"]) + request["n_decode"], int(target.n_vocab))
                    # the rows are gathered into the buffer the parent maps (it copies them out: the one copy across
                    # the boundary), or into a file of the run's own that the parent keeps (no copy)
                    own = RunFile(request["own_file"], request.get("reuse_file")) if request.get("own_file") else None
                    into = own or buffer
                    mapped = None if target.supports("workload") else into.array(shape)
                    try:
                        output = run_workload(target, request["prompt_ids"], request["n_decode"], request["replay"],
                                              on_step=lambda kind, step: phase(
                                                  "prefill" if kind == "prefill" else f"decode step {step}"),
                                              out=mapped)
                    finally:
                        if target is not engine:
                            target.close()
                    phase("returning the run")
                    if mapped is None:  # an engine that ran the workload itself: its array, written once
                        mapped = into.array(output.logits.shape)
                        mapped[...] = output.logits
                    shape = list(mapped.shape)
                    del mapped
                    output.logits = np.empty((0, 0), dtype=np.float32)  # the last view of the run's rows here
                    if own is not None:
                        try:
                            own.close()
                        except BufferError:  # a view of the rows outlived the run here: unmapped when it goes
                            pass
                    reused = own is not None and own.reused
                    answer({"ok": True, "shape": shape, "own_file": None if own is None or reused else own.path,
                            "reused": reused,
                            "input_ids": output.input_ids,
                            "generated": output.generated, "timings": [dataclasses.asdict(t) for t in output.timings],
                            "topk": None if output.topk is None else output.topk.to_dict(), "scoring": output.scoring})
                elif op == "call":
                    phase(request["phase"])
                    module, _, name = request["fn"].partition(":")
                    fn = importlib.import_module(module)
                    for part in name.split("."):
                        fn = getattr(fn, part)
                    with open(request["args"], "rb") as f:
                        args = pickle.load(f)

                    def emit(kind: str, data: Any) -> None:
                        answers.write(json.dumps({"event": kind, "data": base64.b64encode(
                            pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")}) + "\n")

                    value = fn(engine, *args, on_event=emit) if request.get("events") else fn(engine, *args)
                    phase("returning the call")
                    # the array files stay open until the next request (the parent maps them first), and are
                    # closed then too where the pickling fails after some were written
                    out_of_band = held = OutOfBand(request.get("spill"), os.path.dirname(request["out"]))
                    with open(request["out"], "wb") as f:
                        pickle.dump(value, f, protocol=5, buffer_callback=out_of_band)
                    del value  # the large arrays are in their files now: the parent maps them
                    answer({"ok": True, "buffers": out_of_band.buffers})
                elif op == "close":
                    phase("close")
                    if engine is not None:
                        engine.close()
                    remove_folder(phase_file)
                    try:
                        answer({"ok": True})
                    except OSError:  # the parent exited without waiting for the answer
                        pass
                    return 0
                else:
                    answer({"ok": False, "type": "InternalError", "message": f"unknown request {op!r}"})
                phase("idle")
            except LogitlabError as exc:
                kind = next(c.__name__ for c in type(exc).__mro__ if c.__name__ in ("InputError", "EngineError",
                                                                                     "LogitlabError"))
                answer({"ok": False, "type": kind, "message": str(exc)})
                phase("idle")
        remove_folder(phase_file)  # standard input ended: the parent is gone (or done with this worker)
        return 0
    except BrokenPipeError:  # the parent went while this worker answered or sent an event: nobody reads any more
        remove_folder(phase_file)
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
