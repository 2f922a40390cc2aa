"""What a dump-diff finds, as records: each aligned tensor-position, the per-layer table, the
tensors on one side only, the pairs that differ by a factor only, and the whole result.

:class:`DumpDiffResult` is a :class:`~logitlab.jsonio.ResultRecord` (kind
``dump-diff``); :func:`~logitlab.dumps.diff.diff_dumps` makes it.

JSON format history (``schema_version`` of :meth:`DumpDiffResult.summary`):

- 1: first version.
- 2: the verdict for "some tensors differ" is ``differs`` (was ``divergent``).
- 3: one-side groups say whether the other dump has the name at other layers or positions
  (``other_side_has_name``); layer rows count the tensor-positions not compared (``not_compared``).
- 4: ``kind`` (``"dump-diff"``), so that ``logitlab report`` knows the result.
- 5: tensor stats carry the fitted factor (``scale``, ``scale_only``); a pair that differs by a
  factor only is not the first divergence (``first_divergence`` is the first other differing pair;
  ``first_by_position`` likewise); ``scale_only`` lists those pairs by name (:class:`ScaleGroup`),
  ``scale_only_before_first`` their labels before the first divergence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from logitlab.dumps.format import format_label, span_label
from logitlab.dumps.stats import TensorStats
from logitlab.dumps.tensor_names import LAYER_AFTER, LAYER_BEFORE, layer_sort_key, tensor_kind
from logitlab.errors import InputError
from logitlab.jsonio import ResultRecord

SCHEMA_VERSION = 5


@dataclass
class TensorDiff:
    """One aligned tensor-position.

    Attributes:
        name, layer, instance, position, span: the alignment key.
        dtype: numpy dtype name (A's).
        shape: A's shape.
        stats: the comparison, or None when it could not be made.
        problem: why it could not be compared, or None.
    """

    name: str
    layer: int | None
    instance: int
    position: int | None
    span: tuple[int, int] | None
    dtype: str
    shape: tuple[int, ...] | None
    stats: TensorStats | None = None
    problem: str | None = None

    @property
    def label(self) -> str:
        return span_label(self.name, self.layer, self.instance, self.position, self.span)

    @property
    def kind(self) -> str:
        return tensor_kind(self.name)

    @property
    def differs(self) -> bool:
        return self.stats is not None and not self.stats.bit_exact

    @property
    def scale_only(self) -> bool:
        """Differs by a factor only (see :class:`~logitlab.dumps.stats.TensorStats`)."""
        return self.differs and self.stats.scale_only

    @property
    def diverges(self) -> bool:
        """Differs, and not by a factor only: a candidate for the first divergence."""
        return self.differs and not self.stats.scale_only

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "name": self.name, "layer": self.layer, "instance": self.instance,
                "position": self.position, "span": list(self.span) if self.span else None, "dtype": self.dtype,
                "shape": list(self.shape) if self.shape is not None else None, "kind": self.kind,
                "stats": self.stats.to_dict() if self.stats else None, "problem": self.problem}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TensorDiff":
        return cls(data["name"], data.get("layer"), int(data.get("instance", 0)), data.get("position"),
                   tuple(data["span"]) if data.get("span") else None, data["dtype"],
                   tuple(data["shape"]) if data.get("shape") is not None else None,
                   TensorStats.from_dict(data["stats"]) if data.get("stats") else None, data.get("problem"))


@dataclass
class LayerRow:
    """Differences in one layer (``layer`` None with ``where`` "before"/"after" for tensors outside the layers).

    Attributes:
        compared: tensor-positions compared; differing: of which not bit-exact.
        not_compared: aligned tensor-positions that could not be compared (dtype, size, unreadable).
        max_abs_diff, max_ulp, max_nmse, min_cosine: worst over the layer.
        first: label of the layer's first differing tensor-position (execution order).
    """

    layer: int | None
    where: str
    compared: int = 0
    differing: int = 0
    not_compared: int = 0
    max_abs_diff: float = 0.0
    max_ulp: int = 0
    max_nmse: float = 0.0
    min_cosine: float = 1.0
    first: str | None = None

    @property
    def label(self) -> str:
        return str(self.layer) if self.layer is not None else {"before": "input", "after": "output"}[self.where]

    def add(self, diff: TensorDiff) -> None:
        s = diff.stats
        if s is None:
            self.not_compared += 1
            return
        self.compared += 1
        if s.bit_exact:
            return
        self.differing += 1
        if self.first is None:
            self.first = diff.label
        if math.isfinite(s.max_abs_diff):
            self.max_abs_diff = max(self.max_abs_diff, s.max_abs_diff)
        self.max_ulp = max(self.max_ulp, s.max_ulp)
        if not math.isnan(s.nmse):
            self.max_nmse = max(self.max_nmse, s.nmse)
        if not math.isnan(s.cosine):
            self.min_cosine = min(self.min_cosine, s.cosine)

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "label": self.label, "compared": self.compared, "differing": self.differing,
                "not_compared": self.not_compared, "max_abs_diff": self.max_abs_diff, "max_ulp": self.max_ulp,
                "max_nmse": self.max_nmse, "min_cosine": self.min_cosine, "first": self.first}


@dataclass
class OneSideGroup:
    """Tensors present in one dump only, grouped by name and instance.

    ``other_side_has_name``: the other dump has this name and instance at other layers or positions
    (it misses some, e.g. a step file is missing), rather than not at all (e.g. fused away).
    """

    side: str
    name: str
    instance: int
    layers: list[int]
    positions: list[int]
    count: int
    other_side_has_name: bool = False

    @property
    def label(self) -> str:
        return format_label(self.name, None, self.instance)

    def to_dict(self) -> dict[str, Any]:
        return {"side": self.side, "name": self.name, "instance": self.instance, "label": self.label,
                "layers": compress_ranges(self.layers), "positions": compress_ranges(self.positions),
                "count": self.count, "other_side_has_name": self.other_side_has_name}


@dataclass
class ScaleGroup:
    """Pairs of one name (and layer, instance) that differ by a factor only: B ≈ scale × A.

    Attributes:
        name, layer, instance: the tensor.
        positions: the positions where it is scale-only (empty for a tensor without positions).
        count: scale-only tensor-positions; min_scale, max_scale: the fitted factors' range;
        min_cosine: the lowest cosine among them.
    """

    name: str
    layer: int | None
    instance: int
    positions: list[int]
    count: int
    min_scale: float
    max_scale: float
    min_cosine: float

    @property
    def label(self) -> str:
        return format_label(self.name, self.layer, self.instance)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "layer": self.layer, "instance": self.instance, "label": self.label,
                "positions": compress_ranges(self.positions), "count": self.count, "min_scale": self.min_scale,
                "max_scale": self.max_scale, "min_cosine": self.min_cosine}


def scale_groups(tensors: list[TensorDiff]) -> list[ScaleGroup]:
    """The scale-only pairs of ``tensors`` grouped by (name, layer, instance), in order of first appearance."""
    groups: dict[tuple, ScaleGroup] = {}
    for t in tensors:
        if not t.scale_only:
            continue
        s = t.stats
        key = (t.name, t.layer, t.instance)
        g = groups.get(key)
        if g is None:
            g = groups[key] = ScaleGroup(t.name, t.layer, t.instance, [], 0, s.scale, s.scale, s.cosine)
        g.count += 1
        g.min_scale, g.max_scale = min(g.min_scale, s.scale), max(g.max_scale, s.scale)
        g.min_cosine = min(g.min_cosine, s.cosine)
        if t.position is not None:
            g.positions.append(t.position)
    return list(groups.values())


def compress_ranges(values: list[int]) -> str:
    """``[0,1,2,5,7,8]`` -> ``"0-2,5,7-8"``; empty -> ``""``."""
    values = sorted(set(values))
    parts, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass
class DumpDiffResult(ResultRecord):
    """What a dump-diff found. Round-trips through JSON (``to_dict``/``from_dict``).

    Attributes:
        left, right: descriptions of dump A (control) and B (candidate).
        tensors: every aligned tensor-position, in A's execution order.
        only_left, only_right: tensors present in one dump only, grouped.
        problems: one line per problem (files, pairs, inputs).
        layers: the per-layer table, in execution order.
    """

    KIND: ClassVar[str] = "dump-diff"
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    left: dict[str, Any]
    right: dict[str, Any]
    tensors: list[TensorDiff] = field(default_factory=list)
    only_left: list[OneSideGroup] = field(default_factory=list)
    only_right: list[OneSideGroup] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    layers: list[LayerRow] = field(default_factory=list)

    @property
    def compared(self) -> list[TensorDiff]:
        return [t for t in self.tensors if t.stats is not None]

    @property
    def n_aligned(self) -> int:
        return len(self.tensors)

    @property
    def n_compared(self) -> int:
        return sum(1 for t in self.tensors if t.stats is not None)

    @property
    def n_differing(self) -> int:
        return sum(1 for t in self.tensors if t.differs)

    @property
    def n_unresolved(self) -> int:
        return sum(1 for t in self.tensors if t.stats is None)

    @property
    def first_divergence(self) -> TensorDiff | None:
        """The first differing pair in A's execution order that does not differ by a factor only."""
        return next((t for t in self.tensors if t.diverges), None)

    @property
    def first_index(self) -> int | None:
        return next((i for i, t in enumerate(self.tensors) if t.diverges), None)

    @property
    def scale_only(self) -> list[ScaleGroup]:
        """Every pair that differs by a factor only, grouped by name."""
        return scale_groups(self.tensors)

    @property
    def scale_only_before_first(self) -> list[ScaleGroup]:
        """The scale-only pairs before the first divergence (all of them when there is none), grouped."""
        stop = self.first_index if self.first_index is not None else len(self.tensors)
        return scale_groups(self.tensors[:stop])

    @property
    def unresolved_before_first(self) -> list[TensorDiff]:
        """Pairs that could not be compared and come before the first divergence (it may hide there)."""
        stop = self.first_index if self.first_index is not None else len(self.tensors)
        return [t for t in self.tensors[:stop] if t.stats is None]

    @property
    def verdict(self) -> str:
        """``nothing-aligned``, ``differs``, ``bit-exact`` (all compared pairs) or ``incomplete``
        (no difference found, but some pairs or one-side tensors could not be compared)."""
        if self.n_compared == 0:
            return "nothing-aligned"
        if self.n_differing:
            return "differs"
        if self.n_unresolved or self.only_left or self.only_right:
            return "incomplete"
        return "bit-exact"

    def first_by_position(self) -> dict[int, str]:
        """For each position, the label of its first differing tensor that is not scale-only (execution order)."""
        out: dict[int, str] = {}
        for t in self.tensors:
            if t.diverges and t.position is not None and t.position not in out:
                out[t.position] = t.label
        return dict(sorted(out.items()))

    def summary(self) -> dict[str, Any]:
        """A compact JSON-able summary: counts, first divergence, layer table, one-side groups, problems."""
        first = self.first_divergence
        return {
            "kind": self.KIND,
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict,
            "left": {k: v for k, v in self.left.items() if k != "input_ids"},
            "right": {k: v for k, v in self.right.items() if k != "input_ids"},
            "n_aligned": self.n_aligned, "n_compared": self.n_compared, "n_differing": self.n_differing,
            "n_bit_exact": self.n_compared - self.n_differing, "n_unresolved": self.n_unresolved,
            "first_divergence": first.to_dict() if first else None,
            "bit_exact_before_first": (sum(1 for t in self.tensors[: self.first_index]
                                           if t.stats is not None and not t.differs) if first else None),
            "scale_only": [g.to_dict() for g in self.scale_only],
            "scale_only_before_first": [g.label for g in self.scale_only_before_first],
            "unresolved_before_first": [t.label for t in self.unresolved_before_first],
            "first_by_position": self.first_by_position(),
            "layers": [row.to_dict() for row in self.layers],
            "only_left": [g.to_dict() for g in self.only_left],
            "only_right": [g.to_dict() for g in self.only_right],
            "problems": list(self.problems),
        }

    def to_dict(self) -> dict[str, Any]:
        """Everything: the summary plus every aligned tensor-position."""
        data = self.summary()
        data["left"], data["right"] = self.left, self.right
        data["tensors"] = [t.to_dict() for t in self.tensors]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DumpDiffResult":
        """Rebuild from :meth:`to_dict` output (the layer table and groups are recomputed).

        Raises:
            InputError: not a dump-diff result of this schema version, or damaged.
        """
        if not isinstance(data, dict) or data.get("kind") != cls.KIND:
            raise InputError("this is not a dump-diff result (no \"kind\": \"dump-diff\")")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise InputError(f"this dump-diff result has schema_version {data.get('schema_version')!r}; this "
                             f"logitlab reads {SCHEMA_VERSION}: run dump-diff again")
        try:
            return cls._from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise InputError(f"damaged dump-diff result: {exc!r}") from None

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "DumpDiffResult":
        result = cls(dict(data["left"]), dict(data["right"]),
                     [TensorDiff.from_dict(t) for t in data.get("tensors", [])],
                     problems=list(data.get("problems", [])))
        for side, key in (("left", "only_left"), ("right", "only_right")):
            groups = []
            for g in data.get(key, []):
                groups.append(OneSideGroup(side, g["name"], int(g["instance"]), _expand(g["layers"]),
                                           _expand(g["positions"]), int(g["count"]),
                                           bool(g.get("other_side_has_name", False))))
            setattr(result, key, groups)
        result.layers = layer_table(result.tensors)
        return result


#: Most numbers a saved range list (``"0-3,7"``) may expand to: more than any dump holds.
_MAX_EXPANDED = 10_000_000


def _expand(text: str) -> list[int]:
    """``"0-3,7"`` → ``[0, 1, 2, 3, 7]``.

    Raises:
        ValueError: not such a list, or one of more than ``_MAX_EXPANDED`` numbers.
        AttributeError: not a string.
    """
    out: list[int] = []
    for part in filter(None, (text or "").split(",")):
        lo, _, hi = part.partition("-")
        if len(out) + int(hi or lo) - int(lo) >= _MAX_EXPANDED:
            raise ValueError(f"the range list {text[:40]!r} expands to more than {_MAX_EXPANDED} numbers")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def layer_table(tensors: list[TensorDiff]) -> list[LayerRow]:
    """Per-layer rows in order of first appearance (execution order)."""
    rows: dict[tuple, LayerRow] = {}
    for t in tensors:
        key = (layer_sort_key(t.name, t.layer),)
        row = rows.get(key)
        if row is None:
            where = "layer" if t.layer is not None else (
                "before" if key[0] == LAYER_BEFORE else "after" if key[0] == LAYER_AFTER else "layer")
            row = rows[key] = LayerRow(t.layer, where)
        row.add(t)
    return sorted(rows.values(), key=lambda r: r.layer if r.layer is not None
                  else (LAYER_BEFORE if r.where == "before" else LAYER_AFTER))


__all__ = ["DumpDiffResult", "LayerRow", "OneSideGroup", "ScaleGroup", "TensorDiff", "compress_ranges",
           "layer_table", "scale_groups"]
