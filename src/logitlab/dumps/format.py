"""The logitlab dump format: a folder with one safetensors file per captured
step and a JSON manifest that describes every tensor.

Layout of a dump folder::

    manifest.json                      what ran and what each tensor is
    step-0000-prefill.safetensors      tensors of the prompt (one engine call)
    step-0001-decode.safetensors       tensors of decode step 1
    ...

The manifest (``"format": "logitlab-dump"``, versioned by ``schema_version``)
holds the engine description, the variant, the model hash, the token ids, the
capture filter, the steps, and one entry per stored tensor: ``key`` (its name
in the step file), ``name``, ``layer`` (None for tensors outside the layers:
``embd``, ``result_norm``, ``result_output``), ``instance`` (0 for the first
tensor of that name and layer in a graph, 1 for the second — llama.cpp names
both RMS norms of a layer ``norm-L``), ``positions`` (the half-open range of
token positions the tensor covers), ``token_axis`` (the numpy axis that runs
over those positions, or None when it could not be told), ``dtype``,
``shape`` (numpy order: ggml's ``ne`` reversed), ``order`` (execution order
over the whole capture), ``step`` and ``op`` (the ggml op; for the hf engine,
the module and side the tensor was taken from, e.g.
``model.layers.3.self_attn.o_proj:input``).

Step files are written by :class:`~logitlab.dumps.step_writer.StepWriter`,
which streams each tensor to disk as it arrives and writes the safetensors
header at the end (the ``safetensors`` library itself needs every array in
memory at once). The files are plain safetensors:
``safetensors.safe_open(path, "numpy")`` reads them.

This module holds the format's vocabulary: its name and version, the dtype
codes and the tensor labels. The rest of it lives beside:

- :mod:`~logitlab.dumps.manifest`: ``manifest.json`` (its entries, reading and checking it, writing it);
- :mod:`~logitlab.dumps.step_writer`: step files, streamed to disk;
- :mod:`~logitlab.dumps.safetensors_io`: reading safetensors headers and tensors;
- :mod:`~logitlab.dumps.filters`: which tensors a capture keeps (``--names``, ``--layers``, ``--positions``);
- :mod:`~logitlab.dumps.sizes`: byte counts (``--max-bytes``) and how they are shown.

Format history:
    1 (logitlab 0.1): first version.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from logitlab.numerics.dtypes import as_dtype

FORMAT_NAME = "logitlab-dump"
SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"

#: numpy dtype name <-> safetensors dtype code
ST_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int32": "I32", "float64": "F64",
             "int64": "I64", "int16": "I16", "int8": "I8", "uint8": "U8"}
NP_DTYPES = {code: name for name, code in ST_DTYPES.items()}

_LABEL = re.compile(r"^(?P<name>.+?)(?:#(?P<instance>\d+))?(?:-(?P<layer>\d+))?(?:#(?P<instance2>\d+))?$")


def np_dtype(name: str) -> np.dtype:
    """numpy dtype for a dtype name (``bfloat16`` through ml_dtypes)."""
    return as_dtype(name)


def is_int(value: Any) -> bool:
    """True for a whole number of a parsed JSON file (an ``int`` that is not a ``bool``)."""
    return isinstance(value, int) and not isinstance(value, bool)


# --------------------------------------------------------------------------- names
def split_label(label: str) -> tuple[str, int | None, int]:
    """Split a llama.cpp tensor name into ``(name, layer, instance)``.

    ``"attn_norm-3"`` -> ``("attn_norm", 3, 0)``; ``"result_output"`` ->
    ``("result_output", None, 0)``; ``"norm-3#1"`` (the second ``norm-3`` of a
    graph, as logitlab labels it) -> ``("norm", 3, 1)``.
    """
    match = _LABEL.match(label)
    if match is None:  # pragma: no cover - the pattern matches any non-empty text
        return label, None, 0
    layer = match.group("layer")
    instance = match.group("instance") or match.group("instance2") or 0
    return match.group("name"), int(layer) if layer is not None else None, int(instance)


def format_label(name: str, layer: int | None, instance: int = 0, position: int | None = None) -> str:
    """``attn_norm-3``, ``norm-3#1``, ``result_output``; with a position, ``...@pos5``."""
    text = name + (f"-{layer}" if layer is not None else "") + (f"#{instance}" if instance else "")
    return text + (f"@pos{position}" if position is not None else "")


def span_label(name: str, layer: int | None, instance: int, position: int | None,
               span: tuple[int, int] | None) -> str:
    """:func:`format_label`, and for a tensor of several positions (``span``, end exclusive) ``...@pos3-7``."""
    text = format_label(name, layer, instance, position)
    if position is None and span is not None:
        text += f"@pos{span[0]}-{span[1] - 1}"
    return text
