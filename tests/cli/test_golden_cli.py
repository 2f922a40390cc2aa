"""``logitlab golden`` on the embedded model: exit codes 0 / 1 / 2, what the reports say, saved results render again."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from logitlab import report
from logitlab.jsonio import to_jsonable

pytestmark = pytest.mark.engine

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
PROMPTS = ("--prompt", "The capital of France is", "--prompt", "def add(a, b):")


def logitlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "logitlab", *map(str, args)], capture_output=True, text=True,
                          env=ENV, cwd=cwd)


def one_error_line(proc):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli") / "golden"
    proc = logitlab("golden", "record", *PROMPTS, "--tokens", 8, "-o", root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("golden: 2 prompts, 28 positions × 49152 vocab, store full: 5.5 MB; "
                                  "--store topk:64 would be ")  # the size, first
    assert "logitlab golden: recorded" in proc.stdout
    return root


def test_check_passes_bit_exact_then_flash_attention_fails_and_passes_near_tie(golden, tmp_path):
    ok = logitlab("golden", "check", golden, "--json", tmp_path / "ok.json", "--markdown", tmp_path / "ok.md")
    assert ok.returncode == 0, ok.stderr
    assert "logitlab golden check: PASS (bit-exact)" in ok.stdout
    assert "matched        recorded under this device key" in ok.stdout
    assert "what changed in the provenance: nothing" in ok.stdout
    assert "bar: same device key, build and options: bit-exact is required" in ok.stdout

    fail = logitlab("golden", "check", golden, "--candidate", "flash_attn=1")  # as in ab, verify, sweep
    # (and below its alias --variant, the spelling of golden record and update)
    assert fail.returncode == 1, fail.stderr
    assert "logitlab golden check: FAIL (near-tie)" in fail.stdout
    assert "• options.flash_attn: (unset) → True" in fail.stdout
    assert fail.stderr.strip() == "golden check failed: verdict near-tie > allowed bit-exact"
    # issue #32: per prompt, the detection limit of its comparison: a column of the table, and the worst
    # prompt's lines under the verdict
    assert "argmax-up" in fail.stdout.split("replayed prompts")[1].split("prompt-1")[0]
    assert ": detection limit: faults planted into a copy of this run, the smallest size (logits) that reads " \
           "divergent wherever it lands" in fail.stdout
    assert "• one logit (the argmax token) raised: ≥ " in fail.stdout

    near = logitlab("golden", "check", golden, "--variant", "flash_attn=1", "--allow", "near-tie", "--min-top1",
                    "0.5", "--quiet", "--json", tmp_path / "near.json", "--markdown", tmp_path / "near.md")
    assert near.returncode == 0 and near.stdout == "", near.stderr
    saved = json.loads((tmp_path / "near.json").read_text())
    assert saved["kind"] == "golden-check" and saved["passed"] and saved["verdict"]["word"] == "near-tie"
    limits = [next(s for s in p["detection"]["shapes"] if s["shape"] == "argmax-up") for p in saved["prompts"]]
    assert all(0 < up["limit"] < 10 and up["caught"] == up["probed"] for up in limits), limits
    markdown = (tmp_path / "near.md").read_text().splitlines()
    assert next(line for line in markdown if line.startswith("| prompt |")).endswith("| argmax-up limit |")
    table = [line for line in markdown if line.startswith("| prompt-")]
    assert [line.rstrip(" |").rsplit("| ", 1)[1] for line in table] == [f"{up['limit']:.4g}" for up in limits]
    exact = json.loads((tmp_path / "ok.json").read_text())  # bit-exact: a single logit is caught at 16 ULP
    assert all(p["detection"]["verdict"] == "bit-exact" for p in exact["prompts"])
    assert saved["bar_reason"].startswith("options changed: the allowed bar applies (verdict ≤ near-tie, same top-1")

    for name in ("ok", "near"):  # saved results render again, byte for byte
        again = logitlab("report", tmp_path / f"{name}.json", "--markdown", tmp_path / f"{name}-again.md")
        assert again.returncode == 0, again.stderr
        assert (tmp_path / f"{name}-again.md").read_text() == (tmp_path / f"{name}.md").read_text()
        data = json.loads((tmp_path / f"{name}.json").read_text())
        assert to_jsonable(report.load_result(data).to_dict()) == data


def test_strict_device_refuses_another_device_key(golden, tmp_path):
    other = tmp_path / "other"
    folder = next(golden.iterdir())
    shutil.copytree(folder, other / "cpu-elsewhere-12345678")
    manifest = other / "cpu-elsewhere-12345678" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["provenance"]["device"]["key"] = "cpu-elsewhere-12345678"
    manifest.write_text(json.dumps(data))
    line = one_error_line(logitlab("golden", "check", other, "--strict-device"))
    assert line.startswith(f"error: no golden for this device key {folder.name} among cpu-elsewhere-12345678; "
                           "--strict-device refuses")
    fallback = logitlab("golden", "check", other, "--no-detection-limit")
    assert fallback.returncode == 0, fallback.stderr
    assert "fallback: no golden for this device key" in fallback.stdout
    assert f"• device.key: cpu-elsewhere-12345678 → {folder.name}" in fallback.stdout


def test_update_records_the_verdict_and_reason(golden, tmp_path):
    root = tmp_path / "g"
    shutil.copytree(golden, root)
    proc = logitlab("golden", "update", root, "--reason", "bump llama.cpp", "--variant", "flash_attn=1",
                    "--json", tmp_path / "u.json", "--markdown", tmp_path / "u.md")
    assert proc.returncode == 0, proc.stderr
    assert "update: near-tie vs the previous golden (worst prompt: prompt-2) — reason: bump llama.cpp" in proc.stdout
    again = logitlab("report", tmp_path / "u.json", "--markdown", tmp_path / "u-again.md")
    assert again.returncode == 0 and (tmp_path / "u-again.md").read_text() == (tmp_path / "u.md").read_text()
    assert one_error_line(logitlab("golden", "update", root)) == \
        "error: golden update needs --reason TEXT: why the golden changes (it goes into the history)"


def test_bad_input_is_one_error_line(golden, tmp_path):
    line = one_error_line(logitlab("golden", "check", tmp_path / "nowhere"))
    assert line == f"error: golden folder {tmp_path / 'nowhere'} does not exist; record one with: logitlab golden " \
                   f"record -o {tmp_path / 'nowhere'}"
    corrupt = tmp_path / "corrupt"
    shutil.copytree(golden, corrupt)
    logits = next(corrupt.iterdir()) / "logits.safetensors"
    logits.write_bytes(logits.read_bytes()[:-100])
    assert "is corrupt" in one_error_line(logitlab("golden", "check", corrupt))
    model = tmp_path / "model"
    shutil.copytree(golden, model)
    manifest = next(model.iterdir()) / "manifest.json"
    data = json.loads(manifest.read_text())
    data["provenance"]["model_sha256"] = "f" * 64
    manifest.write_text(json.dumps(data))
    assert "is for another model" in one_error_line(logitlab("golden", "check", model))
    (tmp_path / "short.kld").write_bytes(b"_logits_" + (64).to_bytes(4, "little") + (49152).to_bytes(4, "little")
                                         + (2).to_bytes(4, "little") + b"\0" * 100)
    assert "is truncated: 120 bytes, expected" in one_error_line(
        logitlab("golden", "check", "--llamacpp-kld", tmp_path / "short.kld"))
    assert "give a golden folder DIR or --llamacpp-kld FILE" in one_error_line(logitlab("golden", "check"))
    assert "--store 'topk:x'" in one_error_line(logitlab("golden", "record", *PROMPTS, "--store", "topk:x", "-o",
                                                         tmp_path / "x"))
    assert not (tmp_path / "x").exists()


def test_export_and_check_against_a_kld_file(golden, tmp_path):
    proc = logitlab("golden", "export-kld", golden, "-o", tmp_path / "g.kld")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith(f"wrote {tmp_path / 'g.kld'}: 2 chunks × 13 tokens, 12 scored positions")
    assert lines[2].startswith("note: 11 of the 12 scored positions were decoded one token at a time")
    check = logitlab("golden", "check", "--llamacpp-kld", tmp_path / "g.kld", "--max-kld-mean", "0.05",
                     "--json", tmp_path / "k.json", "--markdown", tmp_path / "k.md")
    assert check.returncode == 0, check.stderr
    assert "Mean PPL(Q)" in check.stdout and "Same top p" in check.stdout
    again = logitlab("report", tmp_path / "k.json", "--markdown", tmp_path / "k-again.md")
    assert again.returncode == 0 and (tmp_path / "k-again.md").read_text() == (tmp_path / "k.md").read_text()
    tight = logitlab("golden", "check", "--llamacpp-kld", tmp_path / "g.kld", "--max-kld-mean", "1e-9")
    assert tight.returncode == 1 and tight.stderr.startswith("golden check failed: mean KLD")


def test_check_record_adds_the_golden_numerics_to_the_history(golden, tmp_path):
    history = tmp_path / "history"
    proc = logitlab("golden", "check", golden, "--variant", "flash_attn=1", "--allow", "near-tie", "--quiet",
                    "--record", history, "--commit", "abc123", "--machine", "ci-box", "--no-detection-limit",
                    "--json", tmp_path / "c.json")
    assert proc.returncode == 0, proc.stderr
    assert [p["detection"] for p in json.loads((tmp_path / "c.json").read_text())["prompts"]] == [None, None]
    files = sorted((history / "ci-box").glob("*.json"))
    assert len(files) == 1
    record = json.loads(files[0].read_text())
    metrics = {(v, m) for v, ms in record["metrics"].items() for m in ms}
    assert ("golden:prompt-1", "kld_mean") in metrics and ("golden:prompt-1", "bit_exact_share") in metrics
    share = record["metrics"]["golden:prompt-1"]["bit_exact_share"]["value"]
    assert 0 <= share < 100  # flash attention changes the logits against the golden


def test_a_golden_of_the_last_positions_is_small_checks_bit_exact_and_refuses_rows_it_lacks(golden, tmp_path):
    """Issue #31: ``golden record --positions last`` stores one row a prompt (the manifest names the spec and the
    run positions), a check compares those and says so, and a check asking rows it did not store is one error
    line before any engine loads; a golden of every row checks any selection of them."""
    root = tmp_path / "last"
    rec = logitlab("golden", "record", *PROMPTS, "--tokens", 8, "--positions", "last", "-o", root, "--json",
                   tmp_path / "rec.json", "--markdown", tmp_path / "rec.md")
    assert rec.returncode == 0, rec.stderr
    assert rec.stderr.startswith("golden: 2 prompts, 2 positions × 49152 vocab, store full: 393.2 kB")
    assert "stores 2 of 28 positions (last): a check compares those" in rec.stdout
    again = logitlab("report", tmp_path / "rec.json", "--markdown", tmp_path / "rec-again.md")
    assert again.returncode == 0 and (tmp_path / "rec-again.md").read_text() == (tmp_path / "rec.md").read_text()
    manifest = json.loads(next(root.glob("*/manifest.json")).read_text())
    assert manifest["positions"] == "last" and [p["positions"] for p in manifest["prompts"]] == [[12], [14]]
    assert manifest["logits_bytes"] < 2 * 49152 * 4 + 4096  # two rows of logits, not 28
    ok = logitlab("golden", "check", root, "--json", tmp_path / "ok.json", "--markdown", tmp_path / "ok.md")
    assert ok.returncode == 0, ok.stderr
    assert "logitlab golden check: PASS (bit-exact)" in ok.stdout
    assert "(worst of 2 prompts: prompt-1; compared 2 of 28 positions (last))" in ok.stdout
    data = json.loads((tmp_path / "ok.json").read_text())
    assert data["positions"] == {"spec": "last", "compared": 2, "of": 28}
    assert [p["comparison"]["positions"] for p in data["prompts"]] == [[12], [14]]
    again = logitlab("report", tmp_path / "ok.json", "--markdown", tmp_path / "again.md")
    assert again.returncode == 0 and (tmp_path / "again.md").read_text() == (tmp_path / "ok.md").read_text()

    # the model does not exist: an engine load would have said so first
    line = one_error_line(logitlab("golden", "check", root, "--positions", "0-3", "--model", "/nonexistent/m.gguf"))
    assert line.startswith(f"error: --positions '0-3' asks for position 0 of prompt 'prompt-1', which golden "
                           f"{next(root.iterdir())} did not store (recorded with --positions 'last': position 12)")

    every = logitlab("golden", "check", golden, "--positions", "last", "--quiet", "--json", tmp_path / "all.json")
    assert every.returncode == 0, every.stderr
    assert json.loads((tmp_path / "all.json").read_text())["positions"] == {"spec": "last", "compared": 2, "of": 28}
