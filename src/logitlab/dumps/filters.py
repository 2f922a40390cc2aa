"""The tensor-filter grammar: which tensors a capture keeps, or a diff compares.

``--names`` takes comma-separated globs on a tensor's name, with or without its
layer (``attn_*,l_out``, ``kq-0``); ``--layers`` takes ranges (``0-3,7,10-12``);
``--positions`` takes the SPEC every command shares (:mod:`logitlab.positions`:
``all``, ``prompt``, ``decode``, ``last``, ``every:K``, ``A``, ``A-B``, ``A-``),
with the same meaning as in ``ab`` or ``verify``: a dump of N prompt tokens and
D decode steps has token positions 0 … N+D-1, the prompt's 0 … N-1.
:meth:`TensorFilter.parse` turns the three option values into a
:class:`TensorFilter`; a malformed value is an
:class:`~logitlab.errors.InputError` that names its option. A ``--positions``
SPEC is resolved to position numbers once the run is known
(:meth:`TensorFilter.for_run`: N and D of a capture, or of a dump's manifest).
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from logitlab.dumps.format import format_label
from logitlab.errors import InputError, InternalError
from logitlab.positions import Positions, parse_positions


# --------------------------------------------------------------------------- ranges
#: Largest layer or position a filter takes (llama.cpp's positions, ``llama_pos``, and layer indices are int32).
MAX_INDEX = 2**31 - 1
#: Most values one ``--layers``/``--positions`` filter may cover (it is held as a set; no dump has that many).
MAX_FILTER_VALUES = 2**20


def parse_ranges(text: str | None, option: str) -> frozenset[int] | None:
    """Parse ``"0-3,7,10-12"`` (the value of ``option``, e.g. ``--layers``) into a set of ints; None -> None (all).

    Raises:
        InputError: naming ``option``: an empty value or item, a part that is not N or A-B with
            0 <= A <= B <= MAX_INDEX, or more than MAX_FILTER_VALUES values in all.
    """
    if text is None:
        return None
    parts = _items(str(text), option, "ranges like 0-3,7")
    spans = [_span(part, option) for part in parts]
    if sum(stop - start + 1 for start, stop in spans) > MAX_FILTER_VALUES:
        raise InputError(f"{option} {text} covers more than {MAX_FILTER_VALUES} values: give the ranges you need")
    return frozenset(v for start, stop in spans for v in range(start, stop + 1))


def _items(text: str, option: str, example: str) -> list[str]:
    """The comma-separated items of an option's value, stripped.

    Raises:
        InputError: the value or one item is empty.
    """
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise InputError(f"{option} {text!r} is empty: give {example}, or leave {option} out for all")
    if not all(items):
        raise InputError(f"{option} {text!r} has an empty item: give {example}, one comma between items")
    return items


def _span(part: str, option: str) -> tuple[int, int]:
    """``"3"`` -> (3, 3), ``"0-3"`` -> (0, 3).

    Raises:
        InputError: not N or A-B with 0 <= A <= B <= MAX_INDEX.
    """
    lo, sep, hi = part.partition("-")
    try:
        start = int(lo)
        stop = int(hi) if sep else start
    except ValueError:
        raise InputError(f"bad {option} item {part!r}: expected N or A-B, e.g. 0-3,7") from None
    if start < 0 or stop < start:
        raise InputError(f"bad {option} range {part!r}: expected 0 <= A <= B")
    if stop > MAX_INDEX:
        raise InputError(f"bad {option} item {part!r}: beyond {MAX_INDEX}, the largest layer or position (int32)")
    return start, stop


def _check_glob(pattern: str) -> str:
    """``pattern`` if it is a well-formed glob.

    Raises:
        InputError: a ``[`` without its closing ``]`` (fnmatch would match a literal ``[``, which no tensor
            name holds).
    """
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            j = i + 1 + (pattern[i + 1 : i + 2] == "!")
            j = pattern.find("]", j + (pattern[j : j + 1] == "]"))
            if j < 0:
                raise InputError(f"bad --names glob {pattern!r}: '[' without a closing ']'")
            i = j
        i += 1
    return pattern


def format_ranges(values: Iterable[int]) -> str:
    """The inverse of :func:`parse_ranges`: ``{0, 1, 2, 3, 7}`` -> ``"0-3,7"``."""
    parts: list[list[int]] = []
    for v in sorted(set(values)):
        if parts and v == parts[-1][1] + 1:
            parts[-1][1] = v
        else:
            parts.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


# --------------------------------------------------------------------------- filter
@dataclass(frozen=True)
class TensorFilter:
    """Which tensors a capture keeps, or a diff compares.

    Attributes:
        names: glob patterns on the name without the layer (``attn_*``,
            ``ffn_out``, ``result_output``) or with it (``kq-0``); empty = all.
        layers: layer numbers to keep; None = all. Tensors outside the layers
            (``embd``, ``result_output``) are kept whatever the layers.
        positions: token positions to keep; None = all (or, with ``spec``, not
            resolved yet).
        spec: the ``--positions`` SPEC these positions come from (None: no
            spec, or ``all``); while ``positions`` is None it still needs the
            run (:meth:`for_run`) before positions can be tested.
    """

    names: tuple[str, ...] = ()
    layers: frozenset[int] | None = None
    positions: frozenset[int] | None = None
    spec: Positions | None = None

    @classmethod
    def parse(cls, names: str | Sequence[str] | None = None, layers: str | None = None,
              positions: str | None = None) -> "TensorFilter":
        """Build from command-line text: ``names`` comma-separated globs, ``layers`` ranges, ``positions`` a
        SPEC (:func:`logitlab.positions.parse_positions`, resolved later by :meth:`for_run`).

        None means everything; an empty value is an error.

        Raises:
            InputError: an empty value or item, a malformed glob, range or SPEC (naming the option).
        """
        if isinstance(names, str):
            names = [names]
        patterns = tuple(_check_glob(p) for item in (names or ()) for p in _items(item, "--names", "globs like "
                                                                                    "'attn_*,l_out'"))
        spec = parse_positions(positions) if positions is not None else None
        return cls(patterns, parse_ranges(layers, "--layers"), None, None if spec is None or spec.is_all else spec)

    @property
    def resolved(self) -> bool:
        """Can positions be tested (no SPEC, or a SPEC already turned into positions)?"""
        return self.spec is None or self.positions is not None

    @property
    def positions_text(self) -> str:
        """The ``--positions`` value for messages: the SPEC as given, else the positions as ranges."""
        return self.spec.spec if self.spec is not None else format_ranges(self.positions or ())

    def for_run(self, n_prompt: int, n_decode: int, *, run: str | None = None) -> "TensorFilter":
        """This filter with its SPEC turned into the positions of a run of ``n_prompt`` prompt and ``n_decode``
        decode positions (:meth:`logitlab.positions.Positions.rows`: the rows ``ab`` would keep of that run);
        itself when there is nothing to resolve. ``run`` describes the run in messages.

        Raises:
            InputError: a position past the run's last one, or a SPEC that selects none (one line naming
                ``--positions``, as ``ab`` says it).
        """
        if self.resolved:
            return self
        rows = self.spec.rows(n_prompt, n_decode, run=run)
        return dataclasses.replace(self, positions=frozenset(int(r) for r in rows))

    def keeps_name(self, name: str, layer: int | None) -> bool:
        if self.layers is not None and layer is not None and layer not in self.layers:
            return False
        if not self.names:
            return True
        full = format_label(name, layer)
        return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(full, p) for p in self.names)

    def keeps_position(self, position: int | None) -> bool:
        """Is token ``position`` kept (None: a tensor without a position, always kept)?

        Raises:
            InternalError: the ``--positions`` SPEC was not resolved against the run first (:meth:`for_run`).
        """
        self._check_resolved()
        return self.positions is None or position is None or position in self.positions

    def keeps_span(self, start: int, stop: int) -> bool:
        """Is any position of ``[start, stop)`` kept? Raises InternalError as :meth:`keeps_position`."""
        self._check_resolved()
        return self.positions is None or any(p in self.positions for p in range(start, stop))

    def _check_resolved(self) -> None:
        if not self.resolved:
            raise InternalError(f"--positions {self.spec.spec!r} was not resolved against the run (for_run) "
                                "before positions were tested")

    def to_dict(self) -> dict[str, Any]:
        return {"names": list(self.names),
                "layers": sorted(self.layers) if self.layers is not None else None,
                "positions": sorted(self.positions) if self.positions is not None else None,
                "positions_spec": self.spec.spec if self.spec is not None else None}
