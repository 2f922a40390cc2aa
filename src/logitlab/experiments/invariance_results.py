"""The records of an invariance probe: what it runs (:class:`InvarianceConfig`), one comparison inside it
(:class:`Check`) and its result (:class:`InvarianceResult`, the ``invariance`` kind).

The probes themselves are :mod:`~logitlab.experiments.invariance`; what they run on the engine,
:mod:`~logitlab.experiments.invariance_steps`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from logitlab.engines.crash import CrashEvidence
from logitlab.engines.variant import Variant
from logitlab.errors import InputError, check_at_least
from logitlab.experiments.batch_buckets import MAX_BATCH_SIZE
from logitlab.experiments.inverse_controls import Control
from logitlab.experiments.isolation_levels import ISOLATION_LEVELS
from logitlab.jsonio import ResultRecord
from logitlab.numerics import VERDICTS, LogitComparison, Thresholds, Verdict
from logitlab.numerics.detection import DetectionLimits
from logitlab.numerics.topk import TopKComparison

PROBES = ("batch", "prefill-decode", "determinism", "settings", "verify", "process", "concurrent", "prefix-cache")
PADDINGS = ("right", "left")
FILLS = ("same", "mixed")

@dataclass(frozen=True)
class InvarianceConfig:
    """What one invariance probe runs.

    Attributes:
        probe: one of :data:`PROBES`.
        variant: the engine, model and options probed.
        prompt: prompt text.
        batch_sizes: ``batch``: batch sizes B (>= 1); each B > 1 is compared with B=1
            (B=1 alone: compared with a second B=1 run).
        padding: ``batch``: padding sides run on engines that pad (``hf``); None (not
            chosen): both, and no note on engines that do not pad.
        fill: ``batch``: ``same`` or ``mixed``; None: ``mixed`` on engines that pad
            (padding needs other lengths), ``same`` on llama.cpp (parallel sequences).
        slots: ``batch``: move the prompt through every slot (sequence index) of each batch B > 1, the other
            sequences around it (``fill`` then defaults to ``mixed``; ``same`` is refused: every slot would hold
            the prompt); one check per size, slot and padding (position in batch and padding).
        n_decode: ``prefill-decode`` and ``determinism``: greedy tokens after the prompt.
        runs: ``determinism``, ``concurrent``, ``prefix-cache``: runs R (>= 2).
        background: ``concurrent``: requests in flight beside runs 2..R (>= 1).
        isolation: ``determinism``: ``session``, ``engine`` or ``process`` per run.
        settings: ``settings``: engine options merged into the variant's, one engine each, every one compared
            with the variant as given (``({"n_ubatch": "4"},)``).
        top_k: k of the top-k set agreement.
        thresholds: verdict thresholds.
        detection: measure the detection limits of the worst check (:mod:`logitlab.numerics.detection`).
        self_check: run the probe's inverse controls (one more engine run each; see
            :mod:`~logitlab.experiments.inverse_controls`).
    """

    probe: str
    variant: Variant
    prompt: str
    batch_sizes: tuple[int, ...] = (1, 4)
    padding: tuple[str, ...] | None = None
    fill: str | None = None
    slots: bool = False
    n_decode: int = 16
    runs: int = 10
    background: int = 3
    isolation: str = "session"
    settings: tuple[dict[str, str], ...] = ()
    top_k: int = 5
    thresholds: Thresholds = field(default_factory=Thresholds)
    self_check: bool = False
    detection: bool = True

    def validate(self) -> None:
        """Raise InputError naming the bad value and the valid ones."""
        if self.probe not in PROBES:
            raise InputError(f"unknown invariance probe {self.probe!r}; valid: {', '.join(PROBES)}")
        if not self.batch_sizes:
            raise InputError("--batch needs at least one batch size")
        bad = [b for b in self.batch_sizes if int(b) < 1]
        if bad:
            raise InputError(f"--batch sizes must be at least 1, got {bad[0]}")
        if max(self.batch_sizes) > MAX_BATCH_SIZE:
            raise InputError(f"--batch sizes must be at most {MAX_BATCH_SIZE}, got {max(self.batch_sizes)}")
        if len(set(self.batch_sizes)) != len(self.batch_sizes):  # as verify --k
            raise InputError(f"--batch lists a batch size twice: {list(self.batch_sizes)}")
        unknown = [p for p in self.padding or PADDINGS if p not in PADDINGS]
        if unknown or self.padding == ():
            raise InputError(f"unknown --padding {unknown[0] if unknown else ''!r}; valid: left, right, both")
        if self.fill is not None and self.fill not in FILLS:
            raise InputError(f"unknown --fill {self.fill!r}; valid: {', '.join(FILLS)}")
        if self.slots and self.fill == "same":
            raise InputError("--slots moves the prompt among other sequences: it needs --fill mixed, not same")
        check_at_least("--tokens", self.n_decode, 0)
        if self.probe in ("determinism", "concurrent", "prefix-cache"):
            check_at_least("--runs", self.runs, 2)
        check_at_least("--background", self.background, 1)
        if self.probe == "settings" and not self.settings:
            raise InputError("the settings probe needs at least one setting (engine options) to compare")
        if self.isolation not in ISOLATION_LEVELS:
            raise InputError(f"unknown --isolation {self.isolation!r}; valid: {', '.join(ISOLATION_LEVELS)}")
        check_at_least("--top-k", self.top_k, 1)

    def batch_sequences(self, pads: bool) -> int:
        """The sequences the ``batch`` probe runs, the prompt alone included: each B at each padding (on an engine
        that ``pads``), and with :attr:`slots` B batches of each B > 1 (what its memory and disk estimates count).
        """
        paddings = len(self.padding or PADDINGS) if pads else 1
        return 1 + sum(b * (b if self.slots else 1) * (paddings if b > 1 else 1) for b in set(self.batch_sizes))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["variant"] = self.variant.to_dict()
        data["batch_sizes"] = list(self.batch_sizes)
        data["padding"] = None if self.padding is None else list(self.padding)
        data["settings"] = [dict(setting) for setting in self.settings]
        return data


@dataclass
class Check:
    """One comparison inside a probe.

    Attributes:
        name: short label (``"B=4, left padding"``, ``"decode vs prefill"``, ``"run 3"``).
        reference, observed: what each side is, in words.
        comparison: the observed side against the reference side (a
            :class:`~logitlab.numerics.topk.TopKComparison` where the engine returns only top-k
            log-probabilities: ``determinism`` on a server).
        verdict: the comparison's verdict with its evidence.
        details: probe-specific facts (batch lengths, runs in a group, positions compared).
    """

    name: str
    reference: str
    observed: str
    comparison: TopKComparison | LogitComparison
    verdict: Verdict
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def word(self) -> str:
        return self.verdict.word


@dataclass
class InvarianceResult(ResultRecord):
    """A probe's checks, its worst verdict and the facts it measured.

    JSON format history (``schema_version``): 1 — first version; 2 — ``kind``, typed checks; 3 — ``crash``: the
    engine's crash evidence (:class:`~logitlab.engines.crash.CrashEvidence` as a dict) when it died, the verdict
    then ``crashed``; 4 — ``error``: what stopped the probe before it finished (``interrupted`` on Ctrl-C, else
    the error's message), the checks then those of what was measured; later in 4 (additive): ``controls``, the
    inverse controls of ``--self-check`` (:class:`~logitlab.experiments.inverse_controls.Control`), a
    check's ``details["exercised"]`` / ``details["vacuous"]``, the derived ``vacuous`` and ``status``, and
    ``detection`` (the worst check's detection limits); the ``settings`` probe (``config["settings"]``, a check's
    ``details["setting"]``); the server probes ``concurrent`` and ``prefix-cache`` (``config["background"]``); the
    ``batch`` probe's ``slots`` (``config["slots"]``, a check's ``details["slot"]``, ``details["slots"]``).
    """

    KIND: ClassVar[str] = "invariance"
    SCHEMA_VERSION: ClassVar[int] = 4

    probe: str
    config: dict[str, Any]
    manifest: dict[str, Any]
    prompt_ids: list[int]
    checks: list[Check] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    crash: dict[str, Any] | None = None
    error: str | None = None
    controls: list[Control] = field(default_factory=list)
    detection: DetectionLimits | None = None  # of the worst check

    @property
    def worst(self) -> Check | None:
        """The check with the most severe verdict (then the largest max |Δ|, then the last), or None."""
        if not self.checks:
            return None
        return max(self.checks, key=lambda c: (VERDICTS.index(c.word), c.comparison.max_abs_diff or 0.0,
                                               self.checks.index(c)))

    @property
    def verdict(self) -> Verdict | None:
        """The worst check's verdict; ``crashed`` (with the crash's evidence) when the engine died."""
        if self.crash:
            evidence = CrashEvidence.from_dict(self.crash)
            return Verdict("crashed", evidence=[evidence.summary()] + evidence.lines())
        worst = self.worst
        return None if worst is None else worst.verdict

    @property
    def verdict_word(self) -> str | None:
        """The worst check's verdict word (``crashed`` when the engine died); None without a check."""
        verdict = self.verdict
        return verdict.word if verdict else None

    @property
    def vacuous(self) -> str | None:
        """Why the probe could not have failed (None: it could, as far as it can tell).

        A missed inverse control (``--self-check``) makes any probe vacuous: its rows do not follow its input.
        A probe whose every check is bit-exact is vacuous when each check compared a computation with itself:
        ``batch`` with B=1 only; ``prefill-decode`` where the prefill ran one row per forward, as the decode
        steps do (:mod:`~logitlab.experiments.inverse_controls`). A probe that found a difference could
        fail, whatever it ran.
        """
        missed = [c for c in self.controls if not c.caught]
        if missed:
            return f"inverse control not caught ({missed[0].check}: {missed[0].evidence})"
        if not self.checks or not all(c.word == "bit-exact" for c in self.checks):
            return None
        reasons = [c.details.get("vacuous") for c in self.checks]
        return reasons[0] if all(reasons) else None

    @property
    def generation_differs(self) -> str | None:
        """Determinism (and the server probes): why the runs are not invariant although every row compared is
        bit-exact (None otherwise).

        Each run is compared up to its first different greedy token; with full logits a different greedy token
        shows as a differing row. An engine whose generation is not the path its scores come from (a server:
        the text is generated, then scored teacher-forced) can give different texts from identical scores:
        a prefix-cache hit on a later run's generation, for example. K unique greedy texts of N runs is then the
        finding, as SGLang's "Unique samples: K" is.
        """
        details = self.details or {}
        texts, runs = details.get("distinct_texts", 1), details.get("runs")
        if self.probe not in ("determinism", "concurrent", "prefix-cache") or texts <= 1 or not self.checks or \
                not all(c.word == "bit-exact" for c in self.checks):
            return None
        return (f"{texts} unique greedy texts of {runs} runs, though every row compared (up to each run's first "
                "different greedy token) is bit-exact: the generation did not follow the path the runs were scored "
                "on (a server generates, then scores teacher-forced; a prefix-cache hit on a later run can do this)")

    @property
    def status(self) -> str:
        """``crashed``, ``vacuous``, ``invariant`` (every check bit-exact and, for determinism, one greedy text)
        or ``not invariant``."""
        if self.crash:
            return "crashed"
        if self.generation_differs:
            return "not invariant"
        if self.vacuous:
            return "vacuous"
        return "invariant" if self.checks and all(c.word == "bit-exact" for c in self.checks) else "not invariant"

    @property
    def invariant(self) -> bool:
        """True iff the engine did not crash, every check is bit-exact and the probe is not vacuous."""
        return self.status == "invariant"

    def derived(self) -> dict[str, Any]:
        worst = self.worst
        verdict = self.verdict
        return {"verdict": None if verdict is None else verdict.to_dict(),
                "verdict_check": None if worst is None or self.crash else self.checks.index(worst),
                "invariant": self.invariant, "vacuous": self.vacuous, "status": self.status,
                "generation_differs": self.generation_differs}
