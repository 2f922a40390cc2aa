"""llama-perplexity as a peer: its KL-divergence base files and statistics against logitlab's, on the same tokens.

- llama-perplexity writes a base file (flash attention off) and then judges flash attention on against it;
  ``logitlab golden check --llamacpp-kld`` judges the llamacpp engine with ``flash_attn=1`` against the same
  file. Tolerance: every figure llama-perplexity prints agrees to within one unit of its last printed digit.
- logitlab's 16-bit rows of the same logits reproduce llama-perplexity's file entry by entry (all but a few
  entries identical, none off by more than 1).
- A golden exported with ``golden export-kld`` is read by ``llama-perplexity --kl-divergence``: the same model
  and build give the same top token everywhere and a KLD at the 16-bit floor, and logitlab's own figures on
  that file agree with llama-perplexity's.

Marked ``peers``: the tools come from scripts/build-llama-tools.sh (``make tools``); without them these tests fail
with the hint.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from peers import PROSE, run_tool

from logitlab.dumps.llamacpp_kld import read_kld_base
from logitlab.engines import engine_class
from logitlab.engines.variant import Variant
from logitlab.experiments.golden.run import RecordConfig, record_golden
from logitlab.experiments.golden.kld import check_kld_base, export_kld_base
from logitlab.experiments.prompts import Prompt
from logitlab.numerics.llamacpp_kld import LlamaCppKldStats, quantize_log_probs

pytestmark = [pytest.mark.peers, pytest.mark.engine]

N_CTX = 64  # tokens per chunk; 31 scored positions each, 4 chunks: 124 (llama.cpp summarises from 100)
TEXT = PROSE
_LINE = re.compile(r"^(?P<label>[^:]+?)\s*:\s*(?P<value>-?\d+\.\d+)\s*%?\s*(?:±\s*(?P<unc>-?nan|\d+\.\d+))?\s*%?\s*$")


def parse_summary(text: str) -> dict[str, tuple[str, str | None]]:
    """llama-perplexity's summary lines: normalised label -> (value text, ± text or None), as printed."""
    out = {}
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match and ("KLD" in line or "PPL" in line or "Δp" in line or "Same top" in line):
            out[" ".join(match["label"].split())] = (match["value"], match["unc"])
    return out


def ours_as_printed(s: LlamaCppKldStats) -> dict[str, tuple[float, float | None]]:
    """logitlab's figures under llama-perplexity's labels and units (Δp and same top in %)."""
    kld_names = {"max": "Maximum KLD", "p99_9": "99.9% KLD", "p99": "99.0% KLD", "p95": "95.0% KLD",
                 "p90": "90.0% KLD", "median": "Median KLD", "p10": "10.0% KLD", "p5": "5.0% KLD", "p1": "1.0% KLD",
                 "p0_1": "0.1% KLD", "min": "Minimum KLD"}
    dp_names = {"max": "Maximum Δp", "p99_9": "99.9% Δp", "p99": "99.0% Δp", "p95": "95.0% Δp", "p90": "90.0% Δp",
                "p75": "75.0% Δp", "median": "Median Δp", "p25": "25.0% Δp", "p10": "10.0% Δp", "p5": "5.0% Δp",
                "p1": "1.0% Δp", "p0_1": "0.1% Δp", "min": "Minimum Δp"}
    out = {
        "Mean PPL(Q)": (s.ppl_q, s.ppl_q_unc), "Mean PPL(base)": (s.ppl_base, s.ppl_base_unc),
        "Cor(ln(PPL(Q)), ln(PPL(base)))": (100 * s.cor, None),
        "Mean ln(PPL(Q)/PPL(base))": (s.ln_ratio, s.ln_ratio_unc),
        "Mean PPL(Q)/PPL(base)": (s.ratio, s.ratio_unc), "Mean PPL(Q)-PPL(base)": (s.diff, s.diff_unc),
        "Mean KLD": (s.kld_mean, s.kld_unc), "Mean Δp": (100 * s.dp_mean, 100 * s.dp_unc),
        "RMS Δp": (100 * s.rms_dp, 100 * s.rms_dp_unc), "Same top p": (100 * s.same_top, 100 * s.same_top_unc),
    }
    out.update({label: (s.kld[key], None) for key, label in kld_names.items()})
    out.update({label: (100 * s.dp[key], None) for key, label in dp_names.items()})
    return out


