"""Subprocess entry point for a process-isolated slot.

``python -m logitlab.experiments.worker REQUEST.json`` imports the variant's
engine class from the ``"module:Class"`` the parent resolved (so engines
registered at run time work too), loads it (its environment was set by the parent), runs the workload, and writes
``logits.npy`` and ``result.json`` into the request's ``out`` folder. A
failure exits non-zero with one line on stderr. Before each engine call it
writes its phase (``load``, ``prefill``, ``decode step N``) into the folder's
``phase`` file, and :mod:`faulthandler` prints the Python stack of a native
crash on stderr: the parent's evidence of a crash.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import sys
from pathlib import Path

import numpy as np

from logitlab.engines import import_engine
from logitlab.engines.supervised_worker import phase_writer
from logitlab.errors import LogitlabError
from logitlab.engines.workload import run_workload


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    variant = request["variant"]
    faulthandler.enable(file=sys.stderr, all_threads=True)
    phase = phase_writer(str(Path(request["out"]) / "phase"))
    try:
        phase("load")
        engine_cls = import_engine(request["engine_target"], variant["engine"])
        engine = engine_cls(model=variant["model"], options=variant["options"])
        try:
            output = run_workload(engine, request["prompt_ids"], request["n_decode"], request["replay"],
                                  on_step=lambda kind, step: phase(
                                      "prefill" if kind == "prefill" else f"decode step {step}"))
            phase("returning the run")
        finally:
            engine.close()
    except LogitlabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(request["out"])
    np.save(out / "logits.npy", output.logits)
    (out / "result.json").write_text(json.dumps({
        "input_ids": output.input_ids,
        "generated": output.generated,
        "timings": [dataclasses.asdict(t) for t in output.timings],
        "topk": None if output.topk is None else output.topk.to_dict(),
        "scoring": output.scoring,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
