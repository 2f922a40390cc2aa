"""The two probes of ``logitlab bisect``: does this build's numerics, or speed, still match GOOD's?

A probe is asked about one build at a time, always against the GOOD build:

- :class:`NumericsProbe` runs the workload once on GOOD's build (prefill
  the prompt, greedy M=1 decode) and keeps its logits as the reference; each
  tested build replays GOOD's token ids and is compared on every logit
  (:func:`logitlab.numerics.compare_logits`, :func:`logitlab.numerics.classify`).
  The build is *bad* when its verdict is worse than the bar (``bit-exact``
  by default).
- :class:`SpeedProbe` keeps GOOD's build in a second git work tree and runs
  the benchmark command in both trees in ABBA/BAAB blocks
  (:func:`logitlab.perf.commands.bench_run` with its sequential stop,
  ``--repeats auto``): ``slower`` is bad, ``faster`` or ``equivalent`` good;
  ``inconclusive`` once the budget of blocks is spent is a skip (as
  Chromium's Pinpoint adds runs to an unclear comparison, then reports it
  unknown). The equivalence margin δ defaults to half the change BAD shows
  against GOOD, in log units (``δ = exp(|log r_BAD| / 2) - 1``, 1-50 %): a
  build is good when its CI keeps it within half the regression of GOOD,
  the midpoint between the two levels the search must tell apart. A fixed
  small δ (say 2 %) cannot be shown on a noisy machine, so every unchanged
  build would end as a skip.

Either probe may answer *skip* for a build it cannot judge (the engine fails
there, the benchmark fails); the bisection then tries a neighbour. Nothing
here prints.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from logitlab.engines.variant import Variant
from logitlab.engines.workload import RunOutput, environment, run_workload
from logitlab.engines.crash import CrashEvidence
from logitlab.errors import EngineCrashed, InputError, LogitlabError, Interrupted, check_at_least
from logitlab.events import Event, ignore_event
from logitlab.experiments.isolation import load_supervised
from logitlab.numerics import VERDICTS, Thresholds, Verdict, classify, compare_logits
from logitlab.perf.commands import BenchRunConfig, bench_run
from logitlab.perf.equivalence import check_margin
from logitlab.perf.paired import PairedComparison
from logitlab.perf.sequential import SequentialDecision

__all__ = ["OUTCOMES", "ProbeOutcome", "NumericsProbe", "SpeedProbe", "working_directory"]

#: What a probe says about a build.
OUTCOMES = ("good", "bad", "skip")
#: δ of the speed probe's check of BAD when no --margin is given.
DEFAULT_BAD_MARGIN = 0.05
#: Bounds of the δ calibrated from BAD's change.
MIN_AUTO_MARGIN, MAX_AUTO_MARGIN = 0.01, 0.5


@dataclass
class ProbeOutcome:
    """A probe's answer about one build, with its evidence.

    Attributes:
        outcome: ``good``, ``bad`` or ``skip``.
        reason: one line saying why (the verdict and its deciding numbers, the speed call and ratio, or
            why the build could not be judged).
        seconds: wall time of the probe (s).
        verdict: numerics: the verdict of this build against GOOD.
        numerics: numerics: ``differing_rows``, ``n_positions``, ``max_abs_diff``, ``kld_mean``,
            ``first_mismatch_position``.
        speed: speed: the paired comparison of this build (candidate) against GOOD (control).
        sequential: speed: the sequential decision at the stop (blocks run, why it stopped).
    """

    outcome: str
    reason: str
    seconds: float = 0.0
    verdict: Verdict | None = None
    numerics: dict[str, Any] = field(default_factory=dict)
    speed: PairedComparison | None = None
    sequential: SequentialDecision | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise InputError(f"probe outcome {self.outcome!r} is not one of {', '.join(OUTCOMES)}")


@contextmanager
def working_directory(path: str | os.PathLike[str]) -> Iterator[None]:
    """Run the block with ``path`` as the current folder (relative paths of an engine spec resolve there)."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


# ---------------------------------------------------------------------------
# numerics


