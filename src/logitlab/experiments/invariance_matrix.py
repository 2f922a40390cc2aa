"""The invariance matrix: every way of running the same request that an engine supports, bit for bit, in one run.

One variant, one or more prompts, and per **invariance axis** the probe of
:mod:`~logitlab.experiments.invariance` that changes only that way of running
(each probe as it runs alone, with its checks, verdicts and detection limit):

``determinism``
    the same greedy run R times: K distinct logit arrays of R runs, K distinct
    greedy texts (SGLang's "Total samples: N, Unique samples: K"); on a server
    (``openai``), its top-k log-probabilities instead of logits;
``batch``
    the prompt alone vs inside batches of 1..B sequences (``--max-batch``), and of the sizes b-1, b, b+1 around
    each batch bucket b of the engine (``BATCH_BUCKETS``, or ``--buckets``; :mod:`~logitlab.experiments.batch_buckets`);
``batch-position``
    position in batch and padding: the batch size fixed at B (``--max-batch``), the prompt moved through every
    slot of a mixed batch (other sequences of other lengths around it), left and right padding on engines that
    pad; each slot and padding compared with the prompt alone;
``prefill-decode``
    each position from one prefill vs from a decode step;
``chunked-prefill``
    the prompt's prefill cut into chunks by an engine option (llama.cpp:
    ``n_ubatch`` 512, 32, 4), each compared with the first;
``threads``
    the thread count (llama.cpp: 1 vs 2 threads; hf: torch threads 1 vs 2);
``verify``
    M=1 greedy decode vs M=K verify blocks (K=4; :mod:`~logitlab.experiments.invariance_verify`);
``process``
    a fresh engine process vs a warm one (:mod:`~logitlab.experiments.invariance_process`).
``concurrent``, ``prefix-cache``
    servers: the same request alone vs while ``background`` other requests are in flight, and on a prefix-cache
    miss vs hits (:mod:`~logitlab.experiments.invariance_server`; an engine that cannot run them here is skipped
    with the reason).

An axis runs where the engine declares the ability it needs
(:data:`AXIS_ABILITY`; the option axes also need the engine's
``AXIS_SETTINGS``); the others are kept in the result as skipped, with the
reason. Each axis is judged by the worst verdict of its probes (one per
prompt); the matrix by its worst axis.

With ``speed`` (``--speed SPEC``: the variant without the mode), the matrix
also measures the **cost of the mode**: ``ab``'s paired ABBA/BAAB speed design,
control the variant without it, candidate the variant, on the first prompt; the
result keeps that ``ab`` result whole (its decode and prefill ratios with their
intervals and calls).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from logitlab.engines.base import SETTING_ABILITIES
from logitlab.engines.variant import Variant
from logitlab.errors import InputError, Interrupted, LogitlabError, check_at_least
from logitlab.experiments.batch_buckets import MAX_BATCH_SIZE, check_buckets, engine_buckets, straddling_sizes
from logitlab.events import Event
from logitlab.experiments.base import Experiment
from logitlab.experiments.invariance import Check, InvarianceConfig, InvarianceProbe, InvarianceResult, setting_text
from logitlab.experiments.invariance_server import SERVER_PROBES, AxisUnavailable
from logitlab.experiments.prompts import Prompt, check_unique
from logitlab.jsonio import ResultRecord
from logitlab.numerics import VERDICTS, Thresholds
from logitlab.numerics.detection import DetectionLimits
from logitlab.perf.metrics import HIGHER, LOWER, Metric, Metrics, put_crash, put_metric, ratio_metric

__all__ = ["AXES", "AXIS_ABILITY", "MatrixConfig", "AxisResult", "InvarianceMatrixResult", "InvarianceMatrix",
           "skip_reason", "axis_settings", "run_invariance_matrix"]

#: The invariance axes, in the order they run and are reported.
AXES = ("determinism", "batch", "batch-position", "prefill-decode", "chunked-prefill", "threads", "verify", "process",
        "concurrent", "prefix-cache")
#: The engine ability each axis needs (:data:`~logitlab.engines.base.ABILITIES`); ``determinism`` also runs on an
#: engine that declares ``workload`` (whole runs: ``cmd``, ``openai``), on what it returns (a server: the top-k
#: log-probabilities of each position).
AXIS_ABILITY = {"determinism": "logits", "batch": "batch", "batch-position": "batch", "prefill-decode": "sessions",
                "chunked-prefill": "chunked-prefill", "threads": "threads",
                "verify": "sessions", "process": "logits", "concurrent": "concurrent-requests",
                "prefix-cache": "prefix-cache"}


def axis_settings(engine_cls: Any, axis: str) -> tuple[dict[str, str], ...]:
    """The option settings an option axis compares on this engine class (the first the reference); () for a
    probe axis or an engine that declares none."""
    if AXIS_ABILITY[axis] not in SETTING_ABILITIES:
        return ()
    return tuple(dict(s) for s in getattr(engine_cls, "AXIS_SETTINGS", {}).get(AXIS_ABILITY[axis], ()))


def skip_reason(engine_cls: Any, axis: str) -> str | None:
    """Why ``axis`` cannot run on this engine class (None: it can).

    Raises:
        InputError: ``axis`` is not one of :data:`AXES`.
    """
    if axis not in AXES:
        raise InputError(f"unknown invariance axis {axis!r}; valid: {', '.join(AXES)}")
    ability = AXIS_ABILITY[axis]
    if axis == "determinism" and engine_cls.supports("workload"):
        return None  # whole runs (a process, a request) compared on what they return: a server's top-k
    if axis == "process" and engine_cls.supports("workload"):
        return (f"the {engine_cls.name} engine runs each workload out of process by itself (a command run, a "
                "server request): there is no engine process of logitlab's to start fresh or keep warm")
    if not engine_cls.supports(ability):
        return f"the {engine_cls.name} engine does not declare the {ability!r} ability"
    if ability in SETTING_ABILITIES and len(axis_settings(engine_cls, axis)) < 2:
        return f"the {engine_cls.name} engine names fewer than two settings to compare (AXIS_SETTINGS[{ability!r}])"
    return None


@dataclass(frozen=True)
class MatrixConfig:
    """What one invariance matrix runs.

    Attributes:
        variant: the engine, model and options probed (the option axes override the options they sweep).
        prompts: the prompts, each run on every axis (names unique).
        axes: the axes selected (None: all of :data:`AXES`); those the engine cannot run are skipped.
        max_batch: ``batch``: batch sizes 1..B (>= 2); ``batch-position``: the batch size B.
        buckets: ``batch``: the engine's batch buckets, whose straddling sizes b-1, b, b+1 also run (None: the
            engine's ``BATCH_BUCKETS``; (): none).
        bucket_cap: ``batch``: buckets above this size are left out.
        runs: ``determinism``, ``concurrent``, ``prefix-cache``: runs R (>= 2).
        background: ``concurrent``: other requests in flight beside runs 2..R (>= 1).
        n_decode: greedy tokens after the prompt (every axis but the two batch axes, which run the prompt alone;
            >= 2 with ``verify``).
        top_k: k of the top-k set agreement.
        thresholds: verdict thresholds.
        detection: measure each probe's detection limit (of its worst check).
        speed: the variant without the mode (``--speed``): the paired speed design runs it as the control and
            ``variant`` as the candidate, on the first prompt (None: no speed run).
        speed_repeats: ``speed``: ABBA/BAAB blocks (4 timed runs each).
        self_check: run the inverse controls of the probe axes (``determinism``, ``batch``, ``batch-position``,
            ``prefill-decode``: one planted input token each probe must see;
            :mod:`~logitlab.experiments.inverse_controls`); a probe that misses its control is vacuous.
    """

    #: The command-line option of each setting the checks of :meth:`validate` name.
    OPTIONS: ClassVar[dict[str, str]] = {"max_batch": "--max-batch", "runs": "--runs", "n_decode": "--tokens",
                                         "top_k": "--top-k"}

    variant: Variant
    prompts: tuple[Prompt, ...]
    axes: tuple[str, ...] | None = None
    max_batch: int = 4
    buckets: tuple[int, ...] | None = None
    bucket_cap: int = 16
    runs: int = 5
    background: int = 3
    n_decode: int = 8
    top_k: int = 5
    thresholds: Thresholds = field(default_factory=Thresholds)
    detection: bool = True
    self_check: bool = False
    speed: Variant | None = None
    speed_repeats: int = 3

    def validate(self, names: Mapping[str, str] | None = None) -> None:
        """Raise InputError naming the bad value and the valid ones: a setting as ``names`` calls it (by field:
        a sweep's matrix file passes its keys), else by its option in :attr:`OPTIONS`."""
        name = {**self.OPTIONS, **(names or {})}
        for axis in self.axes or ():
            if axis not in AXES:
                raise InputError(f"unknown invariance axis {axis!r}; valid: {', '.join(AXES)}")
        if self.axes is not None and not self.axes:
            raise InputError(f"--axes needs at least one axis; valid: {', '.join(AXES)}")
        if self.axes is not None and len(set(self.axes)) != len(self.axes):
            twice = next(a for a in self.axes if self.axes.count(a) > 1)
            raise InputError(f"--axes names {twice!r} twice; name each axis once")
        if not self.prompts:
            raise InputError("the matrix needs at least one prompt")
        check_unique(self.prompts)
        check_at_least(name["max_batch"], self.max_batch, 2, "B=1 is the prompt alone")
        if self.max_batch > MAX_BATCH_SIZE:
            raise InputError(f"{name['max_batch']} must be at most {MAX_BATCH_SIZE}, got {self.max_batch}")
        check_buckets(self.buckets, self.bucket_cap)
        check_at_least(name["runs"], self.runs, 2)
        check_at_least("--background", self.background, 1)
        check_at_least(name["n_decode"], self.n_decode, 2 if "verify" in self.selected else 0,
                       "the verify axis scores greedy tokens in blocks of K; leave it out of --axes for fewer")
        check_at_least(name["top_k"], self.top_k, 1)
        check_at_least("--speed-repeats", self.speed_repeats, 1)

    @property
    def selected(self) -> tuple[str, ...]:
        """The axes selected, in :data:`AXES` order."""
        return tuple(a for a in AXES if self.axes is None or a in self.axes)

    def probe_config(self, axis: str, prompt: Prompt, settings: Sequence[dict[str, str]] = (),
                     buckets: Sequence[int] = ()) -> InvarianceConfig:
        """The :class:`~logitlab.experiments.invariance.InvarianceConfig` of one axis on one prompt
        (``settings``: an option axis's settings, the first the reference; ``buckets``: the engine's batch
        buckets)."""
        common = {"prompt": prompt.text, "top_k": self.top_k, "thresholds": self.thresholds,
                  "detection": self.detection, "n_decode": self.n_decode,
                  "self_check": self.self_check and axis in ("determinism", "batch", "batch-position",
                                                             "prefill-decode")}
        if axis in ("determinism", *SERVER_PROBES):
            return InvarianceConfig(probe=axis, variant=self.variant, runs=self.runs, background=self.background,
                                    **common)
        if axis == "batch":
            return InvarianceConfig(probe="batch", variant=self.variant,
                                    batch_sizes=straddling_sizes(self.max_batch, buckets, self.bucket_cap), **common)
        if axis == "batch-position":
            return InvarianceConfig(probe="batch", variant=self.variant, batch_sizes=(self.max_batch,), slots=True,
                                    **common)
        if axis in ("prefill-decode", "verify", "process"):
            return InvarianceConfig(probe=axis, variant=self.variant, **common)
        reference = dataclasses.replace(self.variant, options={**self.variant.options, **settings[0]})
        return InvarianceConfig(probe="settings", variant=reference, settings=tuple(settings[1:]), **common)

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant.to_dict(), "prompts": [p.to_dict() for p in self.prompts],
                "axes": None if self.axes is None else list(self.axes), "max_batch": self.max_batch,
                "buckets": None if self.buckets is None else list(self.buckets), "bucket_cap": self.bucket_cap,
                "runs": self.runs, "background": self.background, "n_decode": self.n_decode, "top_k": self.top_k,
                "thresholds": dataclasses.asdict(self.thresholds), "detection": self.detection,
                "self_check": self.self_check, "speed": None if self.speed is None else self.speed.to_dict(),
                "speed_repeats": self.speed_repeats}


