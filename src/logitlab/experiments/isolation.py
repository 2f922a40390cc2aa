"""Run one slot of the workload at an isolation level.

- ``session``: one engine per variant, loaded once; a fresh session per slot.
- ``engine``: a fresh engine object per slot, in this process.
- ``process``: each slot in its own Python subprocess with the variant's
  environment — the only honest level for knobs an engine reads at start-up
  (most ``GGML_*`` variables), and for state that outlives an engine object.

Engine loading is never inside a timed region.

Faults of a slot: a worker that crashes (a non-zero exit, or a signal such as
SIGSEGV or SIGABRT from the engine's native code) raises an
:class:`~logitlab.errors.EngineCrashed` whose evidence names the slot, the
phase and the signal; with a slot timeout, a worker still running after it is
killed — with every process it started (its own process group) — and the
crash says it hung. The experiment records the crash as that run's outcome
(:mod:`logitlab.experiments.ab`). At ``session`` and ``engine`` isolation the
slots of an in-process engine run in its supervised worker
(:mod:`logitlab.engines.supervised`), which a timeout kills the same way; an
engine that runs out of process by itself (``cmd``, ``openai``) has its own
``timeout=`` option there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from logitlab.engines import engine_class, engine_target
from logitlab.engines.base import Engine, StepTiming
from logitlab.engines.crash import CrashEvidence, read_phase
from logitlab.engines.supervised import is_supervised, load_supervised  # noqa: F401  (re-exported)
from logitlab.engines.variant import Variant
from logitlab.errors import EngineCrashed, EngineError, InputError
from logitlab.engines.workload import RunOutput, environment, run_workload

from logitlab.experiments.isolation_levels import ISOLATION_LEVELS, stronger_isolation  # noqa: F401  (re-exported)


def load_engine(variant: Variant) -> Engine:
    """Load the variant's engine with its environment knobs set during loading."""
    with environment(variant.env):
        return engine_class(variant.engine)(model=variant.model, options=dict(variant.options))


class SlotRunner:
    """Runs slots of the workload for named variants at one isolation level.

    Use as a context manager; engines kept for ``session`` isolation are
    closed on exit.
    """

    def __init__(self, variants: dict[str, Variant], isolation: str, *, slot_timeout: float | None = None):
        if isolation not in ISOLATION_LEVELS:
            raise InputError(f"unknown isolation {isolation!r}; valid: {', '.join(ISOLATION_LEVELS)}")
        check_slot_timeout(slot_timeout, isolation)
        self.variants = variants
        self.isolation = isolation
        self.slot_timeout = slot_timeout
        self._engines: dict[str, Engine] = {}

    def __enter__(self) -> "SlotRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def adopt(self, label: str, engine: Engine) -> None:
        """Use an already loaded engine for ``label``: ``session`` isolation runs every slot on it; ``engine``
        isolation, when it is a supervised engine, runs each slot on a fresh engine object in its worker."""
        self._engines[label] = engine

    def adopted(self, label: str) -> bool:
        """Whether the runner holds (and will close) an engine for ``label``."""
        return label in self._engines

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()

    def run(self, label: str, prompt_ids: Sequence[int], n_decode: int, replay: Sequence[int] | None, *,
            slot: int | None = None) -> RunOutput:
        """Run the workload once for variant ``label`` (``slot``: its index, for messages).

        Raises:
            EngineError: the engine failed, or the process-isolated slot crashed or passed the slot timeout.
        """
        variant = self.variants[label]
        if self.isolation == "process":
            return run_in_subprocess(variant, prompt_ids, n_decode, replay, timeout=self.slot_timeout, slot=slot)
        if self.isolation == "session":
            engine = self._engines.get(label) or self._engines.setdefault(label, load_engine(variant))
            with environment(variant.env):
                return run_workload(engine, prompt_ids, n_decode, replay)
        supervised = self._engines.get(label)
        if is_supervised(supervised):  # a fresh engine object in the supervised worker
            return supervised.run_workload(prompt_ids, n_decode, replay, fresh=True)
        engine = load_engine(variant)
        try:
            with environment(variant.env):
                return run_workload(engine, prompt_ids, n_decode, replay)
        finally:
            engine.close()


