"""The ``cmd`` engine: the file protocol against real processes.

The main tests drive ``examples/llamacpp_cmd_engine.py`` (llama.cpp on the
embedded model behind the protocol); a tiny generated script covers formats
and failures without loading a model.
"""

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from logitlab.engines.command import CommandEngine, read_logits
from logitlab.engines.variant import parse_variant
from logitlab.errors import EngineError, InputError
from logitlab.experiments.ab import AbConfig, run_ab
from logitlab.experiments.isolation import load_engine
from logitlab.engines.workload import run_workload

from conftest import SHORT_PROMPT

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llamacpp_cmd_engine.py"
PY = sys.executable
DECODE_TEMPLATE = f"{PY} {EXAMPLE} --tokens {{tokens}} --logits {{logits}} --n-prompt {{n_prompt}} --n-decode {{n_decode}}"
SCORER_TEMPLATE = f"{PY} {EXAMPLE} --tokens {{tokens}} --logits {{logits}}"
N_DECODE = 4

# A stand-in engine: deterministic pseudo-logits per (position, token), written in the format the
# logits file's suffix asks for; FAKE_BAD=rows|bytes|exit|nothing|nan|stale breaks it on purpose (stale: the
# logits depend on the position only, not on the tokens fed).
FAKE = textwrap.dedent("""
    import os, sys, json, struct
    import numpy as np
    tokens_path, logits_path, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tokens = [int(t) for t in open(tokens_path).read().split()]
    bad = os.environ.get("FAKE_BAD", "")
    seed = (lambda i, t: i * 7919) if bad == "stale" else (lambda i, t: i * 7919 + t)  # stale: ignores the tokens
    rows = np.stack([np.random.default_rng(seed(i, t)).normal(0, 3, vocab) for i, t in enumerate(tokens)])
    rows = rows.astype(np.float32)
    if bad == "exit":
        print("loading weights", file=sys.stderr)
        print("fatal: out of device memory", file=sys.stderr)
        sys.exit(3)
    if bad == "rows":
        rows = rows[:-1]
    if bad == "nothing":
        sys.exit(0)
    if bad == "nan":  # one NaN in one logit of one decode row
        rows[-2, 3] = np.nan
    if logits_path.endswith(".npy"):
        np.save(logits_path, rows)
    elif logits_path.endswith(".safetensors"):
        header = json.dumps({"logits": {"dtype": "F32", "shape": list(rows.shape),
                                        "data_offsets": [0, rows.nbytes]}}).encode()
        open(logits_path, "wb").write(struct.pack("<Q", len(header)) + header + rows.tobytes())
    else:
        data = rows.tobytes()
        open(logits_path, "wb").write(data[:-4] if bad == "bytes" else data)
    print("prompt eval time = 12.5 ms / decode eval time = 3.5 ms", file=sys.stderr)
""")


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    path = tmp_path_factory.mktemp("fake") / "fake_engine.py"
    path.write_text(FAKE)
    return f"{PY} {path} {{tokens}} {{logits}} {{vocab}}"


def cmd_variant(template, label="control", **options):
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return parse_variant(f"?{query}" if query else "", label, default_engine=f"cmd:{template}")


@pytest.mark.engine
def test_ab_cli_nan_from_a_candidate_knob_is_a_divergent_verdict_not_bad_usage(fake, tmp_path):
    """A CI gate must tell "the engine produced a NaN" (exit 1) from "bad usage" (exit 2)."""
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [PY, "-m", "logitlab", "ab", "--engine", f"cmd:{fake}", "--control", "vocab=64", "--candidate", "vocab=64",
         "--candidate-env", "FAKE_BAD=nan", "--prompt", SHORT_PROMPT, "--tokens", "4", "--repeats", "2",
         "--warmup", "0", "--require", "near-tie", "--json", str(out)],
        capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().endswith("require near-tie: the verdict is divergent")
    data = json.loads(out.read_text())
    assert data["verdict"]["word"] == "divergent" and data["error"] is None
    assert data["aa"]["control_reproducible"] is True  # the A/A was measured: the run went on
    assert set(data["speed"]) == {"prefill"}  # a whole-sequence command times prefill only
    candidates = [r for r in data["runs"] if r["variant"] == "candidate"]
    assert candidates and all(r["comparison"]["nan_obs"] == 1 for r in candidates)
    assert "NaN / Inf" in proc.stdout and "nan_obs 1" in proc.stdout


