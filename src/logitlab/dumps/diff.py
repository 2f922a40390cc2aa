"""dump-diff: align two dumps by (name, layer, position), walk them in
execution order, and find where they part.

The left dump (A, the control) sets the order: its execution order when it
is a logitlab dump, else the layer-major order of :mod:`logitlab.dumps.readers`.
Each aligned pair gets :class:`~logitlab.dumps.stats.TensorStats`; the first
pair that is not bit-exact is the **first divergence**, and a per-layer table
shows how the difference grows from there. Tensors on one side only are
grouped and listed; pairs that cannot be compared (truncated file, dtype or
size mismatch) are listed as problems, one line each, and the rest of the diff
goes on.

Overall verdict: ``bit-exact``, ``differs`` (some compared tensors differ),
``incomplete`` (none differs, but not everything could be compared) or
``nothing-aligned``. (Not ``ab``'s verdict words: for ``ab``, *divergent*
means a real bug, while a dump of flash attention vs not simply *differs*.)

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
from typing import Any, Callable, ClassVar

from logitlab.dumps.capture import check_filter_matches
from logitlab.dumps.format import TensorFilter, format_label, format_ranges
from logitlab.dumps.readers import LAYER_AFTER, LAYER_BEFORE, Dump, TensorRef, layer_sort_key
from logitlab.dumps.stats import TensorStats, tensor_stats
from logitlab.errors import InputError
from logitlab.jsonio import ResultRecord

SCHEMA_VERSION = 5

#: Names of attention tensors (llama.cpp's, and the hf capture's own ``q_proj``/``k_proj``), for saying what
#: kind of tensor diverged first.
ATTENTION_NAMES = frozenset({
    "Qcur", "Kcur", "Vcur", "Qcur_normed", "Kcur_normed", "q", "k", "v", "wqkv", "bqkv", "kq", "kq_scaled",
    "kq_masked", "kq_soft_max", "kq_soft_max_ext", "__fattn__", "fattn", "kqv", "kqv_merged", "kqv_merged_cont",
    "kqv_out", "kqv_wo", "attn_out", "q_proj", "k_proj",
})
#: FFN tensors of the hf capture without a llama.cpp name.
HF_FFN_NAMES = frozenset({"act_fn", "down_proj_in"})


def tensor_kind(name: str) -> str:
    """``attention``, ``ffn``, ``norm``, ``residual``, ``embedding``, ``output`` or ``other``.

    Knows llama.cpp's names and the hf capture's own (``q_proj``, ``act_fn``; for architectures without a
    name table, hf module paths such as ``self_attn.o_proj.input`` or ``post_feedforward_layernorm``)."""
    if name in ATTENTION_NAMES or name.startswith("self_attn."):
        return "attention"
    if name.endswith("norm"):  # attn_norm, attn_post_norm, ffn_norm, ffn_post_norm, result_norm, input_layernorm
        return "norm"
    if name.startswith("attn_"):
        return "attention"
    if name.startswith(("ffn_", "mlp.")) or name in HF_FFN_NAMES:
        return "ffn"
    if name in ("l_out", "ffn_inp", "sa_out", "layer"):
        return "residual"
    if name in ("embd", "inp_embd", "inp_scaled", "embed_tokens"):
        return "embedding"
    if name.startswith("result") or name == "lm_head":
        return "output"
    return "other"


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
        text = format_label(self.name, self.layer, self.instance, self.position)
        if self.position is None and self.span is not None:
            text += f"@pos{self.span[0]}-{self.span[1] - 1}"
        return text

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
        except (KeyError, TypeError, ValueError) as exc:
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


def _expand(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, (text or "").split(",")):
        lo, _, hi = part.partition("-")
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


def _group_one_side(refs: list[TensorRef], side: str, other: list[TensorRef]) -> list[OneSideGroup]:
    """Group one dump's unmatched ``refs`` by name and instance; ``other``: the other dump's tensors."""
    other_names = {(ref.name, ref.instance) for ref in other}
    groups: dict[tuple, OneSideGroup] = {}
    for ref in refs:
        key = (ref.name, ref.instance)
        group = groups.get(key)
        if group is None:
            group = groups[key] = OneSideGroup(side, ref.name, ref.instance, [], [], 0, key in other_names)
        group.count += 1
        if ref.layer is not None:
            group.layers.append(ref.layer)
        group.positions.extend(ref.positions)
    for group in groups.values():
        group.layers = sorted(set(group.layers))
        group.positions = sorted(set(group.positions))
    return list(groups.values())


def _check_inputs(left: Dump, right: Dump, problems: list[str]) -> None:
    if left.manifest is None or right.manifest is None:
        return
    a, b = left.manifest.input_ids, right.manifest.input_ids
    n = min(len(a), len(b))
    mismatch = next((i for i in range(n) if a[i] != b[i]), None)
    if mismatch is not None:
        problems.append(f"the dumps ran different inputs: token ids differ at position {mismatch} "
                        f"({a[mismatch]} vs {b[mismatch]}); differences from there on are not the engine's")
    elif len(a) != len(b):
        problems.append(f"the dumps ran {len(a)} and {len(b)} tokens; positions beyond {n - 1} exist on one side")
    ha, hb = left.manifest.engine.get("model_sha256"), right.manifest.engine.get("model_sha256")
    if ha and hb and ha != hb:
        problems.append(f"the dumps come from different model files (sha256 {ha[:12]} vs {hb[:12]})")


def _compare_pair(a: TensorRef, b: TensorRef) -> TensorDiff:
    diff = TensorDiff(a.name, a.layer, a.instance, a.position, a.span, a.dtype, a.shape)
    label = a.label
    if a.defect or b.defect:
        diff.problem = "; ".join(d for d in (a.defect and f"A: {a.defect}", b.defect and f"B: {b.defect}") if d)
        return diff
    if a.dtype != b.dtype:
        diff.problem = f"{label}: dtype mismatch: A {a.dtype} vs B {b.dtype} (A {a.source}, B {b.source})"
        return diff
    try:
        x = a.load()
        y = b.load()
    except InputError as exc:
        diff.problem = f"{label}: {exc}"
        return diff
    if x.size != y.size:
        what = "truncated?" if min(x.size, y.size) else "empty"
        short_side, short = ("A", a) if x.size < y.size else ("B", b)
        diff.problem = (f"{label}: size mismatch: A {x.size} vs B {y.size} elements ({what}: {short_side} "
                        f"{short.source}); A shape {tuple(x.shape)}, B shape {tuple(y.shape)}")
        return diff
    try:
        diff.stats = tensor_stats(x, y)
    except InputError as exc:
        diff.problem = f"{label}: {exc}"
        return diff
    if tuple(d for d in x.shape if d != 1) != tuple(d for d in y.shape if d != 1):
        diff.problem = (f"{label}: shape mismatch: A {tuple(x.shape)} vs B {tuple(y.shape)}; "
                        "compared as flat vectors")
    return diff


def diff_dumps(left: Dump, right: Dump, *, select: TensorFilter | None = None,
               on_progress: Callable[[int, int], None] | None = None) -> DumpDiffResult:
    """Align and compare two opened dumps.

    Parameters
    ----------
    left, right : Dump
        A (the control: its order is the walk order) and B.
    select : TensorFilter, optional
        Compare only these names / layers / positions.
    on_progress : callable, optional
        Called as ``on_progress(done, total)`` every few hundred pairs.

    Returns
    -------
    DumpDiffResult
        Never raises for bad files: their problems are in ``problems``
        (both dumps' opening problems first). ``verdict`` is
        ``nothing-aligned`` when no pair could be compared.

    Raises
    ------
    InputError
        A ``select`` option (``--names``, ``--layers``, ``--positions``)
        matches none of the tensors of either dump, or together they keep none.
    """
    select = select or TensorFilter()
    a_refs, b_refs = filter_refs(left.refs, select), filter_refs(right.refs, select)
    check_filter(select, left.refs + right.refs, kept=bool(a_refs or b_refs))
    problems = [f"A: {p}" for p in left.problems] + [f"B: {p}" for p in right.problems]
    _check_inputs(left, right, problems)
    b_by_key: dict[tuple, TensorRef] = {}
    for ref in b_refs:
        b_by_key.setdefault(ref.key, ref)
    result = DumpDiffResult(left.describe(), right.describe())
    matched: set[tuple] = set()
    only_left: list[TensorRef] = []
    total = len(a_refs)
    for i, a in enumerate(a_refs):
        b = b_by_key.get(a.key)
        if b is None:
            only_left.append(a)
            continue
        matched.add(a.key)
        diff = _compare_pair(a, b)
        if diff.problem and not (a.defect or b.defect):  # defects are already in the dumps' problems
            problems.append(diff.problem)
        result.tensors.append(diff)
        if on_progress is not None and (i % 256 == 0 or i == total - 1):
            on_progress(i + 1, total)
    only_right = [r for r in b_refs if r.key not in matched]
    result.only_left = _group_one_side(only_left, "left", b_refs)
    result.only_right = _group_one_side(only_right, "right", a_refs)
    if not result.tensors and a_refs and b_refs:
        problems.append("no tensor name/layer/position is in both dumps: check the names (A has "
                        f"{_sample(a_refs)}, B has {_sample(b_refs)}), or give --prefix")
    result.problems = problems
    result.layers = layer_table(result.tensors)
    return result


def filter_refs(refs: list[TensorRef], select: TensorFilter) -> list[TensorRef]:
    """The tensors ``select`` keeps (by name and layer, and by position when the tensor has any)."""
    def keep(ref: TensorRef) -> bool:
        if not select.keeps_name(ref.name, ref.layer):
            return False
        if ref.position is not None:
            return select.keeps_position(ref.position)
        return ref.span is None or select.keeps_span(*ref.span)

    return [ref for ref in refs if keep(ref)]


def check_filter(select: TensorFilter, refs: list[TensorRef], *, kept: bool) -> None:
    """Raise when an option of ``select`` matches none of ``refs`` (both dumps' tensors), or when, together,
    they keep nothing (``kept`` False). Empty ``refs`` (unreadable dumps) pass: their problems say why.

    Raises:
        InputError: naming the option that matches nothing and what the dumps hold.
    """
    if not refs or select == TensorFilter():
        return
    check_filter_matches(select, list(dict.fromkeys((r.name, r.layer) for r in refs)), have="the dumps have")
    positions = {p for ref in refs for p in ref.positions}
    if select.positions is not None and positions and not select.positions & positions:
        raise InputError(f"--positions {format_ranges(select.positions)} matches no position: the dumps have "
                         f"positions {format_ranges(positions)}")
    if not kept:
        raise InputError("--names, --layers and --positions together keep no tensor of either dump")


def _sample(refs: list[TensorRef]) -> str:
    labels = sorted({format_label(r.name, r.layer, r.instance) for r in refs})
    return ", ".join(labels[:3]) + (" ..." if len(labels) > 3 else "")


__all__ = ["ATTENTION_NAMES", "DumpDiffResult", "LayerRow", "OneSideGroup", "ScaleGroup", "TensorDiff",
           "compress_ranges", "diff_dumps", "layer_table", "scale_groups", "tensor_kind"]
