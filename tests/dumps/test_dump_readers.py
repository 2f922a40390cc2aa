"""Opening dumps: a logitlab dump whose manifest is not valid JSON is reported as such, not read as another kind."""

import pytest

from logitlab.dumps import diff_dumps, open_dump
from rawdumps import base_tensors, write_folder, write_logitlab_dump


@pytest.mark.parametrize("keep_steps", [True, False])
def test_a_cut_short_manifest_is_an_unreadable_logitlab_dump(tmp_path, keep_steps):
    good = write_logitlab_dump(tmp_path / "a", base_tensors())
    bad = write_logitlab_dump(tmp_path / "b", base_tensors())
    manifest = bad / "manifest.json"
    manifest.write_text(manifest.read_text()[:200])  # still names "format": "logitlab-dump"
    if not keep_steps:
        for step in bad.glob("step-*.safetensors"):
            step.unlink()
    dump = open_dump(bad)
    assert dump.kind == "logitlab" and not dump.refs
    assert len(dump.problems) == 1
    assert dump.problems[0].startswith(f"manifest.json of {bad} is not valid JSON (")
    assert dump.problems[0].endswith("): not a readable logitlab dump (cut short?)")
    result = diff_dumps(open_dump(good), dump)
    assert result.verdict == "nothing-aligned" and not any("shapes" in p for p in result.problems)


def test_a_broken_manifest_among_step_files_is_a_logitlab_dump(tmp_path):
    bad = write_logitlab_dump(tmp_path / "b", base_tensors())
    (bad / "manifest.json").write_text("{")
    dump = open_dump(bad)
    assert dump.kind == "logitlab" and "is not valid JSON" in dump.problems[0]


def test_a_broken_json_file_beside_raw_tensors_still_only_loses_the_shapes(tmp_path):
    raw = write_folder(tmp_path / "raw", base_tensors(), "p")
    (raw / "manifest.json").write_text("{")
    dump = open_dump(raw)
    assert dump.kind == "raw-f32" and len(dump.refs) == len(base_tensors())
    assert dump.problems[0].startswith(f"{raw / 'manifest.json'}: cannot read shapes (")