def assert_agree(printed: dict[str, tuple[str, str | None]], ours: LlamaCppKldStats) -> int:
    """Every printed figure within one unit of its last digit of ours; returns how many were compared."""
    mine = ours_as_printed(ours)
    assert set(mine) <= set(printed), sorted(set(mine) - set(printed))
    bad = []
    for label, (value, unc) in mine.items():
        for text, x in ((printed[label][0], value), (printed[label][1], unc)):
            if text is None or x is None:
                continue
            if text.endswith("nan"):  # llama.cpp's sqrt of a variance that rounded below 0 (seen on AVX2 with
                if x > 1e-5:          # base = Q); logitlab clamps it to 0
                    bad.append(f"{label}: llama-perplexity {text}, logitlab {x:.8g}")
                continue
            unit = 10.0 ** -len(text.split(".")[1])
            if abs(float(text) - x) > unit * 1.0001:
                bad.append(f"{label}: llama-perplexity {text}, logitlab {x:.8g}")
    assert not bad, "; ".join(bad)
    return len(mine)


@pytest.fixture(scope="module")
def base_file(model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("kld")
    (folder / "text.txt").write_text(TEXT)
    base = folder / "base.kld"
    # -b = -c: one chunk per llama_decode call; flash attention off, as llama-cpp-python's default
    run_tool("llama-perplexity", "-m", model_path, "-f", str(folder / "text.txt"), "-c", str(N_CTX), "-b", str(N_CTX),
             "-t", "2", "-fa", "off", "--kl-divergence-base", str(base))
    return base


def test_statistics_agree_with_llama_perplexity(model_path, base_file):
    proc = run_tool("llama-perplexity", "-m", model_path, "-c", str(N_CTX), "-b", str(N_CTX), "-t", "2", "-fa", "on",
                    "--kl-divergence-base", str(base_file), "--kl-divergence")
    printed = parse_summary(proc.stdout + proc.stderr)
    result = check_kld_base(base_file, Variant("current", "llamacpp", None, {"flash_attn": "1"}))
    assert result.stats.count == 4 * (N_CTX - 1 - N_CTX // 2) == 124
    assert assert_agree(printed, result.stats) == 34
    assert 0 < result.stats.kld_mean < 0.05 and result.stats.same_top < 1  # flash attention does change the logits
    # the report states the settings that decide a match with llama-perplexity's run (-fa on here)
    flash, repacking = result.settings
    assert "defaults to -fa auto" in flash and "this run had flash_attn=1" in flash and "pass" not in flash
    assert "--no-repack" in repacking and "use_extra_bufts=" in repacking


def test_our_16_bit_rows_reproduce_llama_perplexitys_file(base_file):
    base = read_kld_base(base_file)
    engine = engine_class("llamacpp")(model=None, options={"n_batch": str(N_CTX)})
    try:
        assert base.tokens.reshape(-1).tolist() == engine.tokenize(TEXT)[:base.n_chunk * base.n_ctx]  # same tokens
        mine = []
        for c in range(base.n_chunk):
            with engine.open_session() as session:
                mine.append(quantize_log_probs(session.prefill(base.tokens[c].tolist())[base.first:base.n_ctx - 1]))
    finally:
        engine.close()
    theirs = np.asarray(base.rows).reshape(-1, base.rows.shape[-1]).astype(np.int64)
    mine = np.concatenate(mine).astype(np.int64)
    entries = np.abs(mine[:, 4:] - theirs[:, 4:])
    assert entries.max() <= 1 and np.mean(entries == 0) > 0.9999
    scale_theirs = theirs[:, :4].astype(np.uint16).view(np.float32)[:, 0]
    scale_mine = mine[:, :4].astype(np.uint16).view(np.float32)[:, 0]
    assert np.array_equal(scale_theirs, scale_mine)


def test_llama_perplexity_reads_an_exported_golden(model_path, tmp_path):
    words = TEXT.split()
    prompts = [Prompt(f"part-{i}", " ".join(words[i * 55:(i + 1) * 55])) for i in range(4)]
    manifest = record_golden(RecordConfig(Variant("golden", "llamacpp"), prompts, 0), tmp_path / "golden")
    info = export_kld_base(manifest, tmp_path / "golden.kld")
    assert info.decode_scored == 0 and info.scored >= 100
    proc = run_tool("llama-perplexity", "-m", model_path, "-c", str(info.n_ctx), "-b", str(info.n_ctx), "-t", "2",
                    "-fa", "off", "--kl-divergence-base", str(info.path), "--kl-divergence")
    printed = parse_summary(proc.stdout + proc.stderr)
    assert printed["Same top p"] == ("100.000", "0.000")
    assert abs(float(printed["Mean KLD"][0])) <= 1e-5  # the 16-bit rounding of the base, nothing else
    assert abs(float(printed["Mean PPL(Q)/PPL(base)"][0]) - 1) <= 1e-4
    checked = check_kld_base(info.path, Variant("current", "llamacpp"))
    assert assert_agree(printed, checked.stats) == 34
    assert "this run had flash_attn=0" in checked.settings[0] and "pass flash_attn=1" in checked.settings[0]
    from logitlab.report import markdown  # the report says so

    text = markdown(checked)
    assert "Settings that decide whether these figures can match llama-perplexity's own" in text
    assert "this run had flash_attn=0" in text
