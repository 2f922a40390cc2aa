"""The records of ``golden``: what ``record`` and ``check`` run (:class:`RecordConfig`, :class:`CheckConfig`,
:class:`VariantOverrides` of the recorded variant) and what a check finds (:class:`PromptCheck` per prompt, the
``golden-check`` kind :class:`GoldenCheckResult`).

The runs themselves are :mod:`~logitlab.experiments.golden.run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from logitlab.device import Device
from logitlab.dumps.golden_format import GoldenManifest, Provenance, parse_store
from logitlab.engines.variant import Variant
from logitlab.errors import InputError, check_at_least
from logitlab.experiments.golden.provenance import GoldenMatch, ProvenanceChange
from logitlab.experiments.positions import Selected, parse_positions
from logitlab.experiments.prompts import Prompt
from logitlab.jsonio import ResultRecord
from logitlab.numerics import LogitComparison, Thresholds, Verdict
from logitlab.numerics.detection import DetectionLimits
from logitlab.numerics.gate import Bar, GateResult
from logitlab.numerics.topk import TopKComparison
from logitlab.perf.metrics import Metrics, put_comparison, put_crash

__all__ = ["RecordConfig", "VariantOverrides", "CheckConfig", "PromptCheck", "GoldenCheckResult"]


# -- configs -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecordConfig:
    """What ``golden record`` records.

    Attributes:
        variant: engine, model, options and knobs.
        prompts: the prompts (names unique).
        n_decode: greedy decode tokens after each prompt.
        store: ``full`` or ``topk:K``.
        build_commit: the engine build's source commit (recorded as provenance), if known.
        positions: the ``--positions`` spec (:mod:`logitlab.experiments.positions`): the rows of each prompt's
            run stored (the others are dropped as each run returns).
    """

    variant: Variant
    prompts: Sequence[Prompt]
    n_decode: int = 64
    store: str = "full"
    build_commit: str | None = None
    positions: str = "all"

    def validate(self) -> None:
        check_at_least("--tokens", self.n_decode, 0)
        if not self.prompts:
            raise InputError("a golden needs at least one prompt")
        parse_store(self.store)
        parse_positions(self.positions)


@dataclass(frozen=True)
class VariantOverrides:
    """Command-line changes to the variant a golden recorded (None / empty: keep the recorded one).

    Attributes:
        engine: another engine.
        model: another model path.
        options: options set on top of the recorded ones (``flash_attn=1``).
        env: knobs set on top of the recorded ones.
    """

    engine: str | None = None
    model: str | None = None
    options: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)

    def apply(self, manifest: GoldenManifest) -> Variant:
        """The variant to run: the golden's, changed by these overrides."""
        p = manifest.provenance
        engine = self.engine or p.engine
        if engine != p.engine:  # another engine does not take this one's options
            return Variant("current", engine, self.model or p.model, dict(self.options), {**p.env, **self.env})
        options = {**{k: _option_text(v) for k, v in p.options.items()}, **self.options}
        return Variant("current", engine, self.model or p.model, options, {**p.env, **self.env})


def _option_text(value: Any) -> str:
    """A recorded (converted) option back as the command-line text the engine converts again."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


@dataclass(frozen=True)
class CheckConfig:
    """What ``golden check`` checks.

    Attributes:
        root: the golden folder (a root of device folders, or one device folder).
        overrides: changes to the recorded variant.
        bar: what is allowed when the provenance changed (device key, build or options).
        thresholds: verdict thresholds.
        top_k: k of the top-k statistics.
        strict_device: refuse a golden of another device key.
        build_commit: this build's source commit, compared with the recorded one.
        detection: measure detection limits (:mod:`logitlab.numerics.detection`; a golden of
            ``--store full`` only: top-k data has none): per prompt the ``argmax-up`` shape
            (:data:`~logitlab.numerics.detection.HEADLINE`, the report's column), and for the prompt the
            verdict names every shape (about 17 and 80 comparisons of the prompt's run).
        positions: the ``--positions`` spec of the rows compared; None: the rows the golden stores (every row of
            a golden recorded without ``--positions``).
    """

    root: str
    overrides: VariantOverrides = field(default_factory=VariantOverrides)
    bar: Bar = field(default_factory=Bar)
    thresholds: Thresholds = field(default_factory=Thresholds)
    top_k: int = 5
    strict_device: bool = False
    build_commit: str | None = None
    detection: bool = True
    positions: str | None = None


# -- results -------------------------------------------------------------------------------------
@dataclass
class PromptCheck:
    """One prompt replayed against its golden.

    Attributes:
        name: the prompt's name.
        n_positions: positions compared (prompt + decode; with ``--positions``, those selected).
        verdict: the prompt's verdict (``crashed``: the engine died on this prompt).
        comparison: golden (reference) against this run (observed); None when the engine crashed.
        crash: the crash's evidence (:meth:`logitlab.engines.supervised.CrashEvidence.to_dict`), else None.
        detection: the detection limits of ``comparison`` (faults planted into a copy of this run): the
            ``argmax-up`` shape, and every shape for the prompt the check's verdict names; None when not
            measured (``--no-detection-limit``, a top-k golden, a crash).
    """

    name: str
    n_positions: int
    verdict: Verdict
    comparison: TopKComparison | LogitComparison | None
    crash: dict | None = None
    detection: DetectionLimits | None = None


@dataclass
class GoldenCheckResult(ResultRecord):
    """A golden check: which golden, what changed, which bar, the verdict and whether it passed.

    JSON format history (``schema_version``): 1 — first version; later in 1 (additive): a prompt's ``crash``
    (its verdict ``crashed``, no comparison; the prompts after it are not run); a prompt's ``detection`` (the
    detection limits of its comparison, :mod:`logitlab.numerics.detection`: the ``argmax-up`` shape, every
    shape for the verdict's prompt; absent: None); ``positions`` (the rows compared, when not every row of
    every prompt: a golden recorded with ``--positions`` or a check given one,
    :class:`~logitlab.experiments.positions.Selected`; absent: None).
    """

    KIND: ClassVar[str] = "golden-check"
    SCHEMA_VERSION: ClassVar[int] = 1

    root: str
    match: GoldenMatch
    device: Device
    variant: dict[str, Any]
    store: str
    golden_created_at: str
    golden_provenance: Provenance
    provenance: Provenance
    changes: list[ProvenanceChange]
    bar: Bar
    bar_reason: str
    prompts: list[PromptCheck]
    verdict: Verdict
    verdict_prompt: str
    gate: GateResult
    positions: Selected | None = None

    @property
    def passed(self) -> bool:
        return self.gate.passed

    def derived(self) -> dict[str, Any]:
        return {"passed": self.passed}

    def history_metrics(self) -> Metrics:
        """What the history keeps of a golden check: per prompt (variant ``golden:NAME``) ``kld_mean``,
        ``kld_p99`` (nats, lower is better) and ``bit_exact_share`` (% of positions bit-identical with the
        golden, higher is better), or ``crashed`` (its phase and status): the numerics of each build against
        one recorded reference. Returns variant -> metric name -> :class:`~logitlab.perf.metrics.Metric`."""
        out: Metrics = {}
        for prompt in self.prompts:
            put_crash(out, f"golden:{prompt.name}", prompt.crash)
            if prompt.comparison is not None:
                put_comparison(out, f"golden:{prompt.name}", prompt.comparison)
        return out