@dataclass
class NumericsProbe:
    """Compare each build's logits with GOOD's on one workload.

    Attributes:
        variant: the engine spec (relative paths resolve in the checkout).
        prompt: prompt text.
        n_decode: greedy decode steps of GOOD's reference run (later builds replay its ids).
        require: the bar: a build is bad when its verdict is worse (a word of ``VERDICTS`` but ``divergent``).
        thresholds: verdict thresholds.
        top_k: k of the top-k statistics.
    """

    variant: Variant
    prompt: str
    n_decode: int = 16
    require: str = "bit-exact"
    thresholds: Thresholds = field(default_factory=Thresholds)
    top_k: int = 5
    kind: str = "numerics"
    reference: RunOutput | None = field(default=None, init=False, repr=False)
    prompt_ids: list[int] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.require not in VERDICTS[:-1]:
            raise InputError(f"--require {self.require!r} is not a bar: use one of {', '.join(VERDICTS[:-1])}")
        check_at_least("--tokens", self.n_decode, 1)

    def _run(self, checkout: Path, replay: list[int] | None) -> RunOutput:
        with working_directory(checkout):
            engine = load_supervised(self.variant)
            try:
                if not self.prompt_ids:
                    self.prompt_ids = list(engine.tokenize(self.prompt))
                with environment(self.variant.env):
                    return run_workload(engine, self.prompt_ids, self.n_decode, replay)
            finally:
                engine.close()

    def prepare(self, good: Path, on_event: Event = ignore_event) -> dict[str, Any]:
        """Run GOOD's build once (greedy) and keep its logits; returns a summary for the result.

        Raises:
            LogitlabError: the engine fails on GOOD's build (nothing to compare against).
        """
        out = self._run(good, None)
        if out.topk is not None or out.logits.shape[1] == 0:
            raise InputError(f"engine {self.variant.engine!r} returns only top-k log-probabilities: the numerics "
                             "probe compares full logits; use an engine with the 'logits' ability")
        self.reference = out
        return {"prompt_tokens": len(self.prompt_ids), "decode_tokens": len(out.generated),
                "generated_ids": list(out.generated), "fingerprint": out.fingerprint()}

    def test(self, checkout: Path, on_event: Event = ignore_event) -> ProbeOutcome:
        """This build against GOOD's reference: bad when the verdict is worse than the bar."""
        if self.reference is None:
            raise InputError("the numerics probe has no reference: call prepare() on GOOD's build first")
        start = time.perf_counter()
        try:
            out = self._run(checkout, list(self.reference.generated))
        except EngineCrashed as crash:  # as git bisect run: a build whose engine crashes is bad
            evidence = CrashEvidence.of(crash)
            return ProbeOutcome("bad", f"crashed: the engine crashed in {evidence.phase} ({evidence.status})",
                                time.perf_counter() - start,
                                verdict=Verdict("crashed", evidence=evidence.lines()),
                                numerics={"crash": evidence.to_dict()})
        except Interrupted:  # Ctrl-C stops the bisection (restoring the checkout); it does not skip a commit
            raise KeyboardInterrupt from None
        except LogitlabError as exc:
            return ProbeOutcome("skip", f"the engine failed on this build: {exc}", time.perf_counter() - start)
        if out.logits.shape != self.reference.logits.shape:
            return ProbeOutcome("bad", f"the engine returned logits of shape {out.logits.shape}, GOOD's "
                                       f"{self.reference.logits.shape}", time.perf_counter() - start)
        c = compare_logits(self.reference.logits, out.logits, top_k=self.top_k, token_ids=self.reference.input_ids)
        verdict = classify(c, self.thresholds)
        seconds = time.perf_counter() - start
        first = c.first_mismatch["position"] if c.first_mismatch else None
        numerics = {"differing_rows": c.differing_rows, "n_positions": c.n_positions,
                    "max_abs_diff": c.max_abs_diff, "kld_mean": c.kld.get("mean"),
                    "first_mismatch_position": first, "fingerprint": out.fingerprint()}
        if verdict.word == "bit-exact":
            reason = f"bit-exact with GOOD ({c.n_positions} positions)"
        else:
            reason = (f"{verdict.word}: {c.differing_rows}/{c.n_positions} positions differ from GOOD, first at "
                      f"position {first}, max |Δ| {c.max_abs_diff:.3g}")
        outcome = "bad" if verdict.worse_than(self.require) else "good"
        return ProbeOutcome(outcome, reason, seconds, verdict=verdict, numerics=numerics)

    def close(self) -> None:
        self.reference = None

    def config(self) -> dict[str, Any]:
        return {"variant": self.variant.to_dict(), "prompt": self.prompt, "n_decode": self.n_decode,
                "require": self.require, "thresholds": dataclasses.asdict(self.thresholds), "top_k": self.top_k}


# ---------------------------------------------------------------------------
# speed


