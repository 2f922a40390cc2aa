"""Sweep matrices: a control, axes whose Cartesian product gives the candidates, prompts, one experiment.

A matrix file (TOML or JSON, same keys) describes a whole sweep; every matrix
cell is one candidate (or, for ``verify``, one variant) and every cell runs on
every prompt, one **job** per (cell, prompt). A job is plain data
(:class:`JobSpec`): running it (:func:`logitlab.experiments.sweep.job.run_job`) is a
function of the spec alone, so any worker on any node can run it and
``--resume`` can tell a finished job by its key and spec hash.

The file format and its reader are :mod:`logitlab.experiments.sweep.matrix_file`
(:func:`~logitlab.experiments.sweep.matrix_file.load_matrix`,
:func:`~logitlab.experiments.sweep.matrix_file.parse_matrix`); this module holds the
typed pieces a parsed matrix is made of, and its cells and jobs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from logitlab.engines.variant import Variant, parse_variant
from logitlab.errors import InputError
from logitlab.experiments.prompts import Prompt
from logitlab.numerics import Thresholds

__all__ = ["EXPERIMENT_KINDS", "AXIS_KINDS", "Axis", "Cell", "ExperimentSettings", "JobSpec", "Matrix", "Resources"]

#: The experiments a matrix can run per cell.
EXPERIMENT_KINDS = ("ab", "verify", "invariance-matrix")
#: The settings only an ``invariance-matrix`` cell reads (left out of the other kinds' specs, so that their spec
#: hashes, which ``--resume`` matches, stay as they were).
MATRIX_SETTINGS = ("axes", "runs", "max_batch")
#: Kinds of axis: what an axis value changes in a variant.
AXIS_KINDS = ("options", "env", "model", "engine", "spec")


# -- typed pieces ------------------------------------------------------------------
@dataclass(frozen=True)
class ExperimentSettings:
    """What each job runs (``[experiment]``).

    Attributes:
        kind: ``ab``, ``verify`` or ``invariance-matrix`` (the invariance matrix of the candidate on the prompt).
        speed: ``ab`` only: False = numerics only (one ABBA block, no warmup,
            no speed call); True = ``warmup`` untimed runs per variant and
            ``repeats`` timed ABBA/BAAB blocks.
        tokens: greedy decode tokens per prompt.
        repeats, max_repeats, max_time, warmup, randomize, margin: ``ab`` with speed
            (as ``logitlab ab``; ``max_time`` in seconds).
        isolation, escalate: ``ab`` (as ``logitlab ab``).
        ks: ``verify``: the K sweep.
        axes, runs, max_batch: ``invariance-matrix``: the invariance axes (empty: every axis the engine supports),
            determinism's runs, the batch axes' B (as ``logitlab invariance matrix``).
        seed, top_k, max_ulp, near_tie_margin, offset_ratio: as the commands' options.
    """

    kind: str = "ab"
    speed: bool = False
    tokens: int = 32
    repeats: int | str = 5
    max_repeats: int = 12
    max_time: float | None = None
    warmup: int = 1
    isolation: str = "session"
    escalate: bool = True
    randomize: bool = False
    margin: float | None = None
    ks: tuple[int, ...] = (1, 2, 4, 8)
    axes: tuple[str, ...] = ()
    runs: int = 5
    max_batch: int = 4
    seed: int = 0
    top_k: int = 5
    max_ulp: float = Thresholds().max_ulp
    near_tie_margin: float = Thresholds().near_tie_margin
    offset_ratio: float = Thresholds().offset_ratio

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds(max_ulp=self.max_ulp, near_tie_margin=self.near_tie_margin,
                          offset_ratio=self.offset_ratio)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ks"] = list(self.ks)
        data["axes"] = list(self.axes)
        if self.kind != "invariance-matrix":
            for key in MATRIX_SETTINGS:
                del data[key]
        return data



@dataclass(frozen=True)
class Resources:
    """What one job needs (``[resources]``), read by the executors, not part of a job's spec.

    Attributes:
        num_cpus, num_gpus: per job (Ray reserves them; the local executor
            gives each worker ``num_gpus`` of the visible GPUs).
        bundles: Ray only: a placement group per worker with these resource
            bundles (e.g. ``[{GPU = 1}, {GPU = 1}]``) for an engine that spans
            several GPUs; the job runs in bundle 0 and the engine's own Ray
            tasks and actors are placed in the group.
        strategy: the placement group's strategy (``PACK``, ``STRICT_PACK``,
            ``SPREAD``, ``STRICT_SPREAD``).
        keep_engines: loaded engines a worker keeps between jobs (0: every job
            loads its own).
    """

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    bundles: tuple[dict, ...] = ()
    strategy: str = "PACK"
    keep_engines: int = 2

    def to_dict(self) -> dict[str, Any]:
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "bundles": [dict(b) for b in self.bundles],
                "strategy": self.strategy, "keep_engines": self.keep_engines}


PLACEMENT_STRATEGIES = ("PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD")


@dataclass(frozen=True)
class Axis:
    """One axis of the matrix.

    Attributes:
        kind: one of :data:`AXIS_KINDS`.
        key: the option or knob name (``options``, ``env``); "" otherwise.
        values: the axis values, as given (strings after conversion; ``None``:
            an environment knob not set).
        shared: True for ``[shared_axes]`` (control and candidate alike).
    """

    kind: str
    key: str
    values: tuple[Any, ...]
    shared: bool = False

    @property
    def name(self) -> str:
        """The column name: the option or knob name, else the axis kind."""
        return self.key or self.kind

    def text(self, value: Any) -> str:
        """The value as a table shows it: ``1``, ``unset``, ``q4_1.gguf`` (a model's file name), ``hf:``."""
        if value is None:
            return "unset"
        if self.kind == "model":
            return Path(str(value)).name
        return str(value)

    def label(self, value: Any) -> str:
        """The value in a cell's label: ``flash_attn=1``, ``GGML_X=unset``, ``model=q4_1.gguf``, ``hf:``."""
        if self.kind in ("engine", "spec"):
            return str(value)
        return f"{self.name}={self.text(value)}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "values": list(self.values), "shared": self.shared}


@dataclass(frozen=True)
class Cell:
    """One matrix cell: a combination of axis values and the variants it gives.

    Attributes:
        label: the values joined (``flash_attn=1 n_ubatch=4``), unique in the matrix.
        values: axis name -> value as a table shows it (:meth:`Axis.text`), in axis order.
        control: the control variant (differs between cells only through shared axes).
        candidate: the candidate (for ``verify``: the variant the probe runs on).
    """

    label: str
    values: dict[str, str]
    control: Variant
    candidate: Variant


@dataclass(frozen=True)
class JobSpec:
    """One job: a cell on one prompt with the experiment settings. Plain data; JSON in and out.

    Attributes:
        sweep: the sweep's name.
        cell: the cell's label; ``values`` its axis values.
        prompt: the prompt.
        control, candidate: the variants (``verify`` runs on ``candidate``).
        experiment: what runs.
    """

    sweep: str
    cell: str
    values: dict[str, str]
    prompt: Prompt
    control: Variant
    candidate: Variant
    experiment: ExperimentSettings

    @property
    def key(self) -> str:
        """The job's file name stem: ``<cell>--<prompt>``, file-safe, unique within the matrix."""
        return _slug(self.cell) + "--" + _slug(self.prompt.name)

    @property
    def spec_hash(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`to_dict`: what ``--resume`` matches on."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"sweep": self.sweep, "cell": self.cell, "values": dict(self.values),
                "prompt": self.prompt.to_dict(), "control": self.control.to_dict(),
                "candidate": self.candidate.to_dict(), "experiment": self.experiment.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobSpec":
        """Inverse of :meth:`to_dict`.

        Raises:
            InputError: missing or unknown keys.
        """
        try:
            experiment = dict(data["experiment"])
            experiment["ks"] = tuple(experiment.get("ks", ()))
            experiment["axes"] = tuple(experiment.get("axes", ()))
            return cls(sweep=data["sweep"], cell=data["cell"], values=dict(data["values"]),
                       prompt=Prompt(**data["prompt"]), control=Variant(**data["control"]),
                       candidate=Variant(**data["candidate"]), experiment=ExperimentSettings(**experiment))
        except (KeyError, TypeError) as exc:
            raise InputError(f"damaged job spec: {exc}") from None


@dataclass(frozen=True)
class Matrix:
    """A parsed matrix file.

    Attributes:
        name: the sweep's name.
        control: the control variant.
        axes: shared axes first, then candidate axes, in file order.
        prompts: the prompts every cell runs on.
        experiment: the experiment settings.
        resources: per-job resources (executors).
        ray: settings of the ray executor (``runtime_env``).
        source: the matrix file ("" when parsed from a dict).
    """

    name: str
    control: Variant
    axes: tuple[Axis, ...]
    prompts: tuple[Prompt, ...]
    experiment: ExperimentSettings
    resources: Resources = field(default_factory=Resources)
    ray: dict = field(default_factory=dict)
    source: str = ""
    base: str = "."

    def cells(self) -> list[Cell]:
        """The Cartesian product of the axes, shared axes outermost, in file order."""
        out = []
        for combo in itertools.product(*(axis.values for axis in self.axes)):
            control, candidate = self.control, replace(self.control, label="candidate")
            values, labels = {}, []
            for axis, value in zip(self.axes, combo):
                values[axis.name] = axis.text(value)
                labels.append(axis.label(value))
                candidate = _apply(candidate, axis, value, Path(self.base))
                if axis.shared:
                    control = _apply(control, axis, value, Path(self.base))
            out.append(Cell(" ".join(labels) or "candidate", values, control, candidate))
        labels = [c.label for c in out]
        dup = next((label for label in labels if labels.count(label) > 1), None)
        if dup is not None:
            raise InputError(f"two matrix cells are both {dup!r}: give every axis value once")
        keys = [_slug(c.label) for c in out]
        dup = next((key for key in keys if keys.count(key) > 1), None)
        if dup is not None:
            raise InputError(f"two matrix cells have the same file name {dup!r}: make their values differ in "
                             "letters or digits, not only in punctuation")
        return out

    def jobs(self) -> list[JobSpec]:
        """Every (cell, prompt) job, cell-major."""
        return [JobSpec(self.name, cell.label, cell.values, prompt, cell.control, cell.candidate, self.experiment)
                for cell in self.cells() for prompt in self.prompts]

    def axis_names(self) -> list[str]:
        return [axis.name for axis in self.axes]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "control": self.control.to_dict(),
                "axes": [a.to_dict() for a in self.axes], "prompts": [p.to_dict() for p in self.prompts],
                "experiment": self.experiment.to_dict(), "resources": self.resources.to_dict(), "ray": self.ray}


# -- applying an axis value --------------------------------------------------------
def absolute_path(path: str, base: Path) -> str:
    """``path`` made absolute against ``base`` (workers run in other folders, or on other nodes)."""
    return os.path.abspath(base / Path(path).expanduser())


def _apply(variant: Variant, axis: Axis, value: Any, base: Path) -> Variant:
    """The variant with one axis value applied (a relative model path in a spec is relative to ``base``)."""
    if axis.kind == "options":
        return replace(variant, options={**variant.options, axis.key: value})
    if axis.kind == "env":
        env = {k: v for k, v in variant.env.items() if k != axis.key}
        if value is not None:
            env[axis.key] = value
        return replace(variant, env=env)
    if axis.kind == "model":
        return replace(variant, model=value)
    # engine or spec: parsed with the --candidate grammar on top of this variant
    parsed = parse_variant(value, variant.label, default_engine=variant.engine, default_model=variant.model,
                           option=f"axis {axis.kind} value")
    if parsed.engine != variant.engine:  # another engine: the control's options do not apply to it
        options = dict(parsed.options)
    else:
        options = {**variant.options, **parsed.options}
    model = parsed.model
    if model is not None and model != variant.model:
        model = absolute_path(model, base)
    return replace(variant, engine=parsed.engine, model=model, options=options)


_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]+")


def _slug(text: str, limit: int = 80) -> str:
    """A file-name-safe form of ``text``; long ones are cut and given a short hash."""
    slug = _UNSAFE.sub("_", text).strip("_.") or "x"
    if len(slug) > limit:
        slug = slug[:limit - 9] + "-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return slug