def _worst(results: Sequence[InvarianceResult]) -> InvarianceResult | None:
    """The probe with the most severe verdict (then the largest max |Δ| of its worst check), or None."""
    judged = [r for r in results if r.verdict is not None]
    if not judged:
        return None

    def key(r: InvarianceResult) -> tuple[int, float]:
        worst = r.worst
        return VERDICTS.index(r.verdict_word), (worst.comparison.max_abs_diff or 0.0) if worst and not r.crash else 0.0
    return max(judged, key=key)


class _JudgedByWorst:
    """What an axis and the matrix read off their worst part (``worst``: a probe, an axis, or None), and how they
    pool their parts' statuses."""

    @property
    def verdict_word(self) -> str | None:
        """The worst part's verdict word (``crashed`` when an engine died; the matrix's is what ``--require``
        checks); None: nothing judged."""
        worst = self.worst  # type: ignore[attr-defined]
        return None if worst is None else worst.verdict_word

    @staticmethod
    def _most_telling(statuses: Sequence[str]) -> str:
        """``crashed``, then ``not invariant``, then ``vacuous``, whichever is among ``statuses``, else ``invariant``."""
        return next((s for s in ("crashed", "not invariant", "vacuous") if s in statuses), "invariant")


@dataclass
class AxisResult(_JudgedByWorst):
    """One axis of the matrix: its probes (one per prompt) or why it was skipped.

    Attributes:
        axis: one of :data:`AXES`.
        skipped: why the axis did not run (None: it ran).
        prompts: the prompt names, one per probe in ``probes``.
        probes: the probe results, one per prompt run (fewer than the prompts when the matrix was stopped).
        settings: an option axis's settings (the first the reference); empty for a probe axis.
    """

    axis: str
    skipped: str | None = None
    prompts: list[str] = field(default_factory=list)
    probes: list[InvarianceResult] = field(default_factory=list)
    settings: list[dict[str, str]] = field(default_factory=list)

    def checks(self) -> list[tuple[str, Check]]:
        """Every check of every probe, as ``(prompt name, check)``."""
        return [(name, check) for name, probe in zip(self.prompts, self.probes) for check in probe.checks]

    @property
    def worst(self) -> InvarianceResult | None:
        """The probe with the most severe verdict (None: nothing judged)."""
        return _worst(self.probes)

    @property
    def status(self) -> str:
        """``skipped``; ``not run`` (the matrix stopped before it); else the most telling of its probes' statuses:
        ``crashed``, then ``not invariant``, then ``vacuous`` (a probe that could not have failed), else
        ``invariant``."""
        if self.skipped:
            return "skipped"
        if not self.probes:
            return "not run"
        return self._most_telling([p.status for p in self.probes])

    @property
    def rows(self) -> tuple[int, int]:
        """``(bit-identical rows, rows compared)`` over every check of every probe."""
        compared = [check.comparison for _, check in self.checks()]
        total = sum(c.n_positions for c in compared)
        return total - sum(c.differing_rows for c in compared), total

    @property
    def max_scaled_ulp(self) -> float | None:
        """The largest difference in ULPs at the row's scale, over every check (None: no check)."""
        values = [c.comparison.max_scaled_ulp for _, c in self.checks() if c.comparison.max_scaled_ulp is not None]
        return max(values) if values else None

    def kld(self, key: str) -> float | None:
        """The largest per-check KLD statistic ``key`` (``"p99"``, ``"max"``; nats) over every check."""
        values = [c.comparison.kld.get(key) for _, c in self.checks()]
        values = [v for v in values if v is not None]
        return max(values) if values else None

    @property
    def first_divergence(self) -> dict[str, Any] | None:
        """The earliest differing position over every check: ``prompt``, ``check``, ``position`` (the check's row:
        in a stacked batch check, row c×n+p is copy c, position p; in a ``verify`` check, row i is position
        ``details["row_offset"]`` + i); None where every check is bit-exact."""
        found = [(c.comparison.first_mismatch["position"], name, c) for name, c in self.checks()
                 if c.comparison.first_mismatch]
        if not found:
            return None

        def order(item: tuple[int, str, Check]) -> tuple[int, int]:  # a stacked batch check: by position, then copy
            position, _, check = item
            stacked = check.details.get("stacked")
            if stacked:
                return tuple(reversed(divmod(position, int(stacked["length"]))))
            return position + int(check.details.get("row_offset", 0)), 0  # verify: decode row i is n_prompt + i
        position, name, check = min(found, key=order)
        return {"prompt": name, "check": check.name, "position": int(position)}

    @property
    def detection(self) -> DetectionLimits | None:
        """The detection limit of the worst probe's worst check (None: not measured)."""
        worst = self.worst
        return None if worst is None else worst.detection

    def distinct(self) -> list[dict[str, Any]]:
        """``determinism`` and the server axes: per prompt, ``prompt``, ``runs``, ``logits`` and ``texts`` (distinct
        logit arrays, or top-k arrays on a server, and greedy texts); empty for the other axes."""
        return [{"prompt": name, "runs": p.details["runs"], "logits": p.details["distinct_logits"],
                 "texts": p.details["distinct_texts"]}
                for name, p in zip(self.prompts, self.probes) if p.probe in ("determinism", *SERVER_PROBES)
                and p.details]

    def summary(self) -> dict[str, Any]:
        """The axis's numbers as JSON types (the ``axes_summary`` of the result's JSON)."""
        identical, total = self.rows
        return {"axis": self.axis, "status": self.status, "verdict": self.verdict_word, "skipped": self.skipped,
                "rows_identical": identical, "rows": total, "max_scaled_ulp": self.max_scaled_ulp,
                "kld_p99": self.kld("p99"), "kld_max": self.kld("max"), "first_divergence": self.first_divergence,
                "distinct": self.distinct()}


