"""Run one slot of the workload at an isolation level.

- ``session``: one engine per variant, loaded once; a fresh session per slot.
- ``engine``: a fresh engine object per slot, in this process.
- ``process``: each slot in its own Python subprocess with the variant's
  environment — the only honest level for knobs an engine reads at start-up
  (most ``GGML_*`` variables), and for state that outlives an engine object.

Engine loading is never inside a timed region.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from logitlab.engines import engine_class, engine_target
from logitlab.engines.base import Engine, StepTiming
from logitlab.engines.variant import Variant
from logitlab.errors import EngineError, InputError
from logitlab.engines.workload import RunOutput, environment, run_workload

from logitlab.experiments.isolation_levels import ISOLATION_LEVELS, stronger_isolation  # re-exported


def load_engine(variant: Variant) -> Engine:
    """Load the variant's engine with its environment knobs set during loading."""
    with environment(variant.env):
        return engine_class(variant.engine)(model=variant.model, options=dict(variant.options))


class SlotRunner:
    """Runs slots of the workload for named variants at one isolation level.

    Use as a context manager; engines kept for ``session`` isolation are
    closed on exit.
    """

    def __init__(self, variants: dict[str, Variant], isolation: str):
        if isolation not in ISOLATION_LEVELS:
            raise InputError(f"unknown isolation {isolation!r}; valid: {', '.join(ISOLATION_LEVELS)}")
        self.variants = variants
        self.isolation = isolation
        self._engines: dict[str, Engine] = {}

    def __enter__(self) -> "SlotRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def adopt(self, label: str, engine: Engine) -> None:
        """Use an already loaded engine for ``label`` (``session`` isolation only)."""
        self._engines[label] = engine

    def adopted(self, label: str) -> bool:
        """Whether the runner holds (and will close) an engine for ``label``."""
        return label in self._engines

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()

    def run(self, label: str, prompt_ids: Sequence[int], n_decode: int, replay: Sequence[int] | None) -> RunOutput:
        """Run the workload once for variant ``label``.

        Raises:
            EngineError: the engine failed, or the process-isolated slot crashed.
        """
        variant = self.variants[label]
        if self.isolation == "process":
            return run_in_subprocess(variant, prompt_ids, n_decode, replay)
        if self.isolation == "session":
            engine = self._engines.get(label) or self._engines.setdefault(label, load_engine(variant))
            with environment(variant.env):
                return run_workload(engine, prompt_ids, n_decode, replay)
        engine = load_engine(variant)
        try:
            with environment(variant.env):
                return run_workload(engine, prompt_ids, n_decode, replay)
        finally:
            engine.close()


def run_in_subprocess(
    variant: Variant, prompt_ids: Sequence[int], n_decode: int, replay: Sequence[int] | None
) -> RunOutput:
    """Run the workload in a fresh ``python -m logitlab.experiments.worker``.

    Raises:
        EngineError: the subprocess exited non-zero (its last stderr lines are
            in the message) or wrote no result.
    """
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
        proc = subprocess.run(
            [sys.executable, "-m", "logitlab.experiments.worker", str(request)],
            env=env, capture_output=True, text=True,
        )
        result_path = Path(folder) / "result.json"
        if proc.returncode != 0 or not result_path.exists():
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:]) or "no stderr"
            raise EngineError(
                f"{variant.label} slot crashed in its subprocess (exit {proc.returncode}): {tail}"
            )
        result = json.loads(result_path.read_text())
        logits = np.load(Path(folder) / "logits.npy")
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
