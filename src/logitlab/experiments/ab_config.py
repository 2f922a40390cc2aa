"""The settings of an ``ab`` experiment (:class:`AbConfig`) and their checks.

:mod:`logitlab.experiments.ab` runs it (and keeps the name importable from there).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from logitlab.engines.variant import Variant
from logitlab.errors import InputError, check_at_least
from logitlab.experiments.isolation import ISOLATION_LEVELS, check_slot_timeout
from logitlab.experiments.positions import parse_positions
from logitlab.experiments.speed_designs import SPEED_DESIGNS
from logitlab.numerics.verdict import Thresholds
from logitlab.perf.autostop import check_auto_budget
from logitlab.perf.design import ab_schedule
from logitlab.perf.equivalence import check_margin
from logitlab.perf.prereg import PreregisteredMargin


@dataclass(frozen=True)
class AbConfig:
    """Everything that defines an ``ab`` experiment.

    Attributes:
        control, candidate: the two variants.
        prompt: prompt text.
        n_decode: greedy decode steps after the prompt (tokens).
        repeats: ABBA/BAAB blocks (4 measured slots each), or ``"auto"``: after each block the
            sequential rule (:mod:`logitlab.perf.sequential`, on decode tokens/s) says whether to stop.
        max_repeats: budget of blocks with ``repeats="auto"``.
        max_time: wall-clock budget in seconds with ``repeats="auto"`` (None: none).
        slot_timeout: seconds a slot may take; past it the process that runs it (the slot's subprocess, or the
            supervised engine's worker) is killed with every process it started, and the run is a crash
            (``crashed`` for a candidate; for the control's reference run: no baseline, an error).
        warmup: untimed runs per variant before the blocks.
        isolation: ``session``, ``engine`` or ``process``.
        randomize: seeded balanced random order of block patterns.
        seed: seed for ``randomize`` and the bootstrap.
        escalate: repeat a failing A/A at stronger isolation levels.
        top_k: k of the top-k set agreement.
        thresholds: verdict thresholds.
        margin: equivalence margin δ for the speed call (relative); None: from the A/A (fixed repeats), else
            ``calibration`` or the default (auto: fixed before the first look, :mod:`logitlab.perf.prereg`).
        calibration: with auto, δ read from ``--noise FILE`` (:mod:`~logitlab.experiments.ab_calibration`).
        localize: when the A/A or A/B is not bit-exact, dump both sides of the first differing
            pair up to the first differing position and attach the dump-diff summary (llamacpp, hf).
        explain: when the A/B has flips or positions outside its noise floor, run
            :mod:`~logitlab.experiments.explain` on the pair (at most this many positions; 0: off).
        self_check: run the inverse control after the blocks: the candidate once more with the prompt's last
            token planted, which must change that position of its logits and none before it
            (:mod:`~logitlab.experiments.inverse_controls`); a missed control makes the A/B vacuous.
        detection: measure the detection limits of the verdict's run (:mod:`logitlab.numerics.detection`:
            faults planted into a copy of the candidate run; about a second on the embedded model);
            full-vocabulary comparisons only.
        positions: the ``--positions`` spec (:mod:`logitlab.experiments.positions`): the rows of each measured
            run kept and compared (full logits only); the others are dropped as each run returns.
        speed_design: ``runs`` (each run one slot of an ABBA/BAAB block: the runs give the verdict and both speed
            calls) or ``interleaved`` (:mod:`~logitlab.experiments.ab_interleaved`: one block of runs gives the
            A/A, the verdict and the prefill speed; the decode speed call comes from ``repeats`` interleaved
            blocks, rounded up to an even count, or with ``auto`` from the sequential rule over them). Engines
            with sessions only (not ``openai``); at least 2 decode tokens; with ``auto`` an even ``max_repeats``.
    """

    #: The command-line option of each setting the checks of :meth:`validate` name.
    OPTIONS: ClassVar[dict[str, str]] = {
        "n_decode": "--tokens", "repeats": "--repeats", "warmup": "--warmup", "max_repeats": "--max-repeats",
        "max_time": "--max-time", "top_k": "--top-k", "margin": "--margin", "speed_design": "--speed-design"}

    control: Variant
    candidate: Variant
    prompt: str
    n_decode: int = 64
    repeats: int | str = 3
    warmup: int = 1
    isolation: str = "session"
    randomize: bool = False
    seed: int = 0
    escalate: bool = True
    top_k: int = 5
    thresholds: Thresholds = field(default_factory=Thresholds)
    margin: float | None = None
    localize: bool = False
    max_repeats: int = 12
    max_time: float | None = None
    slot_timeout: float | None = None
    calibration: PreregisteredMargin | None = None
    explain: int = 0
    detection: bool = True
    self_check: bool = False
    positions: str = "all"
    speed_design: str = "runs"

    @property
    def auto(self) -> bool:
        return self.repeats == "auto"

    def validate(self, names: Mapping[str, str] | None = None) -> None:
        """Raise InputError naming the bad value: a setting as ``names`` calls it (by field: a sweep's matrix
        file passes its keys), else by its option in :attr:`OPTIONS`."""
        name = {**self.OPTIONS, **(names or {})}
        check_at_least(name["n_decode"], self.n_decode, 1)
        if isinstance(self.repeats, str) and not self.auto:
            raise InputError(f"{name['repeats']} must be a number of blocks or 'auto', got {self.repeats!r}")
        if self.auto:
            check_auto_budget(self.max_repeats, self.max_time, flag=name["max_repeats"], time_flag=name["max_time"])
        ab_schedule(self.max_repeats if self.auto else self.repeats, warmup=self.warmup,  # repeats < 1, warmup < 0
                    repeats_option=name["repeats"], warmup_option=name["warmup"])
        if self.isolation not in ISOLATION_LEVELS:
            raise InputError(f"unknown --isolation {self.isolation!r}; valid: {', '.join(ISOLATION_LEVELS)}")
        check_slot_timeout(self.slot_timeout, self.isolation, (self.control, self.candidate))
        check_at_least(name["top_k"], self.top_k, 1)
        parse_positions(self.positions)
        if self.margin is not None:
            check_margin(self.margin, option=name["margin"])
        if self.calibration is not None and not self.auto:
            raise InputError(f"--noise is the pre-registered δ of --repeats auto; with --repeats {self.repeats} "
                             "drop it")
        if self.speed_design not in SPEED_DESIGNS:
            raise InputError(f"{name['speed_design']} must be one of {', '.join(SPEED_DESIGNS)}, "
                             f"not {self.speed_design!r}")
        if self.speed_design == "interleaved":
            self._check_interleaved(name)
        if self.explain < 0:
            raise InputError(f"--explain-positions must be at least 1, got {self.explain}")
        if self.localize:
            from logitlab.engines import engine_class, engines_with

            engines = {engine_class(v.engine).name for v in (self.control, self.candidate)}
            if not all(engine_class(v.engine).supports("dump") for v in (self.control, self.candidate)):
                raise InputError(f"--localize dumps tensors through {' or '.join(engines_with('dump'))} only; these "
                                 f"variants use {', '.join(sorted(engines))}")

    def _check_interleaved(self, name: Mapping[str, str]) -> None:
        """``--speed-design interleaved``: engines with sessions, two decode tokens, an even budget of looks."""
        from logitlab.engines import engine_class, engines_with

        for side, variant in (("control", self.control), ("candidate", self.candidate)):
            engine = engine_class(variant.engine)
            if not engine.supports("sessions"):
                raise InputError(f"{name['speed_design']} interleaved alternates decode steps between two open "
                                 f"sessions; the {side}'s engine {engine.name} has none (engines with sessions: "
                                 f"{', '.join(engines_with('sessions'))})")
        if self.n_decode < 2:
            raise InputError(f"{name['speed_design']} interleaved alternates decode steps: {name['n_decode']} must be "
                             f"at least 2, got {self.n_decode}")
        if self.auto and (self.max_repeats < 4 or self.max_repeats % 2):
            raise InputError(f"{name['speed_design']} interleaved looks after every pair of blocks (ABBA, BAAB): "
                             f"{name['max_repeats']} must be an even number of at least 4, got {self.max_repeats}")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["control"], data["candidate"] = self.control.to_dict(), self.candidate.to_dict()
        return data


__all__ = ["AbConfig"]