@dataclass
class InvarianceMatrixResult(_JudgedByWorst, ResultRecord):
    """The invariance matrix of one variant: an :class:`AxisResult` per selected axis.

    JSON format history (``schema_version``): 1 — first version (``axes`` with each probe's full
    :class:`~logitlab.experiments.invariance.InvarianceResult`; derived ``verdict``, ``status`` and
    ``axes_summary``, the numbers of each axis); later in 1 (additive): ``speed``, the ``ab`` result of the
    mode's cost (``--speed``), as its JSON.
    """

    KIND: ClassVar[str] = "invariance-matrix"
    SCHEMA_VERSION: ClassVar[int] = 1

    config: dict[str, Any]
    manifest: dict[str, Any]
    axes: list[AxisResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    speed: dict[str, Any] | None = None

    @property
    def speed_result(self) -> Any:
        """The mode's cost (``--speed``) as an :class:`~logitlab.experiments.ab_results.AbResult`; None without."""
        if self.speed is None:
            return None
        from logitlab.experiments.ab_results import AbResult

        return AbResult.from_dict(self.speed)

    @property
    def ran(self) -> list[AxisResult]:
        """The axes that ran (at least one probe)."""
        return [a for a in self.axes if a.probes]

    @property
    def worst(self) -> AxisResult | None:
        """The axis with the most severe verdict (None: nothing judged)."""
        probes = [a.worst for a in self.axes]
        worst = _worst([p for p in probes if p is not None])
        return None if worst is None else next(a for a, p in zip(self.axes, probes) if p is worst)

    @property
    def status(self) -> str:
        """The most telling status of the axes that ran: ``crashed``, then ``not invariant``, then ``vacuous`` (an
        axis that could not have failed), else ``invariant``; ``not run`` when no axis ran."""
        statuses = [a.status for a in self.ran]
        return self._most_telling(statuses) if statuses else "not run"

    @property
    def vacuous(self) -> list[str]:
        """The axes that ran but could not have failed (a probe that compared a computation with itself, or missed
        its inverse control), each as ``axis: why``."""
        return [f"{a.axis}: {p.vacuous}" for a in self.ran for p in a.probes if p.vacuous]

    def derived(self) -> dict[str, Any]:
        return {"verdict": self.verdict_word, "status": self.status,
                "axes_summary": [a.summary() for a in self.axes]}

    @classmethod
    def sweep_cell(cls, results: Sequence["InvarianceMatrixResult"], experiment: Any) -> dict[str, Any]:
        """A sweep's matrix cell from its jobs' matrices (one per prompt): per axis its status, worst verdict and
        bit-identical rows over the prompts, and the cell's numbers over every check
        (:func:`~logitlab.experiments.invariance_matrix_cell.matrix_cell`); ``experiment`` adds nothing here."""
        from logitlab.experiments.invariance_matrix_cell import matrix_cell

        return matrix_cell(results)

    def history_metrics(self) -> Metrics:
        """What the history keeps of a matrix (``--record``): axis -> metric name ->
        :class:`~logitlab.perf.metrics.Metric`, one series per axis that ran, so that the build where an axis loses
        its invariance is a change point.

        Per axis: ``bit_exact_share`` (% of compared rows bit-identical, over every check of every prompt; higher is
        better), ``kld_p99`` (the largest per-check KLD p99, nats; lower is better), ``argmax flips`` (over every
        check; lower is better), and ``crashed`` (its phase and status) when an engine crashed on that axis.
        With ``--speed``: ``speed`` -> ``decode``, ``prefill``, the mode's cost (variant / without it, geometric-mean
        tokens/s ratio, samples: each block's ratio; higher is better), as ``ab`` records its ``ratio``.
        """
        out: Metrics = {}
        for axis in self.ran:
            for probe in axis.probes:
                put_crash(out, axis.axis, probe.crash)
            identical, total = axis.rows
            if total:
                put_metric(out, axis.axis, "bit_exact_share", Metric(HIGHER, 100.0 * identical / total, "%"))
                kld = axis.kld("p99")
                if kld is not None:
                    put_metric(out, axis.axis, "kld_p99", Metric(LOWER, float(kld), "nats"))
                flips = sum(len(check.comparison.flips) for _, check in axis.checks())
                put_metric(out, axis.axis, "argmax flips", Metric(LOWER, float(flips), "flips"))
        speed = self.speed_result
        for phase, comparison in (speed.speed.items() if speed is not None else ()):
            put_metric(out, "speed", phase, ratio_metric(comparison))
        return out


class InvarianceMatrix(Experiment):
    """Runs a :class:`MatrixConfig`: each selected axis's probe on each prompt; :func:`run_invariance_matrix` is the
    one-call form."""

    KIND = "invariance-matrix"

    def __init__(self, config: MatrixConfig, *, on_event: Event | None = None):
        super().__init__(config, on_event=on_event)

    def run(self) -> InvarianceMatrixResult:
        """Run every selected axis the engine supports on every prompt, axis by axis.

        A crash of the engine is its probe's verdict (``crashed``) and the matrix goes on with the next probe.

        Raises:
            LogitlabError: bad input (an unknown engine; a prompt too long for the context) or an error of a
                probe; once the matrix has started, its ``partial`` holds the axes measured so far.
            Interrupted: Ctrl-C; its ``partial`` holds the axes measured so far (the probe it stopped, as far as
                it got).
        """
        from logitlab.engines import engine_class

        cfg = self.config
        engine_cls = engine_class(cfg.variant.engine)
        axes = [AxisResult(axis, skip_reason(engine_cls, axis), settings=list(axis_settings(engine_cls, axis)))
                for axis in cfg.selected]
        result = InvarianceMatrixResult(config=cfg.to_dict(), manifest={}, axes=axes)
        buckets = engine_buckets(engine_cls) if cfg.buckets is None else tuple(cfg.buckets)
        result.config["buckets"] = list(buckets)  # as run: given, or the engine's
        for axis in axes:
            overridden = sorted({k for s in axis.settings for k in s} & set(cfg.variant.options))
            if overridden and not axis.skipped:
                given = setting_text({k: cfg.variant.options[k] for k in overridden})
                result.notes.append(f"{axis.axis}: the variant's {given} is replaced by each setting of the axis")
        cells = [(axis, prompt) for axis in axes if not axis.skipped for prompt in cfg.prompts]
        self.on_event("start", {"steps": len(cells) + (cfg.speed is not None)})

        def body() -> None:
            for axis, prompt in cells:
                def forward(kind: str, data: dict[str, Any], where: str = f"{axis.axis}, {prompt.name}") -> None:
                    if kind == "step":
                        self.on_event("detail", {"what": f"{where}: {data['what']}"})

                probe = InvarianceProbe(cfg.probe_config(axis.axis, prompt, axis.settings, buckets), on_event=forward)
                try:
                    probed = probe.run()
                except AxisUnavailable as exc:  # declared, but not possible here (a server with one slot)
                    axis.skipped = str(exc)
                    continue
                except LogitlabError as exc:  # Interrupted too: keep what the probe measured, then stop
                    if exc.partial is not None:
                        axis.prompts.append(prompt.name)
                        axis.probes.append(exc.partial)
                    raise
                axis.prompts.append(prompt.name)
                axis.probes.append(probed)
                if not result.manifest:
                    result.manifest = probed.manifest
                self.on_event("step", {"what": f"{axis.axis}, {prompt.name}"})
            if cfg.speed is not None:
                self._speed(result)

        try:
            return self.measure(result, body)
        except KeyboardInterrupt:  # between probes, outside measure's own handling
            result.error = "interrupted"
            raise Interrupted("interrupted", partial=result) from None


    def _speed(self, result: InvarianceMatrixResult) -> None:
        """The mode's cost: ``ab``'s paired speed design, the variant without the mode (control) vs the variant
        (candidate), on the first prompt; a partial ``ab`` (Ctrl-C, an error) is kept, then the error raised."""
        from logitlab.experiments.ab import AbConfig, run_ab

        cfg = self.config
        config = AbConfig(control=dataclasses.replace(cfg.speed, label="control"),
                          candidate=dataclasses.replace(cfg.variant, label="candidate"), prompt=cfg.prompts[0].text,
                          n_decode=max(cfg.n_decode, 1), repeats=cfg.speed_repeats, warmup=1, escalate=False,
                          top_k=cfg.top_k, thresholds=cfg.thresholds, detection=False)

        slots = [0]

        def forward(kind: str, data: dict[str, Any]) -> None:
            if kind == "slot":
                slots[0] += 1
                self.on_event("detail", {"what": f"speed: run {slots[0]}"})

        try:
            measured = run_ab(config, on_event=forward)
        except LogitlabError as exc:
            if exc.partial is not None:
                result.speed = exc.partial.to_dict()
            raise
        result.speed = measured.to_dict()
        if not result.manifest:
            result.manifest = measured.manifest
        self.on_event("step", {"what": "speed"})


def run_invariance_matrix(config: MatrixConfig, **kwargs: Any) -> InvarianceMatrixResult:
    """Run an invariance matrix; see :class:`InvarianceMatrix`."""
    return InvarianceMatrix(config, **kwargs).run()

