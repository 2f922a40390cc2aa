"""Fuzz golden folders: ``golden_folders``, ``read_golden`` and the stored tensors (``GoldenLogits``).

Seed: a golden written by logitlab's own writers (:class:`GoldenWriter`, :func:`write_manifest`) from
the real logits the embedded model gave (``tests/data/fuzz/logits/logits.npy``), stored ``full`` and
``topk:8``. Properties:

- round trip: a golden with Hypothesis-drawn prompts, provenance, store and logits reads back equal:
  the same manifest, and each prompt's stored ids, logits (or top-k) as written;
- agreement: a damaged golden folder either raises :class:`~logitlab.errors.InputError` naming the
  folder or a file in it, or reads as what was recorded: each prompt's stored token ids are the
  manifest's, its tensors load with one row per position, and the manifest round-trips;
- truncation: either file cut at any byte is that ``InputError`` (a manifest cut only in its trailing
  white space reads equal).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fuzzing import DATA, outcome, tally
from mutate import folder_edits
from logitlab.device import device_info
from logitlab.dumps.golden_format import (
    LOGITS_FILE,
    MANIFEST_FILE,
    GoldenLogits,
    GoldenManifest,
    GoldenPrompt,
    GoldenWriter,
    HistoryEntry,
    Provenance,
    golden_folders,
    read_golden,
    write_manifest,
)
from logitlab.errors import InputError
from logitlab.numerics.verdict import VERDICTS, Verdict

REAL = np.load(DATA / "fuzz" / "logits" / "logits.npy")  # (1, 49152) float32: the embedded model's logits
DEVICE = device_info("cpu")


def write_golden(folder: Path, store: str, prompts: list[GoldenPrompt], logits: list[np.ndarray],
                 provenance: Provenance | None = None, history: list[HistoryEntry] = ()) -> GoldenManifest:
    """Write a golden as ``golden record`` does: the tensors, then the manifest with their SHA-256."""
    writer = GoldenWriter(folder, store)
    for prompt, x in zip(prompts, logits):
        writer.add(prompt.input_ids, x)
    sha, size = writer.close()
    manifest = GoldenManifest(created_at="2026-01-02T03:04:05+00:00", provenance=provenance or PROVENANCE,
                              store=store, dtype=str(logits[0].dtype) if logits else "float32", n_decode=1,
                              prompts=prompts, logits_sha256=sha, logits_bytes=size, history=list(history))
    write_manifest(manifest, folder)
    manifest.folder = str(folder)
    return manifest


PROVENANCE = Provenance(
    logitlab_version="0.0", engine="llamacpp", engine_version="llama-cpp-python 0.3.36",
    build={"system_info": "CPU : AVX2 = 1"}, options={"n_ctx": 64}, env={}, ambient_env={}, model=None,
    model_path="SmolLM2-135M-Instruct.Q4_1.gguf", model_sha256="0" * 64, n_vocab=REAL.shape[1],
    tokenizer_sha256="1" * 64, prompts_sha256="2" * 64, device=DEVICE, os="Linux", python="3.11",
    libraries={"numpy": np.__version__})


def stored(manifest: GoldenManifest) -> list[tuple[np.ndarray, ...]]:
    """Each prompt's stored tensors: (ids, logits) or (ids, topk ids, topk logits, logsumexp)."""
    with GoldenLogits(manifest) as reader:
        return [(reader.ids(i),) + ((reader.logits(i),) if manifest.top_k is None else reader.topk(i))
                for i in range(len(manifest.prompts))]


# -- round trip ----------------------------------------------------------------------------------------
texts = st.text(max_size=12)
plain = st.dictionaries(st.text(max_size=6), st.none() | st.booleans() | st.integers(-(2**40), 2**40)
                        | st.floats(allow_nan=False, allow_infinity=False) | texts, max_size=3)


@st.composite
def goldens(draw) -> tuple[str, list[GoldenPrompt], list[np.ndarray], Provenance, list[HistoryEntry]]:
    n_vocab = draw(st.integers(1, 12))
    store = draw(st.sampled_from(["full", "topk:1", "topk:3", "topk:64"]))
    prompts, logits = [], []
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    for i in range(draw(st.integers(1, 3))):
        ids = draw(st.lists(st.integers(0, n_vocab - 1), min_size=1, max_size=6))
        cut = draw(st.integers(0, len(ids) - 1)) + 1
        prompts.append(GoldenPrompt(draw(texts), draw(texts), ids[:cut], ids[cut:], draw(texts)))
        logits.append(rng.normal(0, 4, (len(ids), n_vocab)).astype(np.float32))
    provenance = Provenance(**{**PROVENANCE.__dict__, "engine": draw(texts), "options": draw(plain),
                               "env": draw(st.dictionaries(texts, texts, max_size=2)), "model": draw(st.none() | texts),
                               "n_vocab": n_vocab, "libraries": draw(plain)})
    history = [HistoryEntry(at=draw(texts), reason=draw(texts), old_logits_sha256="a" * 64, new_logits_sha256="b" * 64,
                            old_provenance=draw(plain), new_provenance=draw(plain), changes=draw(st.lists(texts, max_size=2)),
                            verdict=Verdict(draw(st.sampled_from(VERDICTS)), draw(st.lists(texts, max_size=2))),
                            summary=draw(plain))
               for _ in range(draw(st.integers(0, 2)))]
    return store, prompts, logits, provenance, history


