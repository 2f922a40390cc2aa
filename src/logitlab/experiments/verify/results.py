"""The result records of ``logitlab verify``: the K sweep, flips, classification, guard.

Plain dataclasses, typed until the JSON boundary (:meth:`VerifyResult.to_dict`,
:meth:`VerifyResult.from_dict`).

JSON format history (``schema_version`` of :class:`VerifyResult`):

- 1: first version.
- 2: ``kind``; comparisons share one field list (``numerics.comparison``).
- 3: ``crash``: the engine's crash evidence (:class:`~logitlab.engines.supervised.CrashEvidence` as a dict)
  when it died; the classification's word and cause are then ``crashed``.
  Later in 3 (additive): ``detection``, per K the detection limits of the pooled comparison its verdict is
  judged on (:class:`VerifyDetection`: every shape for the K the classification is judged on, ``argmax-up``
  for the others; absent: empty, not measured).
  Later in 3 (additive): ``positions`` (``--positions``: the spec, the decode rows compared over all prompts and
  all the decode rows, :class:`~logitlab.experiments.positions.Selected`; absent or None: every decode row).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from logitlab.experiments.positions import Selected
from logitlab.jsonio import PlainRecord, ResultRecord
from logitlab.numerics.detection import DetectionLimits, largest_limit
from logitlab.perf.metrics import FINGERPRINT, HIGHER, LOWER, Metric, Metrics, digest, put_crash, put_metric
from logitlab.runlog import RunLogContents

#: Version of :meth:`VerifyResult.to_dict`.
SCHEMA_VERSION = 3

#: cause labels of :class:`VerifyClassification`, harmless first
CAUSES = ("bit-exact", "ulp-noise", "noise", "near-tie-noise", "lossy", "verify-path", "systematic-offset",
          "wrong-result", "crashed")


@dataclass
class InBlockRow:
    """Statistics of one in-block row index j over all verify blocks.

    ``offset``: the offset rule of the verdict over this row index's differing
    rows (:func:`logitlab.numerics.verdict.is_offset`): beyond ULP noise, at
    least ``min_positions`` of them, and the mean of their per-row mean Δ
    (``mean_diff``) at least ``offset_ratio`` × its sd across them
    (``position_sd``). ``std_diff`` is the pooled std of Δ over their entries.
    """

    row: int
    rows: int
    bit_exact_rows: int
    flips: int
    mean_diff: float
    std_diff: float
    max_abs_diff: float
    max_scaled_ulp: float = 0.0
    offset: bool = False
    position_sd: float = 0.0


@dataclass
class SweepEntry(PlainRecord):
    """One line of the K sweep: one prompt (or ``"all"``) at one K.

    ``first_divergence``: the first row that is not bit-exact:
    ``{output_index, position, block_start, row}``; None when all are.
    Margins are the reference (M=1) top1–top2 margins at flips (logits).
    """

    prompt: str
    k: int
    rows: int
    bit_exact_rows: int
    flips: int
    first_divergence: dict | None
    max_abs_diff: float
    mean_abs_diff: float
    mean_diff: float
    min_flip_margin: float | None
    max_flip_margin: float | None
    topk_changes: int
    max_scaled_ulp: float
    verdict: str
    evidence: list[str]
    in_block: list[InBlockRow] = field(default_factory=list)
    flips_in_row0: int = 0
    decode_seconds: float = 0.0


@dataclass
class FlipRecord(PlainRecord):
    """One argmax flip of a verify row against M=1.

    ``logit_*``: the M=1 (ref) and M=K (obs) logits of both tokens; margins are
    each row's own top1–top2; ``topk_*`` the top-k token lists, best first.
    """

    prompt: str
    k: int
    output_index: int
    position: int
    block_start: int
    row: int
    token_ref: int
    token_obs: int
    text_ref: str
    text_obs: str
    logit_ref_at_ref: float
    logit_ref_at_obs: float
    logit_obs_at_ref: float
    logit_obs_at_obs: float
    margin_ref: float | None
    margin_obs: float | None
    topk_ref: list
    topk_obs: list


@dataclass
class PromptRecord(PlainRecord):
    """A prompt and its M=1 greedy continuation."""

    name: str
    kind: str
    n_prompt_tokens: int
    generated_ids: list[int]
    generated_text: str
    m1_decode_seconds: float


@dataclass
class RowPlace:
    """Where a row of a K's pooled comparison comes from: its prompt, output index and absolute position."""

    prompt: str
    output_index: int
    position: int


