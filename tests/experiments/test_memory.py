"""The memory estimate before any engine loads (experiments/memory.py) and the facts it reads without loading:
the vocabulary from a model file's metadata, the machine's available memory."""

from __future__ import annotations

import dataclasses
import json
import struct

import pytest

from logitlab.device import available_memory
from logitlab.engines import engine_class
from logitlab.errors import InputError
from logitlab.experiments import memory
from logitlab.experiments.memory import FOOTPRINTS, HEADROOM, check_memory, estimate, refusal
from logitlab.models import default_model_path, gguf_vocab_size, model_vocab_size

GB = 10 ** 9


def test_the_estimate_is_base_plus_F_runs_of_positions_by_vocabulary():
    e = estimate("ab", 8192, 129_280, model_bytes=100 * 10 ** 6, available_bytes=12 * GB)
    assert e.run_bytes == 8192 * 129_280 * 4  # the source report's one run: 4.24 GB
    batch = FOOTPRINTS["ab"].workers * memory.BATCH_ROWS * 129_280 * 4  # past 512 positions: a constant
    assert batch and e.batch_bytes == batch
    assert e.peak_bytes == memory.BASE_BYTES + 100 * 10 ** 6 + int(FOOTPRINTS["ab"].runs * e.run_bytes) + batch
    assert e.fits is False
    fit = e.positions_that_fit()
    assert estimate("ab", fit, 129_280, 100 * 10 ** 6, available_bytes=12 * GB).fits
    assert not estimate("ab", fit + 1, 129_280, 100 * 10 ** 6, available_bytes=12 * GB).fits
    assert estimate("ab", 8192, 129_280).fits is None  # available memory unknown: no call
    assert estimate("ab", 10, 49_152, available_bytes=10 ** 6).positions_that_fit() == 0
    # the engines' batch buffers grow with N up to 512 rows, then stay: what fits is found on both sides of 512
    assert estimate("ab", 100, 49_152).batch_bytes == FOOTPRINTS["ab"].workers * 2 * 100 * 49_152 * 4
    for available in (10 ** 9 // 2, 10 ** 9, 3 * 10 ** 9):
        fit = estimate("ab", 1, 49_152, available_bytes=available).positions_that_fit()
        assert estimate("ab", fit, 49_152, available_bytes=available).fits, available
        assert not estimate("ab", fit + 1, 49_152, available_bytes=available).fits, available


def test_every_command_with_a_check_has_a_measured_footprint():
    for command in ("ab", "verify", "explain", "golden record", "golden record --store topk", "golden check",
                    "invariance batch", "invariance prefill-decode",
                    "invariance determinism"):
        assert FOOTPRINTS[command].factor(1) >= 1 and FOOTPRINTS[command].source
    # the commands whose F grows with an option
    assert estimate("invariance batch", 100, 1000, units=6).factor == 15.6  # --batch 1 4: 6 sequences run
    assert estimate("invariance determinism", 100, 1000, units=10).factor == 11.4
    # the commands that keep their large runs on disk where they can: F is then about one run (#31)
    assert estimate("explain", 2053, 49_152, spilled=True).factor == 1.1
    assert estimate("explain", 2053, 49_152).factor == 3.1 and estimate("explain", 2053, 49_152).workers == 2


def test_the_refusal_names_peak_available_and_what_would_fit():
    line = refusal(estimate("ab", 8192, 262_144, available_bytes=20 * GB))
    assert line.startswith("ab would need about ")
    assert "8,192 positions × 262,144 vocabulary × 4 bytes = 8.6 GB a run" in line
    assert "but this machine has 20.0 GB available: at most " in line
    assert line.endswith("positions would fit (a shorter prompt or fewer --tokens); --no-memory-check runs it anyway")
    assert "\n" not in line


def test_gguf_vocabulary_from_the_metadata(tmp_path):
    assert gguf_vocab_size(default_model_path()) == 49_152
    # a hand-made header: a string, an array of strings, then the token list
    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text)) + text.encode()
    kvs = [string("general.name") + struct.pack("<I", 8) + string("tiny"),
           string("general.tags") + struct.pack("<IIQ", 9, 8, 2) + string("a") + string("bc"),
           string("tiny.context_length") + struct.pack("<II", 4, 64),
           string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3) + string("x") + string("y") + string("z")]
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))
    assert gguf_vocab_size(path) == 3 == model_vocab_size(path)
    path.write_bytes(path.read_bytes()[:40])  # cut short
    assert gguf_vocab_size(path) is None
    (tmp_path / "x.txt").write_text("not a model")
    assert gguf_vocab_size(tmp_path / "x.txt") is None and gguf_vocab_size(tmp_path / "missing") is None


