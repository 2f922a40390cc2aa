"""dump-diff throughput on ≥ 1 GB of raw float32 dumps, as a ratio to reading the same bytes once.

Writes two folders of raw little-endian float32 files named as the seed
report's dump-diff protocol does (``<prefix>_<name>-<layer>_pos<pos>.bin``):
LAYERS × NAMES × POSITIONS tensors of WIDTH floats per side. Two scenarios:

- ``divergent``: B differs from A from layer 2 on (a few ULPs, growing per
  layer), so ~90 % of the pairs take the full statistics path
  (ULP histogram, NMSE, cosine);
- ``bit-exact``: B is a byte copy of A (the bit-pattern fast path).

Baseline: reading every file of both folders once into memory
(``Path.read_bytes``). Both are timed with the files in the page cache (a
warm-up pass reads them first), alternated, best of ``--rounds``. The
dump-diff time covers opening both dumps (listing, parsing names, stat) and
``diff_dumps`` — not rendering.

    python benchmarks/bench_dump_diff.py [--gb 1.0] [--width 28672] [--rounds 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from logitlab.dumps import diff_dumps, open_dump

NAMES = ("attn_norm", "kqv_out", "attn_out", "ffn_inp", "ffn_out", "l_out")
POSITIONS = 32


def write_side(folder: Path, prefix: str, layers: int, width: int, diverge_from: int | None, seed: int = 0) -> int:
    """Write one side; returns bytes written. Values come from one seeded stream, so A and B match bit for bit
    until ``diverge_from`` (B only)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    block = rng.normal(0, 1, width * 8).astype(np.float32)
    total = 0
    for layer in range(layers):
        for n, name in enumerate(NAMES):
            for pos in range(POSITIONS):
                start = ((layer * 31 + n * 7 + pos) * 997) % (width * 7)
                value = block[start : start + width].copy()
                if diverge_from is not None and layer >= diverge_from:
                    value.view(np.int32)[::3] += 1 + 4 * (layer - diverge_from)
                value.tofile(folder / f"{prefix}_{name}-{layer}_pos{pos}.bin")
                total += value.nbytes
    return total


def read_all(folders: list[Path]) -> tuple[float, int]:
    start = time.perf_counter()
    n = 0
    for folder in folders:
        for f in sorted(folder.iterdir()):
            n += len(f.read_bytes())
    return time.perf_counter() - start, n


def run_diff(a: Path, b: Path) -> tuple[float, object]:
    start = time.perf_counter()
    result = diff_dumps(open_dump(a), open_dump(b))
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="total size of both sides, GB (10^9 bytes)")
    parser.add_argument("--width", type=int, default=28672, help="floats per tensor file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=str, default=None, help="write the dumps here and keep them")
    args = parser.parse_args()
    per_file = args.width * 4
    layers = max(3, int(np.ceil(args.gb * 1e9 / 2 / (per_file * len(NAMES) * POSITIONS))))
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-dump-diff-"))
    try:
        a, b_div, b_same = root / "a", root / "b_divergent", root / "b_same"
        size = write_side(a, "run_a", layers, args.width, None)
        write_side(b_div, "run_b", layers, args.width, 2)
        shutil.copytree(a, b_same)
        n_files = layers * len(NAMES) * POSITIONS
        print(f"dumps: {layers} layers × {len(NAMES)} names × {POSITIONS} positions = {n_files} files per side, "
              f"{per_file / 1024:.0f} KiB each; {2 * size / 1e9:.2f} GB per comparison (both sides)")
        for label, b in (("divergent", b_div), ("bit-exact", b_same)):
            read_all([a, b])  # warm the page cache
            reads, diffs, result = [], [], None
            for _ in range(args.rounds):
                reads.append(read_all([a, b])[0])
                seconds, result = run_diff(a, b)
                diffs.append(seconds)
            read_s, diff_s = min(reads), min(diffs)
            first = result.first_divergence
            print(f"[{label}] read both folders once: {read_s:.2f} s ({2 * size / 1e9 / read_s:.2f} GB/s); "
                  f"dump-diff: {diff_s:.2f} s ({2 * size / 1e9 / diff_s:.2f} GB/s); ratio dump-diff / read = "
                  f"{diff_s / read_s:.2f}  [{result.n_compared} pairs, {result.n_differing} differing, first: "
                  f"{first.label if first else 'none'}; best of {args.rounds}]")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
