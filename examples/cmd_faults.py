"""Faults a ``cmd`` reference engine plants into its own logits, for tests and the detection-limit bracket.

Shared by ``llamacpp_cmd_engine.py`` and ``hf_cmd_engine.py`` (each reads its
own prefix: ``LLAMACPP_CMD_`` or ``HF_CMD_``). Both variables act after the
run, so the greedy choices the engine made are unchanged:

``<PREFIX>PERTURB=P:SIZE``  every logit of row P gets SIZE × a standard normal
                            seeded by P, like a kernel branch that is wrong at one position.
``<PREFIX>PLANT=SHAPE:P:SIZE[:TOKEN]``  one of the detection-limit shapes of
                            ``logitlab.numerics.detection`` at row P: ``argmax-up`` /
                            ``argmax-down`` (the row's argmax logit ± SIZE), ``tail-up``
                            (its median-ranked logit + SIZE), ``row-noise`` (as PERTURB);
                            TOKEN: move that token's logit instead.
"""

from __future__ import annotations

import numpy as np

SHAPES = ("argmax-up", "argmax-down", "tail-up", "row-noise")


class FaultError(ValueError):
    """A fault variable that does not parse; its message is the engine's ``error:`` line."""


def _noise(row: int, vocab: int) -> np.ndarray:
    return np.random.default_rng(row).standard_normal(vocab).astype(np.float32)


def parse_faults(environ: dict[str, str], prefix: str, rows: int) -> tuple[tuple | None, tuple | None]:
    """The faults ``environ`` names, checked against a run of ``rows`` positions: ``(perturb, plant)``.

    ``perturb`` is ``(row, size)`` or None; ``plant`` is ``(shape, row, size, tokens)`` or None. An engine
    calls it before it loads (``cmd_protocol.read_workload``), so a malformed variable is an error at once.

    Raises:
        FaultError: a variable is malformed, names an unknown shape, or a row outside the run.
    """
    perturb = environ.get(f"{prefix}PERTURB", "")
    parsed_perturb = None
    if perturb:
        try:
            row, size = perturb.split(":")
            parsed_perturb = (int(row), float(size))
        except ValueError:
            raise FaultError(f"{prefix}PERTURB={perturb!r} is not POSITION:SIZE") from None
    plant = environ.get(f"{prefix}PLANT", "")
    if not plant:
        return parsed_perturb, None
    try:
        shape, row, size, *chosen = plant.split(":")
        row, size = int(row), np.float32(size)
        chosen = [int(t) for t in chosen]
    except ValueError:
        raise FaultError(f"{prefix}PLANT={plant!r} is not SHAPE:POSITION:SIZE[:TOKEN]") from None
    if shape not in SHAPES or not 0 <= row < rows:
        raise FaultError(f"{prefix}PLANT={plant!r}: SHAPE is {', '.join(SHAPES)}, POSITION 0..{rows - 1}")
    return parsed_perturb, (shape, row, size, chosen)


def plant_faults(logits: np.ndarray, environ: dict[str, str], prefix: str) -> None:
    """Plant the faults ``environ`` names into ``logits`` (``(rows, vocab)`` float32, changed in place).

    Raises:
        FaultError: as :func:`parse_faults`.
    """
    perturb, plant = parse_faults(environ, prefix, len(logits))
    if perturb is not None:
        row, size = perturb
        if 0 <= row < len(logits):
            logits[row] += np.float32(size) * _noise(row, logits.shape[1])
    if plant is None:
        return
    shape, row, size, chosen = plant
    if shape == "row-noise":
        logits[row] += size * _noise(row, logits.shape[1])
        return
    # the token logitlab.numerics.detection moves is the reference's; here it is the run's own unless TOKEN says
    mid = logits.shape[1] // 2
    token = int(np.argpartition(logits[row], mid)[mid]) if shape == "tail-up" else int(np.argmax(logits[row]))
    token = chosen[0] if chosen else token
    logits[row, token] += -size if shape == "argmax-down" else size
