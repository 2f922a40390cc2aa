"""The fields every comparison of two runs has, full-vocabulary or top-k.

:class:`~logitlab.numerics.compare.LogitComparison` (two logit arrays, every
entry) and :class:`~logitlab.numerics.topk.TopKComparison` (two runs that
returned only their top-k log-probabilities) share this field list, so that
verdicts and reports read either one. ``scope`` tells them apart.

JSON format history (``schema_version``):

- 1: first version (two separate field lists).
- 2: one shared field list; ``scope`` on both (``"full"`` or ``"top-k"``).
- 3: ``row_top1_prob_ref`` (optional; version-2 data reads with None there).
- 3: ``row_topk_spread`` (the per-position statistic of the noise floor); version 2
  data still loads, with ``row_topk_spread`` None (verdicts then use the fixed thresholds).
- 4: ``row_delta_z`` (the within-row outlier statistic); older data reads with None
  there (the within-row outlier rule then does not apply).
- 4 (additive): ``positions``, the run position of each compared row when only some
  rows were compared (``--positions``); absent or None: row i is position i.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from logitlab.errors import InputError

__all__ = ["SCHEMA_VERSION", "READABLE_VERSIONS", "SCOPES", "Comparison"]

#: Version of the JSON form of every comparison.
SCHEMA_VERSION = 4
#: Versions :meth:`Comparison.from_dict` reads (a version-2 result has no ``row_top1_prob_ref``).
READABLE_VERSIONS = (2, 3, 4)
#: ``full``: every entry of both arrays; ``top-k``: the entries both runs returned.
SCOPES = ("full", "top-k")
#: Fields that hold one scalar a compared position besides the ``row_*`` statistics.
_POSITION_LISTS = frozenset({"token_ids", "positions"})


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Statistics of one run (observed) against another (reference), position by position.

    Every field is a plain JSON type. Floats that are undefined (the margin of
    a one-token vocabulary, the KLD of a row holding NaN) are ``None``.
    Units: logits (or, for top-k data, log-probabilities in nats) for
    differences, margins and gaps; ULPs of ``dtype`` for ULP fields; nats for
    KLD. "Δ" is ``observed - reference``. ``bool(c)`` is :attr:`bit_exact`.

    Attributes
    ----------
    scope : {'full', 'top-k'}
        What was compared (see :data:`SCOPES`).
    n_positions, n_vocab : int
        Positions, and entries per position that were compared.
    dtype : str
        ``'float32'``, ``'float16'``, ``'bfloat16'`` (or ``'float64'`` for
        top-k values that are not float32 numbers).
    top_k : int
        The k of the top-k statistics.
    differing_entries, differing_rows : int
        Entries whose bits differ, rows with at least one such entry.
    max_abs_diff, mean_abs_diff, mean_diff, std_diff : float
        max |Δ|, mean |Δ|, mean Δ (signed) and population std of Δ.
    max_ulp : int
        Largest element-wise ULP distance.
    max_scaled_ulp : float
        Max over rows of ``max|Δ_row| / spacing(max|reference_row|)``: the
        largest difference in ULPs at the row's own scale.
    ulp_histogram : dict[str, int]
        Entries per ULP-distance bin ``"0", "1", "2-4", "5-16", "17-256", ">256"``.
    argmax_agreement, topk_agreement : float
        Fraction of positions whose argmax, and whose top-k token set, agree.
    kld : dict[str, float | None]
        Per-position KL(P_ref || P_obs) summary: ``mean, max, p99_9, p99, p95,
        p90, median, p10, p5, p1, min`` (nats).
    nan_ref, nan_obs, inf_ref, inf_obs : int
        NaN and ±inf counts of each side.
    nonfinite_mismatch : int
        Entries where the two sides differ in being NaN, +inf, -inf or finite.
    first_mismatch : dict or None
        The first differing entry: ``position, token_id, reference_hex,
        observed_hex, reference_bits, observed_bits, reference, observed, ulp``.
    flips : list[dict]
        One per position whose argmax differs: ``position, token_ref,
        token_obs, logit_ref_top, logit_obs_top, margin_ref, margin_obs,
        topk_ref, topk_obs``.
    row_* : list
        Per position (``n_positions`` entries each): ``row_differing``,
        ``row_max_abs_diff``, ``row_mean_diff``, ``row_std_diff``,
        ``row_argmax_ref``, ``row_argmax_obs``, ``row_margin_ref`` /
        ``row_margin_obs`` (top-1 minus top-2), ``row_kth_gap_ref`` (k-th minus
        (k+1)-th largest reference value), ``row_topk_agree``, ``row_kld``
        (nats), ``row_max_ulp``, ``row_scaled_ulp``.
    row_top1_prob_ref : list[float | None] or None
        The reference's top-1 probability (softmax) per position, where the
        row differs; None at bit-identical positions (not computed: their KLD
        is 0 whatever the confidence) and where undefined. None as a whole
        where not measured (top-k data; results of schema version 2). The
        report's KLD-by-confidence figure reads it.
    row_topk_spread : list[float | None] or None
        Per position, ``max Δ − min Δ`` over the union of both runs' top-k
        tokens (logits; for top-k data: over the keys both runs returned among
        them): how far the change moved the competing tokens against each
        other. A position cannot change its argmax unless this reaches its
        margin (see :func:`logitlab.numerics.floor.topk_spread`). 0 for
        bit-exact rows; None where undefined (NaN), and None as a whole for
        data saved before schema version 3.
    row_delta_z : list[float | None] or None
        Per position, how far the entry that moved most stands from the row's
        own Δ: ``max_i |Δ_i − mean Δ| / sd(Δ)`` over the row's vocabulary
        (dimensionless; ``sd`` with ddof 0). A change that moves every logit
        by rounding-scale noise keeps it near the maximum of V draws (measured
        ≤ 7 at V = 49,152 on real pairs); one entry moved far beyond the row's
        noise stands out. It can never exceed ``sqrt(V − 1)`` (one entry
        carries all of the row's variance). None at bit-identical positions,
        where every Δ is equal (sd 0), and as a whole for top-k data and data
        saved before schema version 4. Read by the within-row outlier rule
        (:func:`logitlab.numerics.verdict_rules.row_outlier`).
    token_ids : list[int] or None
        The token fed at each position, if the caller gave it.
    positions : list[int] or None
        The run position (row of the whole run) of each compared row, when the
        rows are a selection of the run (``--positions``,
        :meth:`at_positions`); None: row i is position i. The ``row_*`` lists
        are indexed by compared row; ``flips`` and ``first_mismatch`` name run
        positions (:meth:`position_of`, :meth:`row_of` convert).
    schema_version : int
        :data:`SCHEMA_VERSION`.
    """

    scope: str = "full"
    n_positions: int
    n_vocab: int
    dtype: str
    top_k: int
    differing_entries: int
    differing_rows: int
    max_abs_diff: float
    mean_abs_diff: float
    mean_diff: float
    std_diff: float
    max_ulp: int
    max_scaled_ulp: float
    ulp_histogram: dict
    argmax_agreement: float
    topk_agreement: float
    kld: dict
    nan_ref: int
    nan_obs: int
    inf_ref: int
    inf_obs: int
    nonfinite_mismatch: int
    first_mismatch: dict | None
    flips: list
    row_differing: list
    row_max_abs_diff: list
    row_mean_diff: list
    row_std_diff: list
    row_argmax_ref: list
    row_argmax_obs: list
    row_margin_ref: list
    row_margin_obs: list
    row_kth_gap_ref: list
    row_topk_agree: list
    row_kld: list
    row_max_ulp: list
    row_scaled_ulp: list
    row_top1_prob_ref: list | None = None
    row_topk_spread: list | None = None
    row_delta_z: list | None = None
    token_ids: list | None = None
    positions: list | None = None
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        name = type(self).__name__
        if self.scope not in SCOPES:
            raise InputError(f"{name}.scope {self.scope!r} is not one of {', '.join(SCOPES)}")
        for f in dataclasses.fields(self):
            rows = getattr(self, f.name)
            if f.name.startswith("row_") and rows is not None and len(rows) != self.n_positions:
                raise InputError(f"{name}.{f.name} has {len(getattr(self, f.name))} entries, "
                                 f"expected n_positions = {self.n_positions}")
        for listed in ("token_ids", "positions"):
            values = getattr(self, listed)
            if values is not None and len(values) != self.n_positions:
                raise InputError(f"{name}.{listed} has {len(values)} entries, "
                                 f"expected n_positions = {self.n_positions}")

    @property
    def bit_exact(self) -> bool:
        """True iff every compared entry has identical bits."""
        return self.differing_entries == 0

    def __bool__(self) -> bool:
        return self.bit_exact

    def position_of(self, row: int) -> int:
        """The run position of compared row ``row`` (``row`` itself unless :attr:`positions` is set)."""
        return row if self.positions is None else int(self.positions[row])

    def row_of(self, position: int) -> int:
        """The compared row of run position ``position`` (the inverse of :meth:`position_of`).

        Raises:
            ValueError: ``position`` was not compared.
        """
        return position if self.positions is None else self.positions.index(position)

    def at_positions(self, positions: Sequence[int]) -> "Comparison":
        """This comparison of selected rows, told which run position each row is: :attr:`positions` set, and the
        positions of ``flips`` and ``first_mismatch`` (row indices as computed) moved to run positions.

        Raises:
            InputError: ``positions`` does not have :attr:`n_positions` entries.
        """
        at = [int(p) for p in positions]
        first = self.first_mismatch
        return dataclasses.replace(
            self, positions=at, flips=[{**f, "position": at[f["position"]]} for f in self.flips],
            first_mismatch=None if first is None else {**first, "position": at[first["position"]]})

    @property
    def topk_changes(self) -> list[int]:
        """Compared rows whose top-k token set differs (row indices: :meth:`position_of` gives their positions)."""
        return [i for i, ok in enumerate(self.row_topk_agree) if ok is not None and not ok]

    def to_dict(self) -> dict[str, Any]:
        """What ``dataclasses.asdict(self)`` gives — plain JSON types, every list and dict a copy — with
        ``positions`` only where rows were selected.

        The per-position lists (``row_*``, ``token_ids``, ``positions``: one scalar a position) are copied
        flat; ``asdict`` deep-copies each of their entries one at a time (17 lists × 2,016 entries a comparison
        of a 2k-position run), which was the largest cost of ``ab``'s own process at production sizes (3.5 s of
        a 10-run ``ab`` at 2,016 positions under cProfile; ``benchmarks/bench_scale.py`` prints the time
        outside the engine's steps).
        """
        from logitlab.jsonio import without_none  # here, not at the top: this module stays stdlib only

        data = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            flat = value is not None and (f.name.startswith("row_") or f.name in _POSITION_LISTS)
            data[f.name] = list(value) if flat else copy.deepcopy(value)
        return without_none(data, "positions")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Comparison":
        """Rebuild from :meth:`to_dict` / ``json.loads`` output.

        Raises:
            InputError: not a mapping, an unknown schema version, or missing / unknown keys.
        """
        name = cls.__name__
        if not isinstance(data, Mapping):
            raise InputError(f"{name} data must be a dict, got {type(data).__name__}")
        version = data.get("schema_version", SCHEMA_VERSION)
        if version not in READABLE_VERSIONS:
            raise InputError(f"{name} schema_version {version} not supported "
                             f"(this logitlab reads {', '.join(map(str, READABLE_VERSIONS))})")
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        missing = sorted(required - data.keys())
        unknown = sorted(data.keys() - names)
        if missing or unknown:
            raise InputError(f"{name} data: missing keys {missing}, unknown keys {unknown}")
        return cls(**{**data, "schema_version": SCHEMA_VERSION})
