"""llama-bench JSON (``-o json``: one array) and JSONL (``-o jsonl``: one object a line).

Each row is one test: ``n_prompt`` / ``n_gen`` / ``n_depth`` and the build
and model parameters, with ``samples_ts`` (tokens/s of each repetition: the
samples) and ``avg_ts`` (their mean, used when there are no samples). The
scenario name is the test (``pp512``, ``tg128``, ``pp512+tg128``, ``@d4096``
for a depth) prefixed by the model type, plus every parameter that varies
between the rows of the file (e.g. ``n_threads=4``).

Reference: llama.cpp ``tools/llama-bench/README.md`` (output formats) and
``llama-bench.cpp`` (``test::get_fields``).
"""

from __future__ import annotations

from typing import Any

from logitlab.errors import InputError
from logitlab.perf.readers.base import BenchmarkFile, integer, make_scenario, require_scenarios

FORMAT = "llama-bench"
#: Parameters that name a scenario when they vary within a file: those of llama-bench's ``test::get_fields``
#: (llama.cpp 0.5 era, as llama-cpp-python 0.3.36 vendors it) and older ones (``use_mmap``).
_PARAMS = ("model_filename", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll", "type_k",
           "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode", "main_gpu", "no_kv_offload", "flash_attn",
           "tensor_split", "tensor_buft_overrides", "use_mmap", "load_mode", "lazy_mode", "embeddings",
           "no_op_offload", "no_host", "repack", "fit_target", "fit_min_ctx", "backends", "devices")


def looks_like(data: Any) -> bool:
    return (isinstance(data, list) and bool(data)
            and all(isinstance(r, dict) and ("avg_ts" in r or "samples_ts" in r) for r in data))


def _test_name(row: dict, path: str = "") -> str:
    pp, tg, depth = (integer(row.get(key) or 0, path, key) for key in ("n_prompt", "n_gen", "n_depth"))
    test = f"pp{pp}+tg{tg}" if pp and tg else (f"pp{pp}" if pp else f"tg{tg}")
    return test + (f" @d{depth}" if depth else "")


def read(path: str, rows: Any) -> BenchmarkFile:
    """Read parsed llama-bench rows (the JSON array, or the JSONL lines).

    Raises
    ------
    InputError
        On a row without ``samples_ts``/``avg_ts``, a non-positive rate, or
        two rows with the same scenario name.
    """
    varying = [p for p in _PARAMS if len({repr(r.get(p)) for r in rows}) > 1]
    scenarios = {}
    for row in rows:
        name = " ".join([str(row.get("model_type") or row.get("model_filename") or "model"), _test_name(row, path)]
                        + [f"{p}={row.get(p)}" for p in varying])
        if name in scenarios:
            raise InputError(f"{path}: two rows are both {name!r}: one scenario per test and parameter set")
        scenarios[name] = make_scenario(
            path=path, name=name, unit="tokens/s", higher_is_better=True, samples=row.get("samples_ts") or (),
            summary=row.get("avg_ts"), summary_statistic="llama-bench avg_ts",
        )
    first = rows[0]
    context = {k: first.get(k) for k in ("cpu_info", "gpu_info", "backends", "build_commit", "model_filename",
                                         "n_threads") if k in first and k not in varying}
    return BenchmarkFile(path, FORMAT, require_scenarios(path, FORMAT, scenarios), context)


def parse_jsonl(path: str, text: str) -> list[dict] | None:
    """The rows of a JSONL file, or None if it is not llama-bench JSONL."""
    import json

    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            return None
        rows.append(row)
    return rows if looks_like(rows) else None