def test_folder_vocabulary_from_its_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 262_144}}))
    assert model_vocab_size(tmp_path) == 262_144
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 151_936}))
    assert model_vocab_size(tmp_path) == 151_936
    assert model_vocab_size(tmp_path / "nothing") is None


def test_available_memory_reads_memavailable(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   16000000 kB\n")
    assert available_memory(str(meminfo)) == 16_000_000 * 1024
    assert available_memory(str(tmp_path / "none")) is None
    assert available_memory() is None or available_memory() > 0


def _engines():
    cls = engine_class("llamacpp")
    return [(cls, None, {}), (cls, None, {"flash_attn": "1"})]


def test_check_memory_passes_what_fits_without_tokenizing(monkeypatch):
    cls = engine_class("llamacpp")
    monkeypatch.setattr(cls, "token_counter_before_load", classmethod(lambda *a: pytest.fail("tokenized")))
    e = check_memory("ab", _engines(), ["The capital of France is"], 16, available=lambda: 16 * GB)
    assert e.fits and not e.exact and e.n_vocab == 49_152
    assert e.base_bytes == memory.BASE_BYTES + default_model_path().stat().st_size  # one model file, counted once


def test_check_memory_refuses_decode_tokens_that_cannot_fit_without_tokenizing(monkeypatch):
    cls = engine_class("llamacpp")
    monkeypatch.setattr(cls, "token_counter_before_load", classmethod(lambda *a: pytest.fail("tokenized")))
    with pytest.raises(InputError, match=r"^ab would need about .* \(at least 1,000,001 positions × 49,152 "):
        check_memory("ab", _engines(), ["Hi"], 1_000_000, available=lambda: 16 * GB)


def test_check_memory_counts_the_tokens_of_a_prompt_that_may_not_fit(monkeypatch):
    """A prompt whose byte bound does not fit is tokenized: refused when its tokens do not fit, else passed."""
    cls = engine_class("llamacpp")
    monkeypatch.setattr(cls, "token_counter_before_load", classmethod(lambda c, m, o: lambda text: len(text) // 4))
    prompt = "x" * 400_000  # bound: 400,002 positions; tokens here: 100,000
    with pytest.raises(InputError, match=r"\(100,008 positions × 49,152 vocabulary"):
        check_memory("ab", _engines(), [prompt], 8, available=lambda: 16 * GB)
    room = estimate("ab", 100_008, 49_152, default_model_path().stat().st_size).peak_bytes / HEADROOM
    e = check_memory("ab", _engines(), [prompt], 8, available=lambda: int(room) + 1)
    assert e.exact and e.positions == 100_008 and e.fits


def test_no_check_where_the_vocabulary_or_the_memory_is_unknown():
    openai = engine_class("openai")  # top-k rows from a server: its logits are not here
    assert check_memory("ab", [(openai, "m", {})], ["x"], 10 ** 9, available=lambda: 1) is None
    assert check_memory("ab", _engines(), ["x"], 10 ** 9, available=lambda: None) is None


def test_positions_count_the_rows_kept_beyond_the_run_itself():
    """Issue #31: with ``--positions`` only the run itself (computed and crossing into the command whole) costs
    whole runs; what ab keeps across runs is the selected rows."""
    ab = FOOTPRINTS["ab"]
    assert ab.whole_run is not None and 1 <= ab.whole_run < ab.runs
    assert estimate("ab", 1000, 49_152, selected=1000).factor == ab.runs
    one = estimate("ab", 1000, 49_152, selected=1)
    assert one.factor == round(ab.whole_run + (ab.runs - ab.whole_run) / 1000, 1) and one.selected == 1
    half = estimate("ab", 1000, 49_152, selected=500).factor
    assert one.factor < half < ab.runs
    assert estimate("verify", 1000, 49_152, selected=1).factor == FOOTPRINTS["verify"].runs  # no --positions there


def test_check_memory_with_positions_refuses_or_passes_by_the_rows_kept(monkeypatch):
    monkeypatch.setenv("LOGITLAB_SPILL", "off")  # every row held in memory: a reference kept on disk counts one run
    cls = engine_class("llamacpp")
    monkeypatch.setattr(cls, "token_counter_before_load", classmethod(lambda c, m, o: lambda text: len(text) // 4))
    prompt = "x" * 400_000  # 100,000 tokens
    whole = estimate("ab", 100_008, 49_152, default_model_path().stat().st_size)
    room = int(estimate("ab", 100_008, 49_152, default_model_path().stat().st_size, selected=1).peak_bytes
               / HEADROOM) + 1
    assert room < whole.peak_bytes / HEADROOM
    e = check_memory("ab", _engines(), [prompt], 8, available=lambda: room, selected=lambda n: 1)
    assert e.fits and e.selected == 1
    with pytest.raises(InputError, match=r"\(100,008 positions × 49,152 vocabulary"):
        check_memory("ab", _engines(), [prompt], 8, available=lambda: room)


def test_ab_with_its_reference_on_disk_counts_one_run(tmp_path, monkeypatch):
    """Issue #31: a large reference is kept in a file on disk (engines/spill.py): the estimate counts the run
    being compared, not two, where a disk can take it, and two where it cannot (LOGITLAB_SPILL=off, tmpfs)."""
    from logitlab.engines import spill

    ab = FOOTPRINTS["ab"]
    assert ab.spilled is not None and 1.0 <= ab.spilled <= 1.5 < ab.runs
    kept = estimate("ab", 8192, 129_280, available_bytes=12 * GB, spilled=True)
    assert kept.factor == ab.spilled and kept.spilled and not estimate("ab", 8192, 129_280).spilled
    assert kept.fits and not estimate("ab", 8192, 129_280, available_bytes=12 * GB).fits
    assert " (a large reference kept on disk)" in refusal(estimate("ab", 8192, 262_144, available_bytes=9 * GB,
                                                               spilled=True))
    assert estimate("verify", 8192, 129_280, spilled=True).factor == FOOTPRINTS["verify"].runs  # it does not spill
    # one run either way: --positions keeps fewer rows, but the run still crosses whole before they are taken
    assert estimate("ab", 8192, 129_280, selected=1, spilled=True).factor == ab.spilled
    # invariance determinism keeps every run to compare them: on disk, the run being made, whatever --runs
    determinism = FOOTPRINTS["invariance determinism"]
    assert estimate("invariance determinism", 8192, 129_280, units=10, spilled=True).factor == determinism.spilled
    assert determinism.spilled <= 1.5 < estimate("invariance determinism", 8192, 129_280, units=10).factor
    # invariance batch: its runs on disk, what is left is the engine's own output buffer, about a run a sequence
    batch = FOOTPRINTS["invariance batch"]
    on_disk_batch = estimate("invariance batch", 2053, 49_152, units=6, spilled=True)  # --batch 1 4: 6 sequences
    assert on_disk_batch.factor == batch.spilled + 6 * batch.spilled_per == 6.0
    assert on_disk_batch.factor < estimate("invariance batch", 2053, 49_152, units=6).factor == 15.6
    llamacpp = (engine_class("llamacpp"), None, {})
    monkeypatch.setenv("LOGITLAB_SPILL", str(tmp_path))
    if spill._file_system(tmp_path) in spill.MEMORY_FILE_SYSTEMS:
        pytest.skip(f"{tmp_path} is on a memory file system here")
    on_disk = check_memory("ab", [llamacpp, llamacpp], ["x" * 4000], 16, available=lambda: 100 * GB)
    monkeypatch.setenv("LOGITLAB_SPILL", "off")
    in_memory = check_memory("ab", [llamacpp, llamacpp], ["x" * 4000], 16, available=lambda: 100 * GB)
    assert on_disk.spilled and on_disk.factor == ab.spilled
    assert not in_memory.spilled and in_memory.factor == round(ab.runs, 1)
    short = check_memory("ab", [llamacpp, llamacpp], ["x" * 20], 4, available=lambda: 100 * GB)
    assert not short.spilled  # a run under SPILL_BYTES stays in memory


def test_the_batch_probe_counts_the_sequences_it_runs():
    """What invariance batch's estimate multiplies: the prompt alone, each size at each padding on an engine that
    pads, and B batches of each B > 1 with --slots."""
    from logitlab.engines.variant import Variant
    from logitlab.experiments.invariance import InvarianceConfig

    config = InvarianceConfig(probe="batch", variant=Variant("v", "llamacpp"), prompt="x", batch_sizes=(1, 4))
    assert config.batch_sequences(pads=False) == 1 + 1 + 4
    assert config.batch_sequences(pads=True) == 1 + 1 + 4 * 2
    assert dataclasses.replace(config, padding=("left",)).batch_sequences(pads=True) == 1 + 1 + 4
    assert dataclasses.replace(config, slots=True, fill="mixed").batch_sequences(pads=False) == 1 + 1 + 4 * 4
