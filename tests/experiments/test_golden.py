"""Golden logits on the real engine (llama.cpp, embedded SmolLM2): record, check, update, device keys, bad goldens.

One golden is recorded per module (2 short prompts + 8 decode tokens) and copied where a test changes it.
"""

import json
import shutil

import pytest

from logitlab.dumps.golden_format import read_golden
from logitlab.engines.variant import Variant
from logitlab.errors import InputError
from logitlab.experiments.golden.run import (
    CheckConfig,
    RecordConfig,
    VariantOverrides,
    check_golden,
    record_golden,
    update_golden,
)
from logitlab.experiments.golden.kld import check_kld_base, export_kld_base
from logitlab.experiments.prompts import Prompt
from logitlab.numerics.detection import SHAPES
from logitlab.numerics.gate import Bar

pytestmark = pytest.mark.engine
# detection=False where the detection limit is not the subject: it costs about 80 comparisons of each prompt's run

PROMPTS = [Prompt("capital", "The capital of France is"), Prompt("code", "def add(a, b):")]
N_DECODE = 8
FLASH = VariantOverrides(options={"flash_attn": "1"})


@pytest.fixture(scope="module")
def golden_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    events = []
    manifest = record_golden(RecordConfig(Variant("golden", "llamacpp"), PROMPTS, N_DECODE), root,
                             on_event=lambda kind, data: events.append((kind, data)))
    assert events[0][0] == "size" and events[0][1]["positions"] == manifest.n_positions
    return root, manifest


def copy_of(golden_root, tmp_path):
    root, _ = golden_root
    dest = tmp_path / "golden"
    shutil.copytree(root, dest)
    return dest


