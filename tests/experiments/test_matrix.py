"""Matrix files: TOML and JSON alike, axes → cells → jobs, job keys and hashes, one clear error per bad input."""

from __future__ import annotations

import json
import os

import pytest

from logitlab.errors import InputError
from logitlab.experiments.sweep.matrix import JobSpec
from logitlab.experiments.sweep.matrix_file import load_matrix, parse_matrix
from logitlab.experiments.prompts import DEFAULT_PROMPT

TOML = """
name = "fa-x-ub"
prompts = ["The capital of France is", "Once upon a time"]

[control]
options = { n_threads = 1 }

[axes]
options.flash_attn = [0, 1]
options.n_ubatch = [512, 4]

[experiment]
tokens = 8
"""

JSON = {
    "name": "fa-x-ub",
    "prompts": ["The capital of France is", "Once upon a time"],
    "control": {"options": {"n_threads": 1}},
    "axes": {"options.flash_attn": [0, 1], "options": {"n_ubatch": [512, 4]}},
    "experiment": {"tokens": 8},
}


def _toml(tmp_path, text: str, name: str = "m.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_matrix(path)


def test_toml_and_json_give_the_same_jobs(tmp_path):
    from_toml = _toml(tmp_path, TOML)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(JSON))
    from_json = load_matrix(path)
    assert [j.to_dict() for j in from_toml.jobs()] == [j.to_dict() for j in from_json.jobs()]
    assert [j.spec_hash for j in from_toml.jobs()] == [j.spec_hash for j in from_json.jobs()]


def test_cells_are_the_cartesian_product_in_file_order(tmp_path):
    matrix = _toml(tmp_path, TOML)
    cells = matrix.cells()
    assert [c.label for c in cells] == ["flash_attn=0 n_ubatch=512", "flash_attn=0 n_ubatch=4",
                                        "flash_attn=1 n_ubatch=512", "flash_attn=1 n_ubatch=4"]
    assert cells[3].values == {"flash_attn": "1", "n_ubatch": "4"}
    assert cells[3].candidate.options == {"n_threads": "1", "flash_attn": "1", "n_ubatch": "4"}
    assert all(c.control.options == {"n_threads": "1"} and c.control.label == "control" for c in cells)
    jobs = matrix.jobs()
    assert len(jobs) == 8 and [j.prompt.name for j in jobs[:2]] == ["prompt-1", "prompt-2"]
    assert jobs[0].key == "flash_attn=0_n_ubatch=512--prompt-1"
    assert len({j.key for j in jobs}) == 8
    # numerics only: one ABBA block, no warmup
    assert (matrix.experiment.repeats, matrix.experiment.warmup, matrix.experiment.speed) == (1, 0, False)


def test_spec_hash_follows_the_spec(tmp_path):
    jobs = _toml(tmp_path, TOML).jobs()
    again = _toml(tmp_path, TOML.replace("tokens = 8", "tokens = 8\nseed = 0")).jobs()
    changed = _toml(tmp_path, TOML.replace("tokens = 8", "tokens = 9")).jobs()
    assert [j.spec_hash for j in jobs] == [j.spec_hash for j in again]  # the default written out
    assert not {j.spec_hash for j in jobs} & {j.spec_hash for j in changed}
    assert JobSpec.from_dict(json.loads(json.dumps(jobs[5].to_dict()))) == jobs[5]


def test_shared_axes_env_model_engine_and_spec_axes(tmp_path):
    matrix = _toml(tmp_path, """
[control]
engine = "llamacpp"
model = "models/a.gguf"
env = { KNOB_A = "1" }
[shared_axes]
model = ["models/a.gguf", "/abs/b.gguf"]
[axes]
env.KNOB_B = ["0", false]
spec = ["flash_attn=1", "hf:?dtype=float32"]
""")
    cells = matrix.cells()
    assert len(cells) == 8
    assert matrix.axis_names() == ["model", "KNOB_B", "spec"]
    base = os.path.abspath(tmp_path / "models" / "a.gguf")
    first = cells[0]
    assert first.label == "model=a.gguf KNOB_B=0 flash_attn=1"
    assert first.control.model == first.candidate.model == base
    assert first.candidate.env == {"KNOB_A": "1", "KNOB_B": "0"}
    assert first.candidate.options == {"flash_attn": "1"}
    unset_hf = cells[3]
    assert unset_hf.label == "model=a.gguf KNOB_B=unset hf:?dtype=float32"
    assert unset_hf.candidate.env == {"KNOB_A": "1"} and unset_hf.candidate.engine == "hf"
    assert unset_hf.candidate.options == {"dtype": "float32"}  # llama.cpp options do not follow to hf
    assert unset_hf.control.engine == "llamacpp"
    shared_b = cells[4]
    assert shared_b.control.model == shared_b.candidate.model == "/abs/b.gguf"  # both arms on model b


def test_prompt_forms_and_default(tmp_path):
    assert [p.text for p in parse_matrix({"axes": {"options.flash_attn": [1]}}).prompts] == [DEFAULT_PROMPT]
    (tmp_path / "p.jsonl").write_text('{"name": "sky", "text": "The sky is"}\n')
    from_file = parse_matrix({"axes": {"options.flash_attn": [1]}, "prompts": "p.jsonl"}, base=tmp_path)
    assert [(p.name, p.text) for p in from_file.prompts] == [("sky", "The sky is")]
    builtin = parse_matrix({"axes": {"options.flash_attn": [1]}, "prompts": "builtin:calibration"})
    assert len(builtin.prompts) == 3
    tables = _toml(tmp_path, '[axes]\noptions.flash_attn = [1]\n[[prompts]]\nname = "a"\ntext = "x y"\n')
    assert [(p.name, p.text) for p in tables.prompts] == [("a", "x y")]


