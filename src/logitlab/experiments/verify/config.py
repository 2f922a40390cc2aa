"""The settings of a ``verify`` run (:class:`VerifyConfig`) and their checks.

:mod:`logitlab.experiments.verify.run` runs it (and keeps these names importable from there).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from logitlab.engines.variant import Variant
from logitlab.errors import InputError, check_at_least
from logitlab.experiments.positions import parse_positions
from logitlab.experiments.prompts import Prompt, builtin_prompts, check_unique
from logitlab.experiments.verify import guard as G
from logitlab.numerics.verdict import Thresholds

FALLBACKS = G.FALLBACKS
DEFAULT_KS = (1, 2, 4, 8)

@dataclass(frozen=True)
class VerifyConfig:
    """Everything that defines a ``verify`` run.

    Attributes:
        variant: the engine, model and options (one variant: M=1 and M=K run on it).
        prompts: the prompts (default: the built-in set of 9).
        ks: verify block sizes K of the sweep, each ≥ 1.
        n_decode: greedy decode tokens N per prompt.
        top_k: k of the top-k statistics.
        thresholds: verdict thresholds; ``near_tie_margin`` is the margin τ
            below which a flip counts as a near-tie.
        guard: None (no guard run), a margin τ in logits, or ``"auto"``
            (τ from a calibration replay on ``calibration_prompts``).
        guard_k: verify block size of the guarded loop.
        guard_safety: ``auto``: τ = safety × the noise floor of the calibration
            verify rows (p99 of their top-k Δ spread); None: the thresholds'
            ``floor_factor`` (the factor beyond which a verdict calls a row
            divergent).
        guard_fallbacks: ``redecode`` (roll back to the flagged position and
            decode it M=1 on the current KV) and/or ``resync`` (roll back to
            the last M=1-written position and replay M=1 up to it).
        calibration_prompts: held-out prompts for ``auto``.
        detection: per K, measure the detection limits of the pooled comparison its verdict is judged on
            (:mod:`logitlab.experiments.verify.detection`: every prompt's rows are kept in a temporary
            folder until the end): every fault shape for the K the classification is judged on (about 80
            comparisons of its rows), the ``argmax-up`` shape for the others (about 17).
        positions: the ``--positions`` spec (:mod:`logitlab.experiments.positions`): the decode rows compared
            (verify compares only the decode steps' rows: run positions N … N+D-1 of an N-token prompt; ``prompt``
            selects none of them, ``last`` the last decode step's).
    """

    #: The command-line option of each setting the checks of :meth:`validate` name.
    OPTIONS: ClassVar[dict[str, str]] = {"ks": "--k", "n_decode": "--tokens", "top_k": "--top-k"}

    variant: Variant
    prompts: tuple[Prompt, ...] = field(default_factory=lambda: tuple(builtin_prompts("default")))
    ks: tuple[int, ...] = DEFAULT_KS
    n_decode: int = 64
    top_k: int = 5
    thresholds: Thresholds = field(default_factory=Thresholds)
    guard: float | str | None = None
    guard_k: int = 4
    guard_safety: float | None = None
    guard_fallbacks: tuple[str, ...] = FALLBACKS
    calibration_prompts: tuple[Prompt, ...] = field(default_factory=lambda: tuple(builtin_prompts("calibration")))
    detection: bool = True
    positions: str = "all"

    def validate(self, names: Mapping[str, str] | None = None) -> None:
        """Raise InputError naming the bad value: a setting as ``names`` calls it (by field: a sweep's matrix
        file passes its keys), else by its option in :attr:`OPTIONS`."""
        name = {**self.OPTIONS, **(names or {})}
        ks, tokens = name["ks"], name["n_decode"]
        parse_positions(self.positions)
        if not self.ks:
            raise InputError(f"{ks} needs at least one block size")
        bad = [k for k in self.ks if isinstance(k, bool) or not isinstance(k, int) or k < 1]
        if bad:
            raise InputError(f"{ks} values must be integers >= 1, got {bad[0]!r}")
        if len(set(self.ks)) != len(self.ks):
            raise InputError(f"{ks} lists a block size twice: {list(self.ks)}")
        if isinstance(self.n_decode, int) and self.n_decode >= 1 and max(self.ks) > self.n_decode:
            raise InputError(f"{ks} {max(self.ks)} exceeds {tokens} {self.n_decode}: a verify block of K rows "
                             f"replays K decoded tokens; give K <= {tokens}")
        check_at_least(tokens, self.n_decode, 1)
        check_at_least(name["top_k"], self.top_k, 1)
        if not self.prompts:
            raise InputError("no prompts to run")
        check_unique(self.prompts)
        if self.guard is not None:
            if isinstance(self.guard, str):
                if self.guard != "auto":
                    raise InputError(
                        f"--guard must be a margin in logits (e.g. 0.5), 'auto' or 'off', got {self.guard!r}")
                if not self.calibration_prompts:
                    raise InputError("--guard auto needs calibration prompts")
            elif not (isinstance(self.guard, (int, float)) and self.guard >= 0 and math.isfinite(self.guard)):
                raise InputError(f"--guard margin must be a number >= 0 (logits), got {self.guard!r}")
            check_at_least("--guard-k", self.guard_k, 1)
            if isinstance(self.n_decode, int) and self.n_decode >= 1 and self.guard_k > self.n_decode:
                raise InputError(f"--guard-k {self.guard_k} exceeds --tokens {self.n_decode}: a guarded verify "
                                 "block of K rows replays K decoded tokens; give K <= --tokens")
            if self.guard_safety is not None and not self.guard_safety > 0:
                raise InputError(f"--guard-safety must be > 0, got {self.guard_safety}")
            unknown = [f for f in self.guard_fallbacks if f not in FALLBACKS]
            if unknown or not self.guard_fallbacks:
                raise InputError(f"unknown guard fallback {unknown[0] if unknown else '(none)'!r}; "
                                 f"valid: {', '.join(FALLBACKS)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant.to_dict(),
            "prompts": [p.to_dict() for p in self.prompts],
            "ks": list(self.ks),
            "n_decode": self.n_decode,
            "top_k": self.top_k,
            "thresholds": dataclasses.asdict(self.thresholds),
            "guard": self.guard,
            "guard_k": self.guard_k,
            "guard_safety": self.guard_safety,
            "guard_fallbacks": list(self.guard_fallbacks),
            "calibration_prompts": [p.to_dict() for p in self.calibration_prompts] if self.guard == "auto" else [],
            "detection": self.detection,
            **({"positions": self.positions} if self.positions != "all" else {}),
        }


__all__ = ["DEFAULT_KS", "FALLBACKS", "VerifyConfig"]