@given(golden=goldens())
def test_a_written_golden_reads_back_equal(golden):
    store, prompts, logits, provenance, history = golden
    with tempfile.TemporaryDirectory() as folder:
        written = write_golden(Path(folder), store, prompts, logits, provenance, history)
        assert golden_folders(folder) == [Path(folder)]
        manifest = read_golden(folder)
        assert manifest == written
        for prompt, x, tensors in zip(prompts, logits, stored(manifest)):
            assert tensors[0].tolist() == prompt.input_ids
            if store == "full":
                assert tensors[1].tobytes() == x.tobytes()
            else:
                k = min(manifest.top_k, x.shape[1])
                assert tensors[1].shape == tensors[2].shape == (len(prompt.input_ids), k)
                assert np.array_equal(np.take_along_axis(x, tensors[1].astype(np.int64), axis=1), tensors[2])
        tally("golden: round trip", "read")


# -- damaged goldens -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, Path]:
    """A ``full`` and a ``topk:8`` golden of the real logits: prompt 0 one position, prompt 1 two."""
    out = {}
    for store in ("full", "topk:8"):
        folder = tmp_path_factory.mktemp("golden") / DEVICE.key
        prompts = [GoldenPrompt("hi", "Hi", [1], [], ""), GoldenPrompt("two", "Hi there", [1, 2], [], "")]
        write_golden(folder, store, prompts, [REAL, np.concatenate([REAL, REAL[:, ::-1]])])
        out[store] = folder
    return out


def check_reads_as_recorded(folder: Path, verify: bool) -> None:
    """Read the golden; what reads must be what was recorded (see the module docstring)."""
    names = [folder, folder / MANIFEST_FILE, folder / LOGITS_FILE]
    manifest = None
    with outcome(f"golden: damaged (verify={verify})", names=names, error=InputError):
        (found,) = golden_folders(folder)
        manifest = read_golden(found, verify=verify)
    if manifest is None:
        return
    again = GoldenManifest.from_dict(json.loads(json.dumps(manifest.to_dict())))
    again.folder = manifest.folder
    assert again == manifest
    with outcome(f"golden: damaged, tensors (verify={verify})", names=names, error=InputError):
        for prompt, tensors in zip(manifest.prompts, stored(manifest)):
            assert tensors[0].tolist() == prompt.input_ids
            assert all(t.shape[0] == len(prompt.input_ids) for t in tensors)


@pytest.mark.parametrize("store", ["full", "topk:8"])
@given(data=st.data(), verify=st.booleans())
def test_a_damaged_golden_reads_as_recorded_or_raises_input_error_naming_it(seeds, store, data, verify):
    with tempfile.TemporaryDirectory() as tmp:
        folder = data.draw(folder_edits(seeds[store], Path(tmp) / seeds[store].name))
        check_reads_as_recorded(folder, verify)


@pytest.mark.parametrize("name", [MANIFEST_FILE, LOGITS_FILE])
@given(data=st.data())
def test_a_golden_file_cut_at_any_byte_is_an_input_error_naming_it(seeds, name, data):
    seed = seeds["topk:8"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / seed.name
        folder.mkdir()
        for f in seed.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        raw = (seed / name).read_bytes()
        cut = data.draw(st.integers(0, len(raw)))
        (folder / name).write_bytes(raw[:cut])
        try:
            manifest = read_golden(folder)
        except InputError as exc:
            assert str(folder) in str(exc), exc
            tally(f"golden: {name} cut", "rejected")
        else:
            assert cut == len(raw) or (name == MANIFEST_FILE and raw[:cut].strip() == raw.strip())
            expected = read_golden(seed)
            expected.folder = str(folder)
            assert manifest == expected
            tally(f"golden: {name} cut", "read")


def test_the_seeds_read_as_recorded(seeds):
    for folder in seeds.values():
        check_reads_as_recorded(folder, True)
        assert read_golden(folder).n_positions == 3
