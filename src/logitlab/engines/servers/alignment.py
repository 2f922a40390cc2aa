"""Alignment of a server's log-probability rows with the sequence's positions: checked, never assumed.

A server's scoring answer is mapped onto positions by a rule (entry j of an
OpenAI echo is the distribution that chose token j, i.e. position j-1;
llama-cpp-python's echo entry j is position j; a teacher-forced request for
the first i+1 tokens is position i). A server that follows another rule than
the one assumed shifts every row by one position, and the comparison would
then compare each position with its neighbour. Two checks catch that:

:func:`check_named_tokens`
    where the answer names the token each entry scored (vLLM's
    ``prompt_logprobs`` hold the prompt token, SGLang's
    ``input_token_logprobs`` and TGI's ``prefill`` give its id), those
    tokens must be the sequence's, in order.
:func:`check_against_generation`
    the server's own greedy completion returns, for each token it generated,
    the distribution that chose it (the *anchor* rows, from the generation
    path: prompt prefill, then M=1 decode). The scored row at the same
    position must have the same top-1 token wherever the anchor's top1–top2
    gap is at least :data:`CONFIDENT_GAP` nats; the top-1 agreement at a shift
    of -1 and +1 position is measured too, and the error names the shift that
    fits.

Nothing here sends requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from logitlab.engines.topk import Key
from logitlab.errors import EngineError

__all__ = ["CONFIDENT_GAP", "AlignmentCheck", "check_named_tokens", "check_held_tokens", "check_against_generation"]

#: Anchors whose top1–top2 gap (nats) is below this are not used: there the generation path and a
#: scoring path with other batch shapes may legitimately pick another top-1 (llama.cpp, SmolLM2 Q4_1:
#: batched prefill vs M=1 rows differ by up to ~0.3 nats). A shifted row is another position's
#: distribution altogether, so a confident anchor is a strong test.
CONFIDENT_GAP = 1.0

SHIFTS = (-1, 1)


@dataclass(frozen=True)
class AlignmentCheck:
    """The outcome of :func:`check_against_generation`.

    Attributes:
        anchors: anchor rows available (positions of generated tokens with a top-k).
        confident: those with a top1–top2 gap of at least :data:`CONFIDENT_GAP` and a scored row there.
        agree: confident anchors whose top-1 the scored row at the same position has.
        agree_shifted: the same count with the rows shifted by -1 and +1 position.
        positions: the confident anchors' positions.
    """

    anchors: int
    confident: int
    agree: int
    agree_shifted: dict[int, int] = field(default_factory=dict)
    positions: list[int] = field(default_factory=list)

    @property
    def checked(self) -> bool:
        return self.confident > 0

    def to_dict(self) -> dict[str, Any]:
        return {"anchors": self.anchors, "confident": self.confident, "agree": self.agree,
                "agree_shifted": {str(k): v for k, v in self.agree_shifted.items()}, "positions": self.positions,
                "checked": self.checked}

    def sentence(self) -> str:
        """One line for a report."""
        if not self.checked:
            return (f"alignment not checked: none of the {self.anchors} generated tokens had a top1–top2 gap "
                    f"≥ {CONFIDENT_GAP:g} nats")
        shifted = ", ".join(f"{v} at a shift of {k:+d}" for k, v in sorted(self.agree_shifted.items()))
        return (f"alignment checked against the server's greedy completion: top-1 agrees at {self.agree} of "
                f"{self.confident} confident positions ({shifted})")


def _top1(row: Mapping[Key, float]) -> tuple[Key, float | None]:
    ordered = sorted(row.items(), key=lambda kv: -kv[1])
    gap = ordered[0][1] - ordered[1][1] if len(ordered) > 1 else None
    return ordered[0][0], gap


def check_named_tokens(named: Sequence[Key | None], sequence: Sequence[int], *, where: str,
                       text_of: Callable[[int], str] | None = None) -> None:
    """The tokens an answer says its entries scored must be ``sequence``'s, in order.

    Args:
        named: per sequence position, the token the answer says it scored there (None: not said).
        sequence: the token ids sent.
        where: what answered, for the message (e.g. ``"vLLM prompt_logprobs"``).
        text_of: token id -> text, to compare a text the answer gives with an id.

    Raises:
        EngineError: a named token differs; the message gives the first position and says whether
            the named tokens match the sequence shifted by one position.
    """
    def same(key: Key | None, token: int) -> bool:
        if key is None:
            return True
        if isinstance(key, int):
            return key == token
        return text_of is not None and text_of(token) == key

    mismatched = [j for j, key in enumerate(named[:len(sequence)]) if not same(key, sequence[j])]
    if not mismatched:
        return
    j = mismatched[0]
    fits = [s for s in SHIFTS if all(same(key, sequence[i + s]) for i, key in enumerate(named[:len(sequence)])
                                     if 0 <= i + s < len(sequence))]
    hint = f"; they match the sequence shifted by {fits[0]:+d} position" if fits else ""
    raise EngineError(f"{where} does not line up with the tokens sent: at position {j} it names "
                      f"{named[j]!r}, the sequence has {sequence[j]} ({len(mismatched)} of {len(named)} positions "
                      f"differ){hint}; the rows would be compared with the wrong positions")


def check_held_tokens(tops: Sequence[Mapping[Key, float] | None], sequence: Sequence[int], *, where: str) -> None:
    """Entry j of a prompt-scoring list (vLLM's ``prompt_logprobs``) must hold token j of ``sequence``.

    vLLM adds the scored prompt token to each entry's top k, so entry j holds
    ``sequence[j]`` (entry 0 is ``null``). A list shifted by one position holds
    the neighbouring tokens instead.

    Raises:
        EngineError: an entry lacks its token; the message names the first and whether a shift fits.
    """
    def holds(j: int, s: int) -> bool:
        top = tops[j]
        return not top or not 0 <= j + s < len(sequence) or sequence[j + s] in top

    count = min(len(tops), len(sequence))
    missing = [j for j in range(count) if not holds(j, 0)]
    if not missing:
        return
    fits = [s for s in SHIFTS if all(holds(j, s) for j in range(count))]
    hint = f"; they hold the tokens shifted by {fits[0]:+d} position" if fits else ""
    raise EngineError(f"{where} does not line up with the tokens sent: entry {missing[0]} does not hold token "
                      f"{sequence[missing[0]]} ({len(missing)} of {count} entries lack their token){hint}")


def check_against_generation(rows: Sequence[Mapping[Key, float] | None], anchors: Mapping[int, Mapping[Key, float]],
                             *, where: str, text_of: Callable[[int], str] | None = None) -> AlignmentCheck:
    """Compare scored rows with the server's own generation rows at the same positions.

    Args:
        rows: per position, the scored top-k mapping (None where none).
        anchors: position -> the top-k mapping the server's greedy completion returned for the token
            it generated after that position.
        where: the scoring mode, for the message.
        text_of: token id -> text, used when one side keys tokens by id and the other by text.

    Returns:
        The counts (:class:`AlignmentCheck`).

    Raises:
        EngineError: a confident anchor's top-1 is not the scored row's top-1 at the same position;
            the message gives the agreement at shifts -1, 0, +1.
    """
    def same(a: Key, b: Key) -> bool:
        if type(a) is type(b) or text_of is None:
            return a == b
        return (text_of(a) if isinstance(a, int) else a) == (text_of(b) if isinstance(b, int) else b)

    def top1_at(position: int) -> Key | None:
        if 0 <= position < len(rows) and rows[position]:
            return _top1(rows[position])[0]
        return None

    confident = []
    for position, anchor in sorted(anchors.items()):
        if not anchor:
            continue
        token, gap = _top1(anchor)
        if gap is not None and gap >= CONFIDENT_GAP and top1_at(position) is not None:
            confident.append((position, token))
    agree = sum(1 for p, token in confident if same(top1_at(p), token))
    shifted = {s: sum(1 for p, token in confident if top1_at(p + s) is not None and same(top1_at(p + s), token))
               for s in SHIFTS}
    check = AlignmentCheck(anchors=sum(1 for a in anchors.values() if a), confident=len(confident), agree=agree,
                           agree_shifted=shifted, positions=[p for p, _ in confident])
    if agree < len(confident):
        best = max(shifted, key=shifted.get)
        hint = (f"; they agree at {shifted[best]} shifted by {best:+d} position: the rows are off by one"
                if shifted[best] > agree else "")
        first = next(p for p, token in confident if not same(top1_at(p), token))
        raise EngineError(
            f"{where}: the scored rows do not line up with the server's own greedy completion: top-1 agrees at "
            f"{agree} of {len(confident)} positions where the completion was confident (gap ≥ {CONFIDENT_GAP:g} "
            f"nats), first disagreement at position {first}{hint}")
    return check
