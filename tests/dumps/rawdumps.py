"""Crafted dumps for the dump-diff tests: raw little-endian float32 folders in the seed report's naming."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: (layer, name) in llama.cpp's op order within a layer — the order the raw reader walks.
LAYER_NAMES = ("attn_norm", "kqv_out", "ffn_inp", "ffn_out", "l_out")
N_LAYERS = 4
N_POS = 3
WIDTH = 64


def base_tensors(seed: int = 0) -> dict[tuple[str, int | None, int], np.ndarray]:
    """{(name, layer, pos): float32 vector} for a tiny fake model."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(N_LAYERS):
        for name in LAYER_NAMES:
            for pos in range(N_POS):
                tensors[(name, layer, pos)] = rng.normal(0, 1, WIDTH).astype(np.float32)
    for pos in range(N_POS):
        tensors[("result_output", None, pos)] = rng.normal(0, 3, 2 * WIDTH).astype(np.float32)
    return tensors


def plant(tensors: dict, start: tuple[str, int, int], ulps: int = 3) -> dict:
    """Copy of ``tensors`` where ``start`` = (name, layer, pos) and every later tensor of positions >= pos in
    layers >= layer (and the output) differ — growing by layer — as a real divergence would."""
    order = {name: i for i, name in enumerate(LAYER_NAMES)}
    name0, layer0, pos0 = start
    out = {}
    for (name, layer, pos), value in tensors.items():
        value = value.copy()
        downstream = pos >= pos0 and (
            layer is None or layer > layer0 or (layer == layer0 and order[name] >= order[name0]))
        if downstream:
            steps = ulps * (1 + (layer - layer0 if layer is not None else N_LAYERS) * 10)
            bits = value.view(np.int32)
            bits[: WIDTH // 2] += steps
        out[(name, layer, pos)] = value
    return out


def write_folder(folder: Path, tensors: dict, prefix: str, *, ext: str = ".bin") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for (name, layer, pos), value in tensors.items():
        stem = f"{prefix}_{name}" + (f"-{layer}" if layer is not None else "") + f"_pos{pos}"
        value.astype("<f4").tofile(folder / (stem + ext))
    return folder


def raw_path(folder: Path, prefix: str, name: str, layer: int | None, pos: int, ext: str = ".bin") -> Path:
    return folder / (f"{prefix}_{name}" + (f"-{layer}" if layer is not None else "") + f"_pos{pos}{ext}")


def write_logitlab_dump(folder: Path, tensors: dict) -> Path:
    """A logitlab dump of ``tensors``: one step file per position (prefill of position 0, then decode steps),
    each tensor stored as one row ``(1, width)`` in execution order, as a capture writes them."""
    from logitlab.dumps.filters import TensorFilter
    from logitlab.dumps.manifest import DumpManifest, StepInfo, TensorEntry
    from logitlab.dumps.step_writer import StepWriter

    folder.mkdir(parents=True, exist_ok=True)
    entries, steps = [], []
    for pos in range(N_POS):
        kind = "prefill" if pos == 0 else "decode"
        file = f"step-{pos:04d}-{kind}.safetensors"
        writer = StepWriter(folder / file)
        for (name, layer, p), value in tensors.items():
            if p == pos:
                key = f"{len(entries):06d}/{name}" + (f"-{layer}" if layer is not None else "")
                writer.add(key, value.reshape(1, -1))
                entries.append(TensorEntry(key, name, layer, 0, (pos, pos + 1), 0, "float32", (1, value.size),
                                           len(entries), pos, file))
        writer.close()
        steps.append(StepInfo(pos, kind, (pos, pos + 1), file))
    DumpManifest(engine={"engine": "crafted"}, variant={}, prompt_ids=[1], generated=list(range(2, N_POS + 1)),
                 filter=TensorFilter().to_dict(), steps=steps, tensors=entries).write(folder)
    return folder
