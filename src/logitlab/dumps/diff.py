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

The records it makes are in :mod:`~logitlab.dumps.diff_results` (with the
JSON format history); what kind of tensor a name is, in
:mod:`~logitlab.dumps.tensor_names`.
"""

from __future__ import annotations

from typing import Callable

from logitlab.dumps.capture import check_filter_matches
from logitlab.dumps.diff_results import DumpDiffResult, OneSideGroup, TensorDiff, layer_table
from logitlab.dumps.dump import Dump, TensorRef
from logitlab.dumps.filters import TensorFilter, format_ranges
from logitlab.dumps.format import format_label
from logitlab.dumps.stats import tensor_stats
from logitlab.errors import InputError


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
        matches none of the tensors of either dump, or together they keep none;
        a ``--positions`` SPEC that cannot be applied to the dumps
        (:func:`positions_of_dumps`).
    """
    select = positions_of_dumps(select or TensorFilter(), left, right)
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


def positions_of_dumps(select: TensorFilter, left: Dump, right: Dump) -> TensorFilter:
    """``select`` with its ``--positions`` SPEC resolved against the run the dumps record.

    A logitlab dump's manifest records the run: N prompt tokens (``prompt_ids``) and D decode steps
    (``generated``), token positions 0 … N+D-1, so every word means what it means to ``ab`` (``prompt``: 0 … N-1,
    ``decode``: N … N+D-1, ``last``: N+D-1); A's manifest counts, else B's. Raw files record positions only: the
    run is taken as positions 0 … P (P the largest position in either dump), and ``prompt``/``decode``, which
    need to know where the prompt ends, are refused. Dumps whose tensors have no positions keep everything.

    Raises:
        InputError: a position past the run's last one, a SPEC that selects none, or ``prompt``/``decode`` on
            dumps that do not record the prompt (one line naming ``--positions``).
    """
    if select.resolved:
        return select
    held = {p for dump in (left, right) for ref in dump.refs for p in ref.positions}
    manifest = next((d.manifest for d in (left, right) if d.manifest is not None and d.manifest.prompt_ids), None)
    if manifest is not None:
        return select.for_run(len(manifest.prompt_ids), len(manifest.generated))
    if not held:
        return TensorFilter(select.names, select.layers)
    words = select.spec.split_words
    if words:
        raise InputError(f"--positions {select.spec.spec!r}: {words[0]!r} needs to know where the prompt ends, which "
                         f"only a logitlab dump records (neither dump has a manifest); give position numbers: the "
                         f"dumps have positions {format_ranges(held)}")
    return select.for_run(max(held) + 1, 0, run=f"the dumps have positions {format_ranges(held)}")


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
        raise InputError(f"--positions {select.positions_text} matches no position: the dumps have "
                         f"positions {format_ranges(positions)}")
    if not kept:
        raise InputError("--names, --layers and --positions together keep no tensor of either dump")


def _sample(refs: list[TensorRef]) -> str:
    labels = sorted({format_label(r.name, r.layer, r.instance) for r in refs})
    return ", ".join(labels[:3]) + (" ..." if len(labels) > 3 else "")


__all__ = ["diff_dumps", "positions_of_dumps"]
