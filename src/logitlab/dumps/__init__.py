"""Dumps of intermediate tensors and dump-diff: where two runs part.

- :mod:`~logitlab.dumps.format`: the dump folder (manifest + one safetensors file per step): its layout,
  version, dtypes and tensor labels; :mod:`~logitlab.dumps.manifest` (``manifest.json``),
  :mod:`~logitlab.dumps.step_writer` (step files streamed to disk), :mod:`~logitlab.dumps.safetensors_io`
  (safetensors headers and tensors read), :mod:`~logitlab.dumps.filters` (``--names``/``--layers``/
  ``--positions``), :mod:`~logitlab.dumps.sizes` (``--max-bytes``).
- :mod:`~logitlab.dumps.capture`: what every capture shares (step files, filters, ``--max-bytes``, the
  prefill + decode driver).
- :mod:`~logitlab.dumps.capture_llamacpp`: capture from llama.cpp through ggml's eval callback.
- :mod:`~logitlab.dumps.capture_hf`: capture from transformers through forward hooks, under llama.cpp's
  tensor names where the two correspond (:mod:`~logitlab.dumps.hf_names`: one table per architecture).
- :mod:`~logitlab.dumps.readers`: open logitlab dumps and dumps made elsewhere (raw f32/i32, .npy, .safetensors)
  as a :mod:`~logitlab.dumps.dump`; :mod:`~logitlab.dumps.read_logitlab`, :mod:`~logitlab.dumps.read_files`
  and :mod:`~logitlab.dumps.shapes` (shapes for raw files) do the reading.
- :mod:`~logitlab.dumps.tensor_names`: llama.cpp's op order (the walk order of dumps that record none) and
  the kind of tensor a name is.
- :mod:`~logitlab.dumps.stats`: per-tensor statistics (bit-exact, ULP histogram, NMSE, cosine, a fitted scale).
- :mod:`~logitlab.dumps.diff`: align, compare in execution order, first divergence, per-layer growth;
  its records, :mod:`~logitlab.dumps.diff_results`.
- :mod:`~logitlab.dumps.run`: dump a variant or a pair; :func:`localize` for ``ab --localize``.

Nothing here imports an engine library until a capture runs.
"""

from logitlab.dumps.diff import diff_dumps
from logitlab.dumps.diff_results import DumpDiffResult
from logitlab.dumps.dump import Dump
from logitlab.dumps.filters import TensorFilter
from logitlab.dumps.readers import open_dump
from logitlab.dumps.run import dump_pair, dump_variant, localize
from logitlab.dumps.shapes import ShapeSpec
from logitlab.dumps.stats import TensorStats, tensor_stats

__all__ = ["Dump", "DumpDiffResult", "ShapeSpec", "TensorFilter", "TensorStats", "diff_dumps", "dump_pair",
           "dump_variant", "localize", "open_dump", "tensor_stats"]