@dataclass
class VerifyDetection(PlainRecord):
    """The detection limits of one K: faults planted into a copy of every prompt's M=K rows, judged as
    ``verify`` judges (:mod:`logitlab.experiments.verify.detection`).

    Attributes:
        k: the block size.
        limits: per fault shape (:class:`~logitlab.numerics.detection.DetectionLimits`): every shape for
            the K the classification is judged on, ``argmax-up`` for the others; a shape's
            ``position`` is a row of the pooled comparison (prompts in order).
        hardest: shape -> where its hardest position lies (:class:`RowPlace`).
    """

    k: int
    limits: DetectionLimits
    hardest: dict[str, RowPlace] = field(default_factory=dict)


@dataclass
class VerifyClassification(PlainRecord):
    """The cause of the M=K vs M=1 differences, with evidence.

    Attributes:
        word: the verdict word (one of :data:`~logitlab.numerics.VERDICTS`), worst over K.
        cause: one of :data:`CAUSES`.
        summary: one line.
        evidence: one line per fact, naming numbers and thresholds.
        scaling: how flips and non-bit-exact rows scale with K.
        tau: the margin τ (logits) below which flips count as near-ties.
    """

    word: str
    cause: str
    summary: str
    evidence: list[str]
    scaling: str
    tau: float


@dataclass
class GuardPromptResult(PlainRecord):
    """The guarded loop on one prompt with one fallback, against M=1 greedy.

    Work is counted in token rows fed to the engine after the prompt and in
    decode calls; the ideal (every draft accepted, no trigger) is ``tokens - 1``
    rows in ``ceil((tokens - 1) / K)`` calls. Times are per generated token.
    """

    prompt: str
    fallback: str
    k: int
    tokens: int
    ideal_rows: int
    ideal_calls: int
    decided_by_verify: int
    triggers: int
    trigger_rate: float
    forward_rows: int
    forward_calls: int
    discarded_rows: int
    corrections: int
    extra_rows: float
    extra_calls: float
    seconds_per_token: float
    unguarded_seconds_per_token: float
    m1_seconds_per_token: float
    overhead_vs_unguarded: float
    identical: bool
    first_divergence: int | None
    unguarded_identical: bool
    unguarded_first_divergence: int | None
    triggers_fallback_exact: int
    triggers_token_changed: int
    evaluation: dict


@dataclass
class GuardReport(PlainRecord):
    """The near-tie guard measured on the prompt set.

    ``totals`` per fallback: summed work and time, trigger rate over all
    verify-decided positions, identical prompts, and the measured bound checks.
    """

    tau: float
    source: str
    k: int
    calibration: dict | None
    results: list[GuardPromptResult] = field(default_factory=list)
    totals: dict = field(default_factory=dict)


