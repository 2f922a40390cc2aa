"""The records of ``logitlab explain``: its config, the causes, one evidence bundle per position, the result.

Plain dataclasses, typed until the JSON boundary (:meth:`ExplainResult.to_dict`, ``from_dict``);
:mod:`logitlab.experiments.explain` runs the experiment that fills them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from logitlab.engines.variant import Variant
from logitlab.errors import InputError, check_at_least
from logitlab.jsonio import ResultRecord
from logitlab.numerics import LogitComparison, Thresholds, Verdict

__all__ = ["CAUSES", "MODES", "TIE_BREAK", "ExplainConfig", "ControlCheck", "PositionEvidence", "ExplainResult"]


#: Causes, in the order they are tried.
CAUSES = ("nondeterministic", "tie-break", "bug", "batch-variant", "width-variant", "kernel-path", "near-tie")
#: ``ab``: control vs candidate; ``verify``: M=1 vs M=K of one variant.
MODES = ("ab", "verify")
#: The argmax convention logitlab applies (and numpy, and llama.cpp's greedy sampler).
TIE_BREAK = "the first index wins (the lowest token id among exactly equal top logits)"


@dataclass(frozen=True)
class ExplainConfig:
    """What ``explain`` runs.

    Attributes:
        control: the reference variant (both sides in ``verify`` mode).
        candidate: the observed variant (``ab`` mode); None in ``verify`` mode.
        prompt: prompt text.
        n_decode: greedy decode tokens (8-64 keep it quick).
        k: ``verify`` mode: the verify block size of the pair (M=1 vs M=K); None: ``ab`` mode.
        width_k: K of the M=1 vs M=K control.
        batch: sequences of the alone-vs-in-a-batch control.
        max_positions: explain at most this many positions (the first ones).
        top_k: k of the comparison's top-k statistics and of the listed tops.
        thresholds: verdict thresholds (the floor, its factor).
        dump: locate the first divergent tensor where both engines can dump (``ab`` mode).
    """

    control: Variant
    candidate: Variant | None
    prompt: str
    n_decode: int = 32
    k: int | None = None
    width_k: int = 4
    batch: int = 4
    max_positions: int = 8
    top_k: int = 5
    thresholds: Thresholds = field(default_factory=Thresholds)
    dump: bool = True

    @property
    def mode(self) -> str:
        return "verify" if self.k is not None else "ab"

    def validate(self) -> None:
        """Raise InputError naming the bad value."""
        check_at_least("--tokens", self.n_decode, 1)
        if self.k is not None:
            check_at_least("--k", self.k, 2, "M=1 vs M=K")
            if self.k > self.n_decode:  # as verify --k
                raise InputError(f"--k {self.k} exceeds --tokens {self.n_decode}: a verify block of K rows replays "
                                 "K decoded tokens; give K <= --tokens")
        if self.k is not None and self.candidate is not None:
            raise InputError("--k explains M=1 vs M=K of one variant: give --control only, not --candidate")
        if self.k is None and self.candidate is None:
            raise InputError("explain needs a candidate (--candidate) or a verify width (--k)")
        check_at_least("--width-k", self.width_k, 2)
        check_at_least("--batch", self.batch, 2)
        check_at_least("--max-positions", self.max_positions, 1)
        check_at_least("--top-k", self.top_k, 1)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["control"] = self.control.to_dict()
        data["candidate"] = None if self.candidate is None else self.candidate.to_dict()
        data["mode"] = self.mode
        return data


@dataclass
class ControlCheck:
    """One control on one side at one position: the side's row against the same variant's row by another path.

    Attributes:
        control: ``rerun``, ``prefill vs decode``, ``alone vs in a batch``, ``M=1 vs M=K``.
        side: ``reference`` or ``observed``.
        available: False when the engine cannot run it (``note`` says why).
        bit_exact: the two rows have identical bits.
        argmax_kept: the other path's argmax equals the side's.
        argmax_other: the other path's argmax.
        spread: top-k Δ spread between the two rows (logits).
        accounts: this control alone reproduces the position (see the module notes).
        note: what was compared, or why it was not.
    """

    control: str
    side: str
    available: bool
    bit_exact: bool | None = None
    argmax_kept: bool | None = None
    argmax_other: int | None = None
    spread: float | None = None
    accounts: bool = False
    note: str = ""


@dataclass
class PositionEvidence:
    """The evidence bundle of one position.

    Attributes:
        position: absolute position (index of the input token; row p predicts token p+1).
        input_token: the token fed at p.
        kind: ``flip``, ``outside the floor`` or ``flip outside the floor``.
        token_ref, token_obs: the argmax of each side.
        margin_ref, margin_obs: top1–top2 of each side (logits).
        spread: top-k Δ spread of the pair at p (logits); spread_ulps: at the row's scale.
        floor: the pair's noise floor (p99 of the spread over positions that kept their argmax), None if unmeasured.
        floor_factor: spread / floor.
        top_ref, top_obs: ``[token, logit]`` of each side's top-k, best first.
        texts: token id -> its text, for the tokens above.
        exact_tie_ref, exact_tie_obs: the top-2 logits of that side are bit-identical.
        differing_entries: entries of the row whose bits differ (of n_vocab).
        localized: the verdict's localized-change rule holds at p (beyond ULP noise, < 10 % of entries differ).
        nonfinite_mismatch: entries NaN/Inf on one side and not the same on the other.
        controls: the :class:`ControlCheck` s.
        first_divergent_tensor: the dump-diff's first differing tensor at p (None: not dumped or bit-exact).
        cause: one of :data:`CAUSES`; reason: the one line that decided it.
    """

    position: int
    input_token: int
    kind: str
    token_ref: int
    token_obs: int
    margin_ref: float | None
    margin_obs: float | None
    spread: float | None
    spread_ulps: float | None
    floor: float | None
    floor_factor: float | None
    top_ref: list
    top_obs: list
    texts: dict
    exact_tie_ref: bool
    exact_tie_obs: bool
    differing_entries: int = 0
    localized: bool = False
    nonfinite_mismatch: int = 0
    controls: list[ControlCheck] = field(default_factory=list)
    first_divergent_tensor: str | None = None
    cause: str = ""
    reason: str = ""


@dataclass
class ExplainResult(ResultRecord):
    """The pair, its verdict, and one evidence bundle per explained position.

    JSON format history (``schema_version``): 1 — first version; 2 — ``crash``: the engine's crash evidence
    (:class:`~logitlab.engines.crash.CrashEvidence` as a dict) when it died, the verdict then ``crashed``.
    """

    KIND: ClassVar[str] = "explain"
    SCHEMA_VERSION: ClassVar[int] = 2

    config: dict[str, Any]
    manifest: dict[str, Any]
    mode: str
    pair: list[str]
    prompt_ids: list[int]
    generated_ids: list[int]
    generated_text: str
    first_position: int
    comparison: LogitComparison | None = None
    verdict: Verdict | None = None
    candidates: int = 0
    positions: list[PositionEvidence] = field(default_factory=list)
    dump: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    crash: dict[str, Any] | None = None
    error: str | None = None

    def causes(self) -> dict[str, int]:
        """Positions per cause, in :data:`CAUSES` order (causes with none left out)."""
        counts = {c: sum(1 for p in self.positions if p.cause == c) for c in CAUSES}
        return {c: n for c, n in counts.items() if n}

    def derived(self) -> dict[str, Any]:
        return {"causes": self.causes()}