@dataclass
class SpeedProbe:
    """Time each build against GOOD's in ABBA/BAAB blocks with a sequential stop.

    Attributes:
        command: the benchmark shell command, run in each build's work tree (paths relative to it).
        metric_regex, metric_name, metric_unit, higher_is_better: the primary metric (None: wall time).
        margin: equivalence margin δ (0.05: a change under 5 % counts as none); None: half the change
            BAD shows against GOOD (:meth:`calibrate`), and 5 % for BAD's own check.
        max_blocks: budget of blocks per build (the sequential rule looks from the 3rd).
        warmup: untimed runs per side before the blocks.
        timeout: seconds per run.
        seed: seed of the bootstrap.
        names: the option a message about a setting names, by :class:`~logitlab.perf.commands.BenchRunConfig`
            field, where the command line spelled it otherwise than ``bench run`` (``bisect --max-blocks 2``).
    """

    command: str
    metric_regex: str | None = None
    metric_name: str = "wall"
    metric_unit: str = ""
    higher_is_better: bool = False
    margin: float | None = None
    max_blocks: int = 12
    warmup: int = 1
    timeout: float | None = None
    seed: int = 0
    names: dict[str, str] | None = None
    kind: str = "speed"
    good_tree: Path | None = field(default=None, init=False)
    margin_used: float = field(default=DEFAULT_BAD_MARGIN, init=False)
    margin_source: str = field(default="default", init=False)

    def __post_init__(self) -> None:
        if self.margin is not None:
            self.margin_used, self.margin_source = check_margin(self.margin, option="--margin"), "option"
        if not self.command.strip():
            raise InputError("the speed probe needs a benchmark command after --: logitlab bisect ... --probe speed "
                             "-- ./bench ARGS")
        self._config(".", ".")  # validates the metric, margin and budget before any checkout

    def _config(self, good: str, build: str) -> BenchRunConfig:
        return BenchRunConfig(
            control=f"cd {shlex.quote(good)} && {self.command}",
            candidate=f"cd {shlex.quote(build)} && {self.command}",
            blocks=self.max_blocks, auto=True, warmup=self.warmup, seed=self.seed, metric_regex=self.metric_regex,
            metric_name=self.metric_name, metric_unit=self.metric_unit, higher_is_better=self.higher_is_better,
            margin=self.margin_used, timeout=self.timeout, names=self.names)

    def prepare(self, good: Path, on_event: Event = ignore_event) -> dict[str, Any]:
        """Keep GOOD's built work tree; its command runs there in every comparison."""
        self.good_tree = Path(good)
        return {"good_tree": str(good)}

    def test(self, checkout: Path, on_event: Event = ignore_event) -> ProbeOutcome:
        """This build (candidate) against GOOD (control): slower is bad; faster/equivalent good; else skip."""
        if self.good_tree is None:
            raise InputError("the speed probe has no GOOD build: call prepare() first")
        start = time.perf_counter()
        config = self._config(str(self.good_tree), str(checkout))
        try:
            result = bench_run(config, on_event=lambda kind, data: on_event(f"bench-{kind}", data))
        except Interrupted:  # Ctrl-C stops the bisection (restoring the checkout); it does not skip a commit
            raise KeyboardInterrupt from None
        except LogitlabError as exc:
            return ProbeOutcome("skip", f"the benchmark failed: {exc}", time.perf_counter() - start)
        seconds = time.perf_counter() - start
        primary = result.primary
        decision = result.sequential.get(config.primary)
        if primary is None:
            return ProbeOutcome("skip", "the benchmark gave no comparison", seconds)
        where = (f"{primary.metric} ratio {primary.ratio:.3f} (95% CI {primary.ci_low:.3f}–{primary.ci_high:.3f}) "
                 f"over {primary.n_blocks} blocks, δ {100 * primary.margin:.0f}%")
        outcome = {"slower": "bad", "faster": "good", "equivalent": "good"}.get(primary.call, "skip")
        reason = f"{primary.call}: {where}" + (" — budget spent, counted as a skip" if outcome == "skip" else "")
        return ProbeOutcome(outcome, reason, seconds, speed=primary, sequential=decision)

    def calibrate(self, bad: ProbeOutcome) -> dict[str, Any]:
        """After BAD's check: δ = half BAD's change in log units (unless ``margin`` was given)."""
        if self.margin is None and bad.speed is not None and bad.speed.ratio:
            half = math.expm1(abs(math.log(bad.speed.ratio)) / 2.0)
            self.margin_used = min(MAX_AUTO_MARGIN, max(MIN_AUTO_MARGIN, half))
            self.margin_source = "half of BAD's change"
        return {"margin": self.margin_used, "margin_source": self.margin_source}

    def close(self) -> None:
        self.good_tree = None

    def config(self) -> dict[str, Any]:
        return {"command": self.command, "metric_regex": self.metric_regex, "metric_name": self.metric_name,
                "metric_unit": self.metric_unit, "higher_is_better": self.higher_is_better,
                "margin": "auto" if self.margin is None else self.margin,
                "max_blocks": self.max_blocks, "warmup": self.warmup, "timeout": self.timeout}