@dataclass
class VerifyResult(ResultRecord):
    """The whole ``verify`` run: manifest, prompts, K sweep, flips, classification, guard."""

    KIND: ClassVar[str] = "verify"
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    config: dict[str, Any]
    manifest: dict[str, Any]
    prompts: list[PromptRecord] = field(default_factory=list)
    sweep: list[SweepEntry] = field(default_factory=list)
    totals: list[SweepEntry] = field(default_factory=list)
    flips: list[FlipRecord] = field(default_factory=list)
    classification: VerifyClassification | None = None
    guard: GuardReport | None = None
    batch_invariant: bool | None = None
    crash: dict[str, Any] | None = None
    error: str | None = None
    detection: list[VerifyDetection] = field(default_factory=list)
    positions: Selected | None = None  # --positions: the decode rows compared (None: all)

    def total(self, k: int) -> SweepEntry | None:
        return next((t for t in self.totals if t.k == k), None)

    def detection_at(self, k: int) -> VerifyDetection | None:
        """The detection limits of K (None: not measured)."""
        return next((d for d in self.detection if d.k == k), None)

    @property
    def guard_identical(self) -> bool | None:
        """True iff every guarded run (every fallback) is token-identical to M=1 greedy; None without a guard."""
        if self.guard is None or not self.guard.results:
            return None
        return all(r.identical for r in self.guard.results)

    # -- what the result supplies beyond its JSON (see ResultRecord) -----------------------------
    @property
    def verdict_word(self) -> str | None:
        """The classification's word (the worst over K); None when nothing was classified."""
        return self.classification.word if self.classification else None

    def history_metrics(self) -> Metrics:
        """What the history keeps of a ``verify`` run: variant -> metric name ->
        :class:`~logitlab.perf.metrics.Metric`, all under the variant ``verify``.

        Per K: ``K=k bit_exact_share`` (% of M=K rows bit-exact with M=1, higher
        is better) and ``K=k flips`` (argmax flips, lower is better); ``m1
        decode`` (tokens/s, samples per prompt); ``greedy`` (fingerprint of every
        prompt's M=1 greedy token ids); ``crashed`` (its phase and status) when
        the engine crashed.
        """
        out: Metrics = {}
        put_crash(out, "verify", self.crash)
        for total in self.totals:
            if total.rows:
                put_metric(out, "verify", f"K={total.k} bit_exact_share",
                           Metric(HIGHER, 100.0 * total.bit_exact_rows / total.rows, "%"))
            put_metric(out, "verify", f"K={total.k} flips", Metric(LOWER, float(total.flips), "flips"))
        tokens = sum(len(p.generated_ids) for p in self.prompts)
        seconds = sum(p.m1_decode_seconds for p in self.prompts)
        if tokens and seconds > 0:
            per_prompt = tuple(len(p.generated_ids) / p.m1_decode_seconds for p in self.prompts
                               if p.m1_decode_seconds > 0)
            put_metric(out, "verify", "m1 decode", Metric(HIGHER, tokens / seconds, "tokens/s", per_prompt))
        if self.prompts:
            put_metric(out, "verify", "greedy",
                       Metric(FINGERPRINT, digest([[p.name, p.generated_ids] for p in self.prompts])))
        return out

    @classmethod
    def from_run_log(cls, log: RunLogContents) -> VerifyResult:
        """The result a ``verify`` run log holds (:mod:`logitlab.runlog`).

        A finished log gives the whole result. A log cut short by a kill gives
        the per-prompt sweep and flips of the prompts it logged, its ``error``
        saying so (the totals and the classification need every prompt's full
        comparison, which the log does not hold); prompt lines that do not load
        are left out, each named in ``error``.

        Raises:
            InputError: not a ``verify`` log, no header, or a damaged one.
        """
        log.require(cls.KIND, ("config", "manifest"))
        data: dict[str, Any] = {"config": log.header["config"], "manifest": log.header["manifest"],
                                "kind": cls.KIND, "schema_version": cls.SCHEMA_VERSION,
                                "prompts": [], "sweep": [], "flips": []}
        guard = log.header.get("guard")
        if isinstance(log.header.get("positions"), dict):  # the decode rows compared (--positions)
            data["positions"] = log.header["positions"]
        results: list[Any] = []
        notes = []
        for i, record in enumerate(log.records, start=1):
            if not (isinstance(record, dict) and isinstance(record.get("prompt"), dict)
                    and all(isinstance(record.get(k, []), list) for k in ("sweep", "flips", "guard_results"))):
                notes.append(f"prompt line {i} of the log is damaged; left out")
                continue
            data["prompts"].append(record["prompt"])
            data["sweep"] += record.get("sweep", [])
            data["flips"] += record.get("flips", [])
            results += record.get("guard_results", [])
            data["batch_invariant"] = record.get("batch_invariant")
        if isinstance(guard, dict):
            data["guard"] = {**guard, "results": results}
        data.update(log.final)
        result = cls.from_dict(data)
        if log.interrupted:
            result.error = log.interrupted_message("prompt(s)")
        extra = notes + log.notes
        if extra:
            result.error = "; ".join(([result.error] if result.error else []) + extra)
        return result

    @classmethod
    def sweep_cell(cls, results: Sequence[VerifyResult], experiment: Any) -> dict[str, Any]:
        """A sweep's matrix cell from its finished jobs' ``verify`` results (one per prompt): the
        :class:`~logitlab.experiments.sweep.summary.CellSummary` fields they give, by name.

        ``verdict`` and ``cause``: the worst classification's; pooled over the
        prompts' K totals: ``positions`` (M=K rows), ``rows_differing`` (not
        bit-exact with M=1), ``max_abs_diff``, ``flips`` (``verify`` keeps no
        KLD); ``detection_limit`` and ``detection_measured``: the largest
        ``argmax-up`` detection limit over every prompt and K
        (:func:`~logitlab.numerics.detection.largest_limit`) and how many were
        measured. ``experiment`` (the matrix's ``[experiment]``) adds nothing here.
        """
        from logitlab.numerics.verdict import VERDICTS

        cell: dict[str, Any] = {}
        worst = [r.classification for r in results if r.classification is not None]
        if worst:
            top = max(worst, key=lambda c: VERDICTS.index(c.word))
            cell["verdict"], cell["cause"] = top.word, top.cause
        totals = [t for r in results for t in r.totals]
        if totals:
            cell["positions"] = sum(t.rows for t in totals)
            cell["rows_differing"] = sum(t.rows - t.bit_exact_rows for t in totals)
            cell["max_abs_diff"] = max(t.max_abs_diff for t in totals)
            cell["flips"] = sum(t.flips for t in totals)
        cell["detection_limit"], cell["detection_measured"] = largest_limit(
            d.limits for r in results for d in r.detection)
        return cell