# -- the reference implementation -------------------------------------------------------------
@pytest.mark.engine
def test_protocol_loses_nothing_against_the_llamacpp_engine():
    cmd = load_engine(cmd_variant(DECODE_TEMPLATE))
    prompt = cmd.tokenize(SHORT_PROMPT)
    greedy = run_workload(cmd, prompt, N_DECODE)
    replayed = run_workload(cmd, prompt, N_DECODE, replay=greedy.generated)
    native = load_engine(parse_variant("", "control", default_engine="llamacpp"))
    try:
        direct = run_workload(native, prompt, N_DECODE)
    finally:
        native.close()
    assert greedy.generated == direct.generated and len(greedy.generated) == N_DECODE
    assert greedy.logits.shape == (len(prompt) + N_DECODE, 49152)
    assert greedy.logits.view(np.uint32).tobytes() == direct.logits.view(np.uint32).tobytes()
    assert greedy.same_bits(replayed)
    assert [(t.kind, t.n_tokens) for t in greedy.timings] == [("prefill", len(prompt)), ("decode", N_DECODE)]


@pytest.mark.engine
def test_scorer_only_command_gets_a_stepwise_greedy_reference():
    cmd = load_engine(cmd_variant(SCORER_TEMPLATE))
    assert not cmd.greedy_in_command
    prompt = cmd.tokenize(SHORT_PROMPT)
    out = run_workload(cmd, prompt, 2)
    assert len(out.generated) == 2 and out.logits.shape[0] == len(prompt) + 2
    assert out.generated[1] == int(np.argmax(out.logits[len(prompt)]))
    # no {n_prompt}: the command's whole run is one prefill of every position
    assert [(t.kind, t.n_tokens) for t in out.timings] == [("prefill", len(prompt) + 2)]


def ab_config(candidate_env=None, isolation="session"):
    candidate = dataclasses.replace(cmd_variant(DECODE_TEMPLATE, "candidate"), env=candidate_env or {})
    return AbConfig(control=cmd_variant(DECODE_TEMPLATE), candidate=candidate,
                    prompt=SHORT_PROMPT, n_decode=N_DECODE, repeats=1, warmup=0, isolation=isolation)


@pytest.mark.engine
def test_ab_threads_knob_does_nothing_and_control_reproduces():
    result = run_ab(ab_config({"LLAMACPP_CMD_THREADS": "1"}))
    assert result.control_reproducible and result.aa_diagnosis == "reproducible"
    assert result.verdict.word == "bit-exact"
    assert all(r.comparison.differing_entries == 0 for r in result.runs if r.comparison)