def check_slot_timeout(timeout: float | None, isolation: str, variants: Sequence[Variant] = ()) -> None:
    """Raise InputError unless ``timeout`` is None or positive seconds that can stop every variant's slots: at
    ``session`` and ``engine`` isolation the supervised worker is killed, which an engine that runs out of
    process by itself (the ``workload`` ability: ``cmd``, ``openai``) does not have."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InputError(f"--slot-timeout must be positive seconds, got {timeout!r}")
    if isolation != "process":
        for variant in variants:
            if engine_class(variant.engine).supports("workload"):
                raise InputError(f"--slot-timeout at --isolation {isolation} stops a supervised in-process engine; "
                                 f"the {variant.engine} engine runs out of process by itself: give it its own "
                                 "timeout= option, or use --isolation process")


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's process group (the worker and whatever it started); only while the worker is not
    yet reaped, so that its pid, the group's id, cannot have been reused."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _crash_hint(variant: Variant) -> str | None:
    """The engine's :meth:`~logitlab.engines.base.Engine.crash_hint` for the variant's options (None on any error:
    a hint never hides the crash)."""
    try:
        cls = engine_class(variant.engine)
        return cls.crash_hint(cls.validate_options(dict(variant.options)))
    except Exception:  # noqa: BLE001 - the crash is the finding; a hint that fails is left out
        return None


def run_in_subprocess(
    variant: Variant, prompt_ids: Sequence[int], n_decode: int, replay: Sequence[int] | None, *,
    timeout: float | None = None, slot: int | None = None,
) -> RunOutput:
    """Run the workload in a fresh ``python -m logitlab.experiments.worker``, in its own process group.

    Parameters
    ----------
    timeout : float, optional
        Seconds the slot may take (loading included); past it the worker's
        process group is killed (SIGKILL).
    slot : int, optional
        The slot's index, named in error messages.

    Raises:
        EngineCrashed: the subprocess was killed by a signal, exited non-zero without an ``error:`` line of
            the engine's own, passed ``timeout`` (then its group was killed), or wrote no result; its
            ``evidence`` names the slot, the phase, the status and the stderr tail.
        EngineError: the engine refused the run (its ``error:`` line), or the result cannot be read.
    """
    what = f"{variant.label} slot" + (f" {slot}" if slot is not None else "")
    with tempfile.TemporaryDirectory(prefix="logitlab-slot-") as folder:
        request = Path(folder) / "request.json"
        request.write_text(json.dumps({
            "variant": variant.to_dict(),
            "engine_target": engine_target(variant.engine),
            "prompt_ids": list(map(int, prompt_ids)),
            "n_decode": n_decode,
            "replay": None if replay is None else list(map(int, replay)),
            "out": folder,
        }))
        env = {**os.environ, **variant.env}
        proc = subprocess.Popen(
            [sys.executable, "-m", "logitlab.experiments.worker", str(request)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            errors="replace", start_new_session=True,
        )
        hung = None
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            _, stderr = proc.communicate()
            hung = f"hung: killed after --slot-timeout {timeout:g} s with every process it started"
        except BaseException:  # Ctrl-C: the worker is in its own session and got no SIGINT; do not leave it running
            _kill_group(proc)
            proc.wait()
            raise
        result_path = Path(folder) / "result.json"
        if hung or proc.returncode != 0 or not result_path.exists():
            lines = (stderr or "").splitlines()
            if not hung and proc.returncode > 0 and lines and lines[-1].startswith("error: "):
                raise EngineError(f"{what}: {lines[-1][len('error: '):]}")  # the engine refused: not a crash
            evidence = CrashEvidence.of_process(proc.returncode, hung, read_phase(Path(folder) / "phase"), lines,
                                                variant.engine, {}, lambda: _crash_hint(variant))
            evidence.slot, evidence.variant = slot, variant.label
            raise EngineCrashed(f"{evidence.summary()} in its subprocess"
                                + (f"; {evidence.hint}" if evidence.hint else ""), evidence=evidence)
        try:
            result = json.loads(result_path.read_text())
            logits = np.load(Path(folder) / "logits.npy")
        except (OSError, ValueError) as exc:
            raise EngineError(f"{what}: its subprocess exited 0 but its result cannot be read ({exc})") from None
    return RunOutput(
        logits=logits,
        input_ids=result["input_ids"],
        generated=result["generated"],
        timings=[StepTiming(**t) for t in result["timings"]],
        topk=_topk_from(result.get("topk")),
        scoring=result.get("scoring"),
    )


def _topk_from(data: dict | None):
    if data is None:
        return None
    from logitlab.engines.topk import TopKRows

    return TopKRows.from_dict(data)