def test_verify_and_speed_settings(tmp_path):
    verify = parse_matrix({"axes": {"options.n_ubatch": [512, 4]}, "experiment": {"kind": "verify", "ks": [1, 2]}})
    assert verify.experiment.ks == (1, 2) and verify.experiment.kind == "verify"
    speed = parse_matrix({"axes": {"options.flash_attn": [1]},
                          "experiment": {"speed": True, "repeats": "auto", "max_repeats": 6, "warmup": 0}})
    assert (speed.experiment.repeats, speed.experiment.max_repeats, speed.experiment.warmup) == ("auto", 6, 0)
    res = parse_matrix({"axes": {"options.flash_attn": [1]},
                        "resources": {"num_gpus": 2, "bundles": [{"GPU": 2, "CPU": 1}], "strategy": "STRICT_PACK"}})
    assert res.resources.num_gpus == 2.0 and res.resources.bundles == ({"GPU": 2, "CPU": 1},)


@pytest.mark.parametrize("data, message", [
    ({}, "the matrix has no axes: add an [axes] table"),
    ({"axes": {"options.flash_attn": [1]}, "colour": 1}, "unknown key 'colour' in the matrix; valid keys: name,"),
    ({"axes": {"options.flash_attn": []}}, "[axes] options.flash_attn: the axis is empty"),
    ({"axes": {"options.flash_attn": 1}}, "[axes] options.flash_attn: an axis is a list of values, got 1"),
    ({"axes": {"threads": [1]}}, "unknown axis 'threads' in [axes]; axes: options.NAME, env.NAME, model, engine, spec"),
    ({"axes": {"options.flash_attn": [1, 1]}}, "[axes] flash_attn lists a value twice: ['1', '1']"),
    ({"axes": {"options.flash_atn": [1]}}, "cell 'flash_atn=1': unknown llamacpp option 'flash_atn'; valid options:"),
    ({"axes": {"options.n_ubatch": ["many"]}}, "bad value 'many' for llamacpp option 'n_ubatch'"),
    ({"axes": {"spec": ["vllm:"]}}, "unknown engine 'vllm' in axis spec value spec 'vllm:'"),
    ({"axes": {"options.flash_attn": [1]}, "experiment": {"kind": "bench"}}, "kind 'bench' is not one of ab, verify"),
    ({"axes": {"options.flash_attn": [1]}, "experiment": {"ks": [1, 2]}}, "[experiment] ks is a setting of verify"),
    ({"axes": {"options.flash_attn": [1]}, "experiment": {"repeats": 3}}, "[experiment] repeats needs speed = true"),
    ({"axes": {"options.flash_attn": [1]}, "experiment": {"tokens": 0}},
     "matrix [experiment]: tokens must be at least 1, got 0"),  # the matrix's key, not the CLI's --tokens
    ({"axes": {"options.flash_attn": [1]}, "experiment": {"tokens": "8"}}, "[experiment] tokens must be an int"),
    ({"axes": {"options.flash_attn": [1]}, "experiment": {"kind": "verify", "ks": [0]}},
     "matrix [experiment]: ks values must be integers >= 1, got 0"),
    ({"axes": {"options.flash_attn": [1]}, "experiment": {"isolation": "vm"}}, "isolation 'vm' is not one of"),
    ({"axes": {"options.flash_attn": [1]}, "resources": {"num_gpus": -1}}, "num_gpus must be a number >= 0"),
    ({"axes": {"options.flash_attn": [1]}, "resources": {"num_gpus": 1, "bundles": [{"CPU": 1}]}},
     "it needs GPU = 1 there, bundle 0 has 0"),
    ({"axes": {"options.flash_attn": [1]}, "prompts": []}, "prompts must be a non-empty list"),
    ({"axes": {"options.flash_attn": [1]}, "prompts": [{"name": "a", "text": "x"}, {"name": "a", "text": "y"}]},
     "two prompts are named 'a'"),
    ({"shared_axes": {"model": ["a.gguf"]}, "axes": {"model": ["b.gguf"]}}, "two axes are named 'model'"),
    ({"axes": {"spec": ["flash_attn=1", "flash_attn=1,"]}}, "two matrix cells have the same file name"),
    ({"control": {"spec": "flash_attn=1", "model": "m.gguf"}, "axes": {"options.n_ubatch": [4]}},
     "[control] gives spec and 'model'"),
])
def test_bad_matrix_is_one_clear_error(data, message):
    with pytest.raises(InputError) as info:
        parse_matrix(data)
    assert message in str(info.value)


def test_file_errors(tmp_path):
    with pytest.raises(InputError, match="matrix file .*/nope.toml does not exist"):
        load_matrix(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[axes\n")
    with pytest.raises(InputError, match="is not valid TOML"):
        load_matrix(bad)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"axes": ')
    with pytest.raises(InputError, match="is not valid JSON: .* at line 1"):
        load_matrix(bad_json)
