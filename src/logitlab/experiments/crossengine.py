"""Checks for an ``ab`` whose control and candidate run on different engines (or models).

Two engines can only be compared position by position if they see the same
token ids and score the same vocabulary:

- :func:`check_tokenizers`: both tokenizers must give identical ids for the
  prompt (the decode tokens are the control's greedy ids, replayed as ids);
  otherwise an :class:`~logitlab.errors.InputError` names the first differing
  position and both tokens.
- :func:`common_vocab`: equal logit widths are compared as they are; unequal
  ones on their common prefix (token ids ``0..n-1`` of the smaller), with a
  note saying so.
- :func:`cross_engine_notes`: what the report must say about comparing two
  engines' arithmetic (the verdict words were made for variants of one engine).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from logitlab.engines.base import Engine
from logitlab.engines.variant import Variant
from logitlab.errors import InputError


def needs_check(control: Variant, candidate: Variant) -> bool:
    """True when the two variants may tokenize differently: other engine, other model, or another target
    (the ``--engine NAME:TARGET`` part: another server URL, another command)."""
    from logitlab.engines import engine_class

    if control.engine != candidate.engine or (control.model or None) != (candidate.model or None):
        return True
    target = engine_class(control.engine).TARGET_OPTION
    return target is not None and control.options.get(target) != candidate.options.get(target)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where two id lists differ (a length difference counts), else None."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def check_tokenizers(control: Engine, candidate: Engine, text: str) -> list[int]:
    """The prompt's token ids, identical on both engines.

    Returns:
        The control's ids (equal to the candidate's).

    Raises:
        InputError: the ids differ; the message names the first differing position,
            both ids and their text, and both lengths.
    """
    a, b = control.tokenize(text), candidate.tokenize(text)
    index = first_difference(a, b)
    if index is None:
        return a

    def token(engine: Engine, ids: list[int]) -> str:
        if index >= len(ids):
            return "end of prompt"
        try:
            return f"id {ids[index]} {engine.detokenize([ids[index]])!r}"
        except Exception:  # a detokenizer that rejects a lone id
            return f"id {ids[index]}"

    raise InputError(
        f"the tokenizers differ on the prompt at token position {index}: control ({control.name}) has "
        f"{token(control, a)}, candidate ({candidate.name}) has {token(candidate, b)} "
        f"({len(a)} vs {len(b)} tokens); cross-engine ab needs identical token ids: use the same model files, "
        "or a prompt both engines tokenize alike"
    )


def vocab_note(n_control: int, n_candidate: int) -> str | None:
    """The loud line about unequal vocabularies, or None when they match (or one is unknown: 0)."""
    if n_control == n_candidate or min(n_control, n_candidate) <= 0:
        return None
    common = min(n_control, n_candidate)
    return (f"VOCABULARY SIZES DIFFER: control has {n_control} logits per position, candidate {n_candidate}; "
            f"only the common prefix, token ids 0..{common - 1}, is compared (the other "
            f"{abs(n_control - n_candidate)} ids are ignored, and KLD is over the common prefix)")


def common_vocab(reference: np.ndarray, observed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays cut to their common vocabulary prefix, ``(n_positions, min(n_vocab))``."""
    common = min(reference.shape[1], observed.shape[1])
    return reference[:, :common], observed[:, :common]


def cross_engine_notes(control: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """Notes for two engines' ``describe()`` dicts (none when they are the same engine)."""
    if control.get("engine") == candidate.get("engine"):
        return []

    def what(d: dict[str, Any]) -> str:
        parts = [d.get("engine_version", d.get("engine", "?"))]
        if d.get("model_kind"):
            parts.append(d["model_kind"])
        effective = d.get("effective", {})
        if "dtype" in effective:
            parts.append(f"{effective['dtype']} activations")
        return ", ".join(parts)

    notes = [f"cross-engine comparison: control = {what(control)}; candidate = {what(candidate)}."]
    arithmetic = [d.get("arithmetic") for d in (control, candidate)]
    if all(arithmetic) and arithmetic[0] != arithmetic[1]:
        notes.append(
            f"The two engines do different arithmetic on the same GGUF: {arithmetic[0]}, {arithmetic[1]}. "
            "Logits are expected to differ beyond rounding noise; KLD and top-1 agreement say by how much. A verdict "
            "above near-tie here is evidence of that arithmetic difference, not by itself evidence of a bug in "
            "either engine.")
    else:
        notes.append("Different engines compute in different orders and precisions: differences beyond rounding "
                     "noise are expected; judge them by KLD and top-1 agreement.")
    return notes