@pytest.mark.engine
def test_ab_cli_flash_attn_knob_is_caught_with_the_engines_own_verdict(tmp_path):
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [PY, "-m", "logitlab", "ab", "--engine", f"cmd:{DECODE_TEMPLATE}",
         "--candidate-env", "LLAMACPP_CMD_FLASH_ATTN=1", "--isolation", "process",
         "--prompt", SHORT_PROMPT, "--tokens", str(N_DECODE), "--repeats", "1", "--warmup", "0", "--quiet",
         "--json", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["aa"]["control_reproducible"] and data["verdict"]["word"] == "near-tie"
    assert data["config"]["candidate"]["env"] == {"LLAMACPP_CMD_FLASH_ATTN": "1"}
    assert data["manifest"]["engine"]["engine"] == "cmd"
    # the same change made through the llamacpp engine's own option gets the same verdict
    native = run_ab(AbConfig(control=parse_variant("flash_attn=0", "control", default_engine="llamacpp"),
                             candidate=parse_variant("flash_attn=1", "candidate", default_engine="llamacpp"),
                             prompt=SHORT_PROMPT, n_decode=N_DECODE, repeats=1, warmup=0))
    assert data["verdict"]["word"] == native.verdict.word
    assert data["generated_ids"] == native.generated_ids


# -- formats, timing, failures (a tiny stand-in engine, no model) -----------------------------
@pytest.mark.engine
@pytest.mark.parametrize("fmt", ["npy", "safetensors", "f32"])
def test_formats_and_reported_timing(fake, fmt):
    engine = load_engine(cmd_variant(fake, vocab=32, format=fmt,
                                     timing_regex=r"prompt eval time = (?P<prefill_ms>[\d.]+) ms"))
    prompt = engine.tokenize(SHORT_PROMPT)
    out = run_workload(engine, prompt, 3)
    assert out.logits.shape == (len(prompt) + 3, 32) and out.logits.dtype == np.float32
    assert out.timings[0].kind == "prefill" and out.timings[0].seconds == pytest.approx(0.0125)
    assert out.same_bits(run_workload(engine, prompt, 3, replay=out.generated))


@pytest.mark.engine
def test_wall_time_when_the_command_prints_no_timing(fake):
    engine = load_engine(cmd_variant(fake, vocab=16, timing_regex=r"never (?P<decode>\d+)"))
    out = run_workload(engine, [1, 2, 3], 1, replay=[4])
    assert [(t.kind, t.n_tokens) for t in out.timings] == [("prefill", 4)] and out.timings[0].seconds > 0


def test_read_logits_rejects_bad_files(tmp_path):
    raw = tmp_path / "l.f32"
    np.zeros((2, 5), np.float32).tofile(raw)
    assert read_logits(raw, 5).shape == (2, 5)
    with pytest.raises(EngineError, match=r"is 40 bytes, not a whole number of rows of 3 float32"):
        read_logits(raw, 3)
    with pytest.raises(EngineError, match="pass vocab=N"):
        read_logits(raw, None)
    np.save(tmp_path / "d.npy", np.zeros((2, 5), np.float64))
    with pytest.raises(EngineError, match="holds float64, expected float32"):
        read_logits(tmp_path / "d.npy", None)
    np.save(tmp_path / "h.npy", np.ones((2, 5), np.float16))
    assert read_logits(tmp_path / "h.npy", None).dtype == np.float32


@pytest.mark.parametrize("bad, message", [
    ("exit", r"exited with status 3; stderr: loading weights \| fatal: out of device memory"),
    ("rows", r"holds shape \(5, 16\), expected \(6, 16\): wrong number of rows"),
    ("bytes", r"is 380 bytes, not a whole number of rows of 16 float32"),
    ("nothing", r"exited 0 but wrote no logits file"),
])
@pytest.mark.engine
def test_broken_command_is_one_clear_error(fake, bad, message, monkeypatch):
    engine = load_engine(cmd_variant(fake, vocab=16, format="f32"))
    monkeypatch.setenv("FAKE_BAD", bad)
    with pytest.raises(EngineError, match=message):
        run_workload(engine, [1, 2, 3, 4, 5], 1, replay=[6])


@pytest.mark.parametrize("template, message", [
    ("./x --tokens {tokens}", "has no {logits} placeholder"),
    ("./x --logits {logits}", "has no {tokens} placeholder"),
    ("./x {tokens} {logits} {weights}", r"unknown placeholder \{weights\}"),
    ("./x {tokens} {logits} {n_decode}", r"has \{n_decode\} but no \{n_prompt\}"),
    ("no-such-engine-binary {tokens} {logits}", "command 'no-such-engine-binary' .* not found"),
    ("./x {tokens} {logits} 'unclosed", "cannot split the cmd template"),
])
def test_bad_template_is_an_input_error(template, message):
    with pytest.raises(InputError, match=message):
        CommandEngine(model=None, options={"command": template})


def test_engine_target_parsing():
    v = parse_variant("", "control", default_engine="cmd:./eng --n=4 {tokens} {logits}")
    assert (v.engine, v.options) == ("cmd", {"command": "./eng --n=4 {tokens} {logits}"})
    v = parse_variant("format=f32,vocab=8", "candidate", default_engine="cmd:./eng {tokens} {logits}")
    assert v.options == {"command": "./eng {tokens} {logits}", "format": "f32", "vocab": "8"}
    v = parse_variant("command:./other {tokens} {logits}?vocab=8", "candidate", default_engine="cmd:./eng")
    assert v.options == {"command": "./other {tokens} {logits}", "vocab": "8"}
    assert parse_variant("llamacpp:", "c", default_engine="cmd:./eng?vocab=8").options == {}
    v = parse_variant("vocab=9", "candidate", default_engine="cmd:./eng {tokens} {logits}?format=f32&vocab=8")
    assert v.options == {"command": "./eng {tokens} {logits}", "format": "f32", "vocab": "9"}


@pytest.mark.engine
def test_cli_bad_input_is_one_line_exit_2_and_keeps_partial_results(fake, tmp_path):
    def ab(*args):
        return subprocess.run([PY, "-m", "logitlab", "ab", "--prompt", SHORT_PROMPT, "--tokens", "2",
                               "--repeats", "1", "--warmup", "0", "--quiet", *args],
                              capture_output=True, text=True, cwd=tmp_path)

    proc = ab("--engine", "cmd:./my-engine --tokens {tokens}")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: the cmd template './my-engine --tokens {tokens}' has no {logits} placeholder; "
        "logitlab passes the output logits file path there"]
    proc = ab("--engine", "cmd:./my-engine --tokens {tokens} --logits {logits}")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "command './my-engine' (first word of the cmd template) not found" in proc.stderr
    out = tmp_path / "partial.json"
    proc = ab("--engine", f"cmd:{fake}", "--control", "vocab=16,format=f32", "--candidate", "vocab=16,format=f32",
              "--candidate-env", "FAKE_BAD=bytes", "--json", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: logits file logits.f32 is ")
    data = json.loads(out.read_text())
    assert data["error"] and [r["variant"] for r in data["runs"]] == ["control"]


@pytest.mark.engine
def test_ab_with_a_scorer_only_command_has_no_decode_phase(fake):
    control = cmd_variant(fake, vocab=16)
    result = run_ab(AbConfig(control=control, candidate=dataclasses.replace(control, label="candidate"),
                             prompt=SHORT_PROMPT, n_decode=2, repeats=1, warmup=0))
    assert result.verdict.word == "bit-exact" and result.control_reproducible
    assert set(result.speed) == {"prefill"}  # no {n_prompt} in the template: each run is one prefill
    assert all(r.prefill_tokens == len(result.prompt_ids) + 2 and r.decode_tokens == 0 for r in result.runs)


@pytest.mark.engine
def test_a_fault_at_one_position_is_caught_against_the_pairs_noise_floor():
    """Issue #19: flash attention moves every row (its floor); a fault at one position stands far outside it."""
    candidate = dataclasses.replace(cmd_variant(DECODE_TEMPLATE, "candidate"),
                                    env={"LLAMACPP_CMD_FLASH_ATTN": "1", "LLAMACPP_CMD_PERTURB": "10:1.0"})
    result = run_ab(AbConfig(control=cmd_variant(DECODE_TEMPLATE), candidate=candidate, prompt=SHORT_PROMPT,
                             n_decode=N_DECODE, repeats=1, warmup=0, explain=4))
    v = result.verdict
    print("\n" + "\n".join(v.evidence))
    assert v.word == "divergent" and v.outside == [10] and v.floor["measured"]
    assert v.evidence[0].startswith("1 position(s) outside the noise floor (10); position 10 moved ")
    assert "the pair's p99" in v.evidence[0]
    # the fault reproduces and no control (rerun, prefill vs decode) moves the position: another code path there
    positions = {e.position: e for e in result.explanation.positions}
    e = positions[10]
    assert e.cause == "kernel-path", e.reason
    assert all(c.bit_exact for c in e.controls if c.control == "rerun") and e.floor_factor > 4
    batch = [c for c in e.controls if c.control == "alone vs in a batch"]
    assert batch and not any(c.available for c in batch)  # cmd runs no batches of sequences



@pytest.mark.engine
def test_the_detection_limit_brackets_a_fault_planted_by_the_engine():
    """Issue #32: ab's detection limit for a whole-row fault (s × N(0, 1) at one position, seeded by the position
    as LLAMACPP_CMD_PERTURB seeds it) is checked on the real engine: planted at 1.1× the limit at the hardest
    position it reads divergent there, at 0.8× it does not. Flash attention gives the pair its noise."""
    control = cmd_variant(DECODE_TEMPLATE)

    def ab(perturb=None):
        env = {"LLAMACPP_CMD_FLASH_ATTN": "1", **({"LLAMACPP_CMD_PERTURB": perturb} if perturb else {})}
        candidate = dataclasses.replace(cmd_variant(DECODE_TEMPLATE, "candidate"), env=env)
        return run_ab(AbConfig(control=control, candidate=candidate, prompt=SHORT_PROMPT, n_decode=N_DECODE,
                               repeats=1, warmup=0, detection=perturb is None))

    clean = ab()
    assert clean.verdict.word in ("noise", "near-tie"), clean.verdict.evidence
    limit = clean.detection.shape("row-noise")
    assert limit.limit is not None and limit.caught == limit.probed and limit.above == "divergent"
    p = limit.position
    above, below = ab(f"{p}:{1.1 * limit.limit:.6g}"), ab(f"{p}:{0.8 * limit.limit:.6g}")
    print(f"\nrow-noise limit {limit.limit:.4g} at position {p}: 1.1× -> {above.verdict.word} "
          f"{above.verdict.outside}, 0.8× -> {below.verdict.word}")
    assert above.verdict.word == "divergent" and p in above.verdict.outside
    assert below.verdict.word != "divergent" and p not in below.verdict.outside


@pytest.mark.engine
def test_ab_self_check_names_an_ab_that_could_not_have_failed(fake, tmp_path):
    """Issue #32: logits that do not follow the tokens fed (a stale cache, a fixed file) make every A/B bit-exact;
    --self-check plants the last prompt token, sees nothing move, calls the A/B vacuous and fails --require."""
    def ab(env, out):
        return subprocess.run(
            [PY, "-m", "logitlab", "ab", "--engine", f"cmd:{fake}", "--control", "vocab=64", "--candidate",
             "vocab=64", "--control-env", env, "--candidate-env", env, "--prompt", SHORT_PROMPT, "--tokens", "2",
             "--repeats", "1", "--warmup", "0", "--self-check", "--require", "bit-exact",
             "--json", str(out)], capture_output=True, text=True, cwd=tmp_path)

    stale = ab("FAKE_BAD=stale", tmp_path / "stale.json")
    assert stale.returncode == 1, stale.stderr
    assert stale.stderr.strip().splitlines()[-1].startswith("error: the A/B is vacuous: inverse control not caught")
    data = json.loads((tmp_path / "stale.json").read_text())
    assert data["verdict"]["word"] == "bit-exact" and data["controls"][0]["caught"] is False
    assert "NOT caught" in stale.stdout and "vacuous:" in stale.stdout
    live = ab("FAKE_BAD=", tmp_path / "live.json")
    assert live.returncode == 0, live.stderr
    data = json.loads((tmp_path / "live.json").read_text())
    assert data["controls"][0]["caught"] is True and data["vacuous"] is None


@pytest.mark.parametrize("env, message", [
    ({"LLAMACPP_CMD_KV": "q3_z"}, "error: LLAMACPP_CMD_KV='q3_z' is not one of "),
    ({"LLAMACPP_CMD_UBATCH": "many"}, "error: LLAMACPP_CMD_UBATCH='many' is not an integer"),
    ({"LLAMACPP_CMD_PLANT": "argmax-up:99:1"}, "error: LLAMACPP_CMD_PLANT='argmax-up:99:1': SHAPE is argmax-up"),
    ({"LLAMACPP_CMD_PERTURB": "3"}, "error: LLAMACPP_CMD_PERTURB='3' is not POSITION:SIZE"),
    ({"LLAMACPP_CMD_SLOWDOWN": "-0.1"}, "error: LLAMACPP_CMD_SLOWDOWN='-0.1' is not a finite number >= 0"),
    ({"LLAMACPP_CMD_SLOWDOWN": "fast"}, "error: LLAMACPP_CMD_SLOWDOWN='fast' is not a finite number >= 0"),
])
@pytest.mark.engine
def test_the_reference_engines_bad_knobs_are_one_error_line_and_exit_2(tmp_path, env, message):
    import os

    tokens = tmp_path / "tokens.txt"
    tokens.write_text("1 2 3")
    logits = tmp_path / "l.npy"
    proc = subprocess.run([PY, str(EXAMPLE), "--tokens", str(tokens), "--logits", str(logits)],
                          capture_output=True, text=True, env={**os.environ, **env})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(message), proc.stderr
    assert not logits.exists()  # nothing written on bad input


@pytest.mark.engine
def test_the_planted_slowdown_leaves_the_logits_bit_exact(tmp_path):
    """``LLAMACPP_CMD_SLOWDOWN`` (the known slowdown benchmarks/bench_real_validity.py --part detect plants)
    only waits: the logits and the fed ids are the same bits as without it."""
    import os

    tokens = tmp_path / "tokens.txt"
    tokens.write_text("1 504 3")
    out = {}
    for name, env in (("plain", {}), ("slowed", {"LLAMACPP_CMD_SLOWDOWN": "0.5"})):
        logits, generated = tmp_path / f"{name}.npy", tmp_path / f"{name}.txt"
        proc = subprocess.run([PY, str(EXAMPLE), "--tokens", str(tokens), "--logits", str(logits), "--n-prompt", "3",
                               "--n-decode", "3", "--generated", str(generated)],
                              capture_output=True, text=True, env={**os.environ, **env})
        assert proc.returncode == 0, proc.stderr
        out[name] = (np.load(logits), generated.read_text().split())
    assert out["plain"][0].shape == (6, 49152)
    assert out["plain"][0].tobytes() == out["slowed"][0].tobytes()
    assert out["plain"][1] == out["slowed"][1] and len(out["plain"][1]) == 3


@pytest.mark.engine
@pytest.mark.parametrize("positions, seen", [("prompt", True), ("8-11,last", True), ("decode", False),
                                             ("0-9,11-", False)])
def test_positions_see_a_planted_fault_only_where_they_look(positions, seen):
    """Issue #31: ``--positions`` compares only the rows it selects. A fault the engine plants at prompt row 10
    is divergent, at its true position 10, when the selection holds row 10, and not seen when it does not."""
    candidate = dataclasses.replace(cmd_variant(DECODE_TEMPLATE, "candidate"), env={"LLAMACPP_CMD_PERTURB": "10:1.0"})
    result = run_ab(AbConfig(control=cmd_variant(DECODE_TEMPLATE), candidate=candidate, prompt=SHORT_PROMPT,
                             n_decode=N_DECODE, repeats=1, warmup=0, detection=False, positions=positions))
    n_prompt = len(result.prompt_ids)
    rows = {"prompt": list(range(n_prompt)), "8-11,last": [8, 9, 10, 11, n_prompt + N_DECODE - 1],
            "decode": list(range(n_prompt, n_prompt + N_DECODE)),
            "0-9,11-": [i for i in range(n_prompt + N_DECODE) if i != 10]}[positions]
    assert (result.positions.spec, result.positions.compared, result.positions.of) == \
        (positions, len(rows), n_prompt + N_DECODE)
    run = next(r for r in result.runs if r.slot == result.verdict_slot)
    assert run.comparison.n_positions == len(rows) and run.comparison.positions == rows
    v = result.verdict
    if seen:
        assert v.word == "divergent" and v.outside == [10], v.evidence
        assert "(10); position 10 " in v.evidence[0] and run.comparison.first_mismatch["position"] == 10
    else:
        assert v.word == "bit-exact" and run.comparison.first_mismatch is None
    assert result.control_reproducible


@pytest.mark.engine
@pytest.mark.parametrize("positions, seen", [("8-11", True), ("last", False)])
def test_a_golden_of_selected_positions_sees_a_planted_fault_only_where_it_stored_rows(positions, seen, tmp_path):
    """Issue #31: ``golden record --positions`` stores only the selected rows and ``golden check`` compares
    those: a fault the engine plants at prompt row 10 fails the check, at its true position 10, when the golden
    stored row 10, and is not seen when it did not."""
    from logitlab.experiments.golden.run import (CheckConfig, RecordConfig, VariantOverrides, check_golden,
                                                 record_golden)
    from logitlab.experiments.prompts import Prompt

    record_golden(RecordConfig(variant=cmd_variant(DECODE_TEMPLATE), prompts=(Prompt("p", SHORT_PROMPT),),
                               n_decode=N_DECODE, positions=positions), tmp_path)
    result = check_golden(CheckConfig(root=str(tmp_path), overrides=VariantOverrides(
        env={"LLAMACPP_CMD_PERTURB": "10:1.0"}), detection=False))
    comparison = result.prompts[0].comparison
    assert result.positions.spec == positions and result.positions.compared == comparison.n_positions
    if seen:
        assert comparison.positions == [8, 9, 10, 11] and comparison.first_mismatch["position"] == 10
        assert result.verdict.word == "divergent" and result.verdict.outside == [10] and not result.passed
    else:
        assert comparison.n_positions == 1 and comparison.first_mismatch is None
        assert result.verdict.word == "bit-exact" and result.passed
