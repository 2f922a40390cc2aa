"""Fuzz the dump readers (logitlab manifest + safetensors steps, raw .bin, .npy, .safetensors) and dump-diff.

Seeds: a real llama.cpp capture (``logitlab dump`` on the embedded model), a
``.safetensors`` file the ``safetensors`` library wrote, ``.npy`` files numpy
wrote, and a raw float32 folder in the seed report's naming with its
``shapes.json``. The property, end to end as ``logitlab dump-diff`` runs:
opening a damaged dump collects its problems instead of raising; loading a
tensor returns an array or raises :class:`~logitlab.errors.InputError`; the
diff against the undamaged seed and its Markdown report complete (or raise a
logitlab error). Any other exception is a bug.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fuzzing import DATA, outcome
from mutate import file_edits, folder_edits
from logitlab import report
from logitlab.dumps.diff import diff_dumps
from logitlab.dumps.manifest import read_manifest
from logitlab.dumps.readers import FORMATS, open_dump

DUMPS = DATA / "fuzz" / "dumps"
FOLDERS = {"logitlab": DUMPS / "llamacpp", "raw-f32": DUMPS / "raw", "npy": DUMPS / "npy"}
FILES = {"safetensors": DUMPS / "tensors.safetensors", "npy": next((DUMPS / "npy").glob("*.npy")),
         "raw-f32": next((DUMPS / "raw").glob("*.bin"))}


def check_dump(reader: str, path: Path, seed: Path, fmt: str) -> None:
    """Open, load every tensor, diff against the seed, render: only logitlab errors may escape."""
    with outcome(reader):
        dump = open_dump(path, format=fmt)
        for ref in dump.refs:
            with outcome(reader + " (load a tensor)"):
                assert isinstance(ref.load(), np.ndarray)
    with outcome(reader + " + dump-diff"):
        result = diff_dumps(open_dump(seed), open_dump(path, format=fmt))
        report.markdown(result)


@pytest.mark.parametrize("kind", sorted(FOLDERS))
@given(data=st.data(), explicit=st.booleans())
def test_damaged_dump_folders_open_with_problems_not_exceptions(kind, data, explicit):
    seed = FOLDERS[kind]
    with tempfile.TemporaryDirectory() as folder:
        path = data.draw(folder_edits(seed, Path(folder) / seed.name))
        check_dump(f"dump: {kind} folder", path, seed, kind if explicit else "auto")


@pytest.mark.parametrize("kind", sorted(FILES))
@given(data=st.data())
def test_damaged_dump_files_open_with_problems_not_exceptions(kind, data):
    seed = FILES[kind]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / seed.name
        path.write_bytes(data.draw(file_edits(seed)))
        check_dump(f"dump: {kind} file", path, seed, data.draw(st.sampled_from(["auto", kind])))


@given(data=st.data())
def test_damaged_manifests_read_or_raise_input_error(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder)
        (path / "manifest.json").write_bytes(data.draw(file_edits(FOLDERS["logitlab"] / "manifest.json")))
        with outcome("dump: manifest.json"):
            read_manifest(path).to_dict()


def test_every_seed_opens_cleanly():
    for kind, seed in {**FOLDERS, **{k + " file": v for k, v in FILES.items()}}.items():
        dump = open_dump(seed)
        assert dump.refs and not dump.problems, (kind, dump.problems)
        assert all(isinstance(ref.load(), np.ndarray) for ref in dump.refs)
    assert set(FOLDERS) | set(FILES) <= set(FORMATS)
