"""An opened dump: its tensors (:class:`TensorRef`), addressed by ``(name, layer, instance, position)``.

:func:`~logitlab.dumps.readers.open_dump` builds a :class:`Dump`, whoever made
the dump; a :class:`TensorRef` reads its data only when loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from logitlab.dumps.format import span_label
from logitlab.dumps.manifest import DumpManifest


@dataclass
class TensorRef:
    """One tensor at one position (or one position span) of a dump.

    Attributes:
        name, layer, instance, position: the alignment key (``position`` None
            for a tensor that is not split by position; then ``span``, the
            positions it covers, if known, is part of the key).
        order: sort key giving the execution order within its dump.
        dtype: numpy dtype name.
        shape: shape of the loaded array (None: not known until loaded).
        source: file (and key) it comes from, for messages.
        defect: why it cannot be compared (truncated, mis-sized...), or None.
    """

    name: str
    layer: int | None
    instance: int
    position: int | None
    span: tuple[int, int] | None
    order: tuple
    dtype: str
    shape: tuple[int, ...] | None
    source: str
    loader: Callable[[], np.ndarray] = field(repr=False, default=None)  # type: ignore[assignment]
    defect: str | None = None

    @property
    def key(self) -> tuple:
        where = self.position if self.position is not None else self.span
        return (self.name, self.layer, self.instance, where)

    @property
    def positions(self) -> range:
        """The token positions this tensor covers (empty when not known)."""
        if self.position is not None:
            return range(self.position, self.position + 1)
        return range(*self.span) if self.span is not None else range(0)

    @property
    def label(self) -> str:
        return span_label(self.name, self.layer, self.instance, self.position, self.span)

    def load(self) -> np.ndarray:
        """The tensor's data (an array the caller may keep).

        Raises:
            InputError: the file cannot be read or is not what the index says.
        """
        return self.loader()


@dataclass
class Dump:
    """An opened dump: its tensors in execution order, and what was wrong with it.

    Attributes:
        path: what was opened.
        kind: ``logitlab``, ``raw-f32``, ``raw-i32``, ``npy``, ``safetensors`` or ``mixed``.
        refs: tensors, sorted by ``order``.
        problems: one line per problem found while opening.
        manifest: the logitlab manifest, if any.
    """

    path: str
    kind: str
    refs: list[TensorRef] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    manifest: DumpManifest | None = None

    def describe(self) -> dict[str, Any]:
        """Path, kind, tensor count and, for logitlab dumps, the engine, variant and inputs."""
        info: dict[str, Any] = {"path": self.path, "kind": self.kind, "n_tensors": len(self.refs)}
        if self.manifest is not None:
            m = self.manifest
            info.update({
                "engine": m.engine.get("engine"), "engine_version": m.engine.get("engine_version"),
                "model": m.engine.get("model"), "model_sha256": m.engine.get("model_sha256"),
                "variant": m.variant, "options": m.engine.get("options", {}),
                "n_prompt": len(m.prompt_ids), "n_generated": len(m.generated),
                "input_ids": m.input_ids, "complete": m.complete, "stopped": m.stopped,
            })
        return info