def retokenize(folder, index, prompt_ids):
    """Make prompt ``index`` of the golden in ``folder`` one that another tokenizer recorded: its manifest's prompt
    ids and the stored ids and logits rows (the last ones kept), with the logits file's SHA-256 in the manifest."""
    import hashlib

    import numpy as np
    from safetensors.numpy import load_file, save_file

    path = folder / "logits.safetensors"
    tensors = load_file(path)
    data = json.loads((folder / "manifest.json").read_text())
    prompt = data["prompts"][index]
    ids = list(prompt_ids) + list(prompt["generated_ids"])
    key = f"p{index:04d}"
    tensors[f"{key}.ids"] = np.asarray(ids, dtype=tensors[f"{key}.ids"].dtype)
    tensors[f"{key}.logits"] = np.ascontiguousarray(tensors[f"{key}.logits"][-len(ids):])
    save_file(tensors, str(path))
    prompt["prompt_ids"] = list(prompt_ids)
    data["logits_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    data["logits_bytes"] = path.stat().st_size
    (folder / "manifest.json").write_text(json.dumps(data))


def edit_manifest(folder, change):
    path = folder / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_record_writes_the_golden_with_its_provenance(golden_root):
    root, manifest = golden_root
    p = manifest.provenance
    folder = root / p.device.key
    assert manifest.folder == str(folder) and (folder / "logits.safetensors").is_file()
    assert p.device.key.startswith("cpu-") and p.device.flags  # model name + instruction-set flags
    assert p.engine == "llamacpp" and p.engine_version.startswith("llama-cpp-python ")
    assert "AVX" in p.build["system_info"] or "NEON" in p.build["system_info"]  # llama.cpp's system-info line
    assert len(p.model_sha256) == 64 and p.model is None  # the embedded model, found anew on every machine
    assert [pr.name for pr in manifest.prompts] == ["capital", "code"]
    assert all(len(pr.generated_ids) == N_DECODE for pr in manifest.prompts)
    assert manifest.store == "full" and manifest.dtype == "float32"
    with pytest.raises(InputError, match="already holds a golden for this device key"):
        record_golden(RecordConfig(Variant("golden", "llamacpp"), PROMPTS, N_DECODE), root)


def test_check_is_bit_exact_on_the_same_build(golden_root):
    root, _ = golden_root
    result = check_golden(CheckConfig(str(root), detection=False))
    assert result.passed and result.verdict.word == "bit-exact"
    assert result.match.exact and result.match.reason.startswith("recorded under this device key")
    assert result.changes == []
    assert result.bar.allow == "bit-exact" and result.bar_reason.startswith("same device key, build and options")
    assert [p.n_positions for p in result.prompts] == [len(p.input_ids) for p in read_golden(result.match.folder).prompts]


def test_flash_attention_fails_bit_exact_and_passes_near_tie(golden_root):
    root, _ = golden_root
    strict = check_golden(CheckConfig(str(root), overrides=FLASH))
    assert not strict.passed and strict.verdict.word == "near-tie"
    assert [c.line for c in strict.changes] == ["options.flash_attn: (unset) → True"]
    assert strict.bar.allow == "bit-exact" and "no looser bar was allowed" in strict.bar_reason
    loose = check_golden(CheckConfig(str(root), overrides=FLASH, bar=Bar(allow="near-tie", max_kld_p99=0.1),
                                     detection=False))
    assert loose.passed and loose.bar_reason == "options changed: the allowed bar applies (verdict ≤ near-tie, " \
                                                "p99 KLD ≤ 0.1 nats)"
    # the same bar does not loosen a check whose provenance did not change
    same = check_golden(CheckConfig(str(root), bar=Bar(allow="near-tie"), detection=False))
    assert same.bar.allow == "bit-exact" and "applies only when they change" in same.bar_reason
    # per prompt, the detection limit of its comparison (issue #32), judged against that prompt's own floor:
    # the argmax-up shape (the report's column), and every shape for the prompt the verdict names
    for p in strict.prompts:
        up = p.detection.shape("argmax-up")
        assert p.detection.verdict == p.verdict.word and up.caught == up.probed == p.n_positions
        assert 0 < up.limit < 10 and up.above == "divergent"
        every = p.name == strict.verdict_prompt
        assert [s.shape for s in p.detection.shapes] == (list(SHAPES) if every else ["argmax-up"])
    assert [p.detection for p in same.prompts] == [None, None]  # detection=False


def test_a_context_too_small_for_the_prompts_or_the_golden_is_refused(golden_root, tmp_path):
    root, manifest = golden_root
    first = manifest.prompts[0]
    n_prompt, n_total = len(first.prompt_ids), len(first.input_ids)
    with pytest.raises(InputError, match=rf"^the prompt 'capital' \({n_prompt} tokens\) \+ --tokens 8 = {n_total} "
                                         r"exceeds the context of 8 tokens; shorten the prompt or --tokens, or pass a "
                                         r"larger n_ctx=\.\.\. in the variant$"):
        record_golden(RecordConfig(Variant("golden", "llamacpp", options={"n_ctx": 8}), PROMPTS, N_DECODE),
                      tmp_path / "small")
    # a golden's tokens are given: only a larger context helps
    with pytest.raises(InputError, match=rf"^the golden's prompt 'capital' \({n_prompt} tokens\) \+ --tokens 8 = "
                                         rf"{n_total} exceeds the context of 8 tokens; pass a larger n_ctx=\.\.\. in "
                                         r"the variant$"):
        check_golden(CheckConfig(str(root), overrides=VariantOverrides(options={"n_ctx": "8"})))


def test_another_device_key_strict_refuses_fallback_judges(golden_root, tmp_path):
    root, manifest = golden_root
    other = tmp_path / "other-root"
    key = "cpu-other-machine-0badc0de"
    shutil.copytree(root / manifest.provenance.device.key, other / key)
    edit_manifest(other / key, lambda d: d["provenance"]["device"].update(key=key, flags=["avx2", "fma"]))
    with pytest.raises(InputError, match=f"no golden for this device key .* among {key}; --strict-device refuses"):
        check_golden(CheckConfig(str(other), strict_device=True))
    fallback = check_golden(CheckConfig(str(other), bar=Bar(allow="ulp-noise"), detection=False))
    assert not fallback.match.exact and fallback.match.device_key == key
    assert fallback.match.reason.startswith("fallback: no golden for this device key")
    assert "same device kind and architecture" in fallback.match.reason
    assert fallback.changes[0].field == "device.key" and fallback.changes[0].gate
    assert fallback.bar.allow == "ulp-noise" and fallback.bar_reason.startswith("device key changed: the allowed bar")
    assert fallback.passed  # same logits here: bit-exact ≤ ulp-noise
    flash = check_golden(CheckConfig(str(other), overrides=FLASH, bar=Bar(allow="ulp-noise"), detection=False))
    assert not flash.passed and flash.verdict.word == "near-tie"  # judged by the fallback bar, which it misses
    # with both goldens side by side, this device's is picked
    shutil.copytree(root / manifest.provenance.device.key, other / manifest.provenance.device.key)
    both = check_golden(CheckConfig(str(other), detection=False))
    assert both.match.exact and sorted(both.match.available) == sorted([key, manifest.provenance.device.key])


def test_goldens_for_another_model_or_tokenizer_are_refused(golden_root, tmp_path):
    root = copy_of(golden_root, tmp_path)
    folder = next(root.iterdir())
    edit_manifest(folder, lambda d: d["provenance"].update(model_sha256="0" * 64, model_path="/elsewhere/q8.gguf"))
    with pytest.raises(InputError, match=r"is for another model: recorded with /elsewhere/q8.gguf \(sha256 000000000000…"):
        check_golden(CheckConfig(str(root)))
    edit_manifest(folder, lambda d: d["provenance"].update(model_sha256=golden_root[1].provenance.model_sha256))
    retokenize(folder, 1, [1, 2, 3])  # a golden whose prompt 'code' another tokenizer made 3 ids of
    with pytest.raises(InputError, match="is for another tokenizer: prompt 'code' tokenizes to 7 ids here, 3 in the "
                                         "golden, first different at index 0"):
        check_golden(CheckConfig(str(root)))
    edit_manifest(folder, lambda d: d["prompts"][1].update(prompt_ids=[1, 2, 4]))  # the manifest alone edited
    with pytest.raises(InputError, match="is corrupt: the token ids logits.safetensors holds for prompt 1 are not"):
        read_golden(folder)


def test_missing_and_corrupt_goldens_are_refused(golden_root, tmp_path):
    with pytest.raises(InputError, match="does not exist; record one with"):
        check_golden(CheckConfig(str(tmp_path / "nowhere")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no golden"):
        check_golden(CheckConfig(str(tmp_path / "empty")))
    root = copy_of(golden_root, tmp_path)
    logits = next(root.iterdir()) / "logits.safetensors"
    data = bytearray(logits.read_bytes())
    data[-5] ^= 0xFF
    logits.write_bytes(bytes(data))
    with pytest.raises(InputError, match="is corrupt: logits.safetensors does not match the SHA-256"):
        check_golden(CheckConfig(str(root)))
    (next(root.iterdir()) / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="golden manifest .* is not valid JSON"):
        check_golden(CheckConfig(str(root)))


def test_update_appends_history_with_the_verdict(golden_root, tmp_path):
    root = copy_of(golden_root, tmp_path)
    old = read_golden(next(root.iterdir()))
    with pytest.raises(InputError, match="needs --reason"):
        update_golden(root, " ")
    new = update_golden(root, "try flash attention", overrides=FLASH)
    entry = new.history[-1]
    assert entry.reason == "try flash attention" and entry.verdict.word == "near-tie"
    assert entry.old_logits_sha256 == old.logits_sha256 != entry.new_logits_sha256 == new.logits_sha256
    assert "options.flash_attn: (unset) → True" in entry.changes
    assert entry.summary["positions"] == old.n_positions and entry.summary["max_abs_diff"] > 0.1
    assert read_golden(new.folder).history[-1].reason == "try flash attention"  # on disk, file hash verified
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no leftovers
    # the golden now records flash attention: checking that build is bit-exact, and a second update says so
    assert check_golden(CheckConfig(str(root), detection=False)).verdict.word == "bit-exact"
    again = update_golden(root, "rebuild, no change")
    assert again.history[-1].verdict.word == "bit-exact" and len(again.history) == 2
    assert again.logits_sha256 == new.logits_sha256


def test_topk_store_checks_on_the_stored_tokens(tmp_path):
    manifest = record_golden(RecordConfig(Variant("golden", "llamacpp"), PROMPTS[:1], N_DECODE, store="topk:16"),
                             tmp_path)
    assert manifest.top_k == 16 and manifest.logits_bytes < 20_000
    same = check_golden(CheckConfig(str(tmp_path), detection=False))
    assert same.passed and same.verdict.word == "bit-exact" and same.prompts[0].comparison.scope == "top-k"
    flash = check_golden(CheckConfig(str(tmp_path), overrides=FLASH, detection=False))
    assert not flash.passed and flash.prompts[0].comparison.differing_rows > 0
    with pytest.raises(InputError, match="needs the whole vocabulary"):
        export_kld_base(read_golden(manifest.folder), tmp_path / "x.kld")


def test_exported_kld_file_reads_back_against_the_same_engine(tmp_path):
    """A prefill-only golden (--tokens 0) exported and checked on the same build: only the 16-bit rounding remains."""
    text = ("The harbour town woke slowly on the first cold morning of the year. Fishermen pulled their boats up "
            "the shingle, gulls argued over the scraps, and the baker opened his shutters.")
    prompts = [Prompt("a", text), Prompt("b", text.replace("harbour", "mountain"))]
    manifest = record_golden(RecordConfig(Variant("golden", "llamacpp"), prompts, 0), tmp_path / "g")
    info = export_kld_base(manifest, tmp_path / "golden.kld")
    shortest = min(len(p.input_ids) for p in manifest.prompts)
    assert (info.n_ctx, info.n_chunk, info.decode_scored) == (shortest, 2, 0)
    assert info.scored == 2 * (shortest - 1 - shortest // 2)
    result = check_kld_base(tmp_path / "golden.kld", Variant("current", "llamacpp"),
                            bar=Bar(max_kld_mean=1e-4, min_top1=0.5))
    s = result.stats
    assert s.count == info.scored and s.same_top == 1.0
    assert abs(s.kld_mean) < 1e-5 and s.ratio == pytest.approx(1.0, abs=1e-4)  # only the 16-bit rounding remains
    assert result.passed and not result.bos_replaced
    with pytest.raises(InputError, match="--allow judges a verdict"):
        check_kld_base(tmp_path / "golden.kld", Variant("current", "llamacpp"), bar=Bar(allow="near-tie"))
    with pytest.raises(InputError, match="between 3 and the shortest"):
        export_kld_base(manifest, tmp_path / "y.kld", n_ctx=shortest + 1)
    with pytest.raises(InputError, match=rf"^a chunk of .*golden\.kld \({shortest} tokens\) exceeds the context of 16 "
                                         r"tokens; pass a larger n_ctx=\.\.\. in the variant$"):
        check_kld_base(tmp_path / "golden.kld", Variant("small", "llamacpp", options={"n_ctx": "16"}),
                       bar=Bar(max_kld_mean=1e-4))


def test_exported_decode_positions_carry_the_prefill_decode_difference(golden_root, tmp_path):
    """Decode rows were computed M=1; the KLD check evaluates each chunk in one batch (prefill): they differ."""
    _, manifest = golden_root
    info = export_kld_base(manifest, tmp_path / "golden.kld")
    shortest = min(len(p.input_ids) for p in manifest.prompts)
    first = shortest // 2
    assert info.decode_scored == sum(shortest - 1 - max(first, len(p.prompt_ids)) for p in manifest.prompts) > 0
    s = check_kld_base(tmp_path / "golden.kld", Variant("current", "llamacpp")).stats
    assert s.same_top == 1.0 and 1e-5 < s.kld_mean < 0.05  # prefill vs decode: a near-tie difference, not zero


def test_a_rebuilt_cmd_engine_is_a_build_change_and_its_command_is_recorded(tmp_path):
    """A cmd engine's golden records its command and the SHA-256 of the files it names: editing the script
    (a rebuild in place) is a build change that lifts the bar, and the report names it."""
    import sys
    from pathlib import Path

    from logitlab.engines.variant import parse_variant

    script = tmp_path / "engine.py"
    script.write_text((Path(__file__).resolve().parents[2] / "examples" / "numpy_cmd_engine.py").read_text())
    template = (f"cmd:{sys.executable} {script} --tokens {{tokens}} --logits {{logits}} --n-prompt {{n_prompt}} "
                f"--n-decode {{n_decode}}?vocab=4096")
    variant = parse_variant(template, "golden", default_engine="llamacpp")
    root = tmp_path / "golden"
    manifest = record_golden(RecordConfig(variant, PROMPTS[:1], 4), root)
    build, options = manifest.provenance.build, manifest.provenance.options
    assert options["command"].startswith(sys.executable) and str(script) in options["command"]
    assert len(build[f"sha256 {script}"]) == 64 and len(build[f"sha256 {sys.executable}"]) == 64
    # re-created from the golden alone: the command is recorded
    same = check_golden(CheckConfig(str(root), detection=False))
    assert same.passed and same.changes == [] and same.bar.allow == "bit-exact"
    script.write_text(script.read_text() + "\n# rebuilt\n")  # same logits, another build
    rebuilt = check_golden(CheckConfig(str(root), bar=Bar(allow="ulp-noise"), detection=False))
    assert [(c.field, c.gate) for c in rebuilt.changes] == [(f"build.sha256 {script}", True)]
    assert rebuilt.passed and rebuilt.verdict.word == "bit-exact" and rebuilt.bar.allow == "ulp-noise"
    assert rebuilt.bar_reason.startswith("build changed")


def test_a_topk_store_that_reaches_the_vocabulary_is_refused_before_any_run(tmp_path):
    config = RecordConfig(Variant("golden", "llamacpp"), PROMPTS[:1], 2, store="topk:49152")
    with pytest.raises(InputError, match=r"^--store topk:49152: K reaches the vocabulary of 49152 tokens"):
        record_golden(config, tmp_path / "golden")
    assert not (tmp_path / "golden").exists() or not any((tmp_path / "golden").iterdir())


def test_the_rows_a_golden_stores_and_a_check_compares():
    """Issue #31 (``golden --positions``): an older golden (no positions) stores every row; a check compares the
    rows stored, or the spec's within them, by their index among the stored rows; rows not stored are refused."""
    from types import SimpleNamespace

    from logitlab.dumps.golden_format import GoldenPrompt
    from logitlab.experiments.golden.rows import check_rows, record_rows, stored_selection
    from logitlab.experiments.positions import Selected

    assert record_rows("all", [[1, 2, 3]], 2) == [None]
    assert [r.tolist() for r in record_rows("last,0", [[1, 2, 3], [4]], 2)] == [[0, 4], [0, 2]]
    old = SimpleNamespace(folder="g/x", positions=None, n_positions=5,
                          prompts=[GoldenPrompt("p", "text", [1, 2, 3], [7, 8])])
    rows = check_rows(old, None)
    assert rows[0].run is None and rows[0].stored is None and stored_selection(old, None, rows) is None
    rows = check_rows(old, "every:2")
    assert rows[0].run.tolist() == rows[0].stored.tolist() == [0, 2, 4]
    assert stored_selection(old, "every:2", rows) == Selected("every:2", 3, 5)
    new = SimpleNamespace(folder="g/x", positions="1,3-", n_positions=5,
                          prompts=[GoldenPrompt("p", "text", [1, 2, 3], [7, 8], positions=[1, 3, 4])])
    rows = check_rows(new, None)
    assert rows[0].run.tolist() == [1, 3, 4] and rows[0].stored.tolist() == [0, 1, 2]
    assert stored_selection(new, None, rows) == Selected("1,3-", 3, 5)
    assert check_rows(new, "last")[0].stored.tolist() == [2]
    with pytest.raises(InputError, match=r"^--positions 'all' asks for position 0 of prompt 'p', which golden g/x "
                                         r"did not store \(recorded with --positions '1,3-': positions 1, 3, 4\)"):
        check_rows(new, "all")
