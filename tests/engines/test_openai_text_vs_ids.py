"""A server that keys its top-k by token text against one that keys it by token id, both real.

llama-cpp-python's server (``python -m llama_cpp.server``, echo mode) names
each top-k entry by its text, llama.cpp's ``llama-server`` (teacher-forced) by
its id. ``ab`` re-keys the id side by text with the control's detokenizer
(:func:`logitlab.engines.topk.rekey_by_text`) and says so in a note; before
that, no key was shared and the verdict was ``divergent`` at 0 % top-1
agreement. Both servers run the embedded model on 127.0.0.1, started once for
the module and stopped after it. About 70 s on a busy 2-core machine (a 5-token
prompt: llama-cpp-python's echo sorts the vocabulary in Python at every position).
"""

import json
import os
import subprocess
import sys

import pytest

from peers import llama_server
from test_openai import llama_servers

pytestmark = [pytest.mark.peers, pytest.mark.engine]

N_DECODE = 8
PROMPT = "The capital of Italy is"


@pytest.fixture(scope="module")
def servers(model_path, tmp_path_factory):
    """llama-cpp-python's server (model alias ``text``) and llama-server (``-fa off``): their /v1 URLs."""
    logs = tmp_path_factory.mktemp("text-vs-ids")
    with llama_servers(model_path, logs, ("text", [])) as ([text_url], _), \
            llama_server(model_path, logs, ["-c", "256", "-np", "1", "-t", "1", "-tb", "1", "-fa", "off"]) as ids:
        yield {"text": text_url, "ids": ids + "/v1"}


def run_cli(control: str, candidate: str, tmp_path, *extra: str) -> tuple[dict, str]:
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [sys.executable, "-m", "logitlab", "ab", "--engine", f"openai:{control}", "--candidate", f"openai:{candidate}",
         *extra, "--prompt", PROMPT, "--tokens", str(N_DECODE), "--repeats", "1", "--warmup", "0", "--json", str(out)],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), " ".join(proc.stdout.replace("│", " ").split())


def check_matched_by_text(data: dict, text: str, text_side: str, id_side: str) -> None:
    run = next(r for r in data["runs"] if r["slot"] == data["verdict_slot"])
    c = run["comparison"]
    print(f"\n{text_side} by text vs {id_side} by id: {data['verdict']['word']}; top-1 {c['argmax_agreement']:.1%}, "
          f"max |Δ| {c['max_abs_diff']:.3g}")
    print("\n".join("  " + e for e in data["verdict"]["evidence"]))
    # the keys met: the same tokens are found on both sides, the argmax agrees almost everywhere
    assert data["verdict"]["word"] != "divergent", data["verdict"]["evidence"]
    assert c["argmax_agreement"] >= 0.8 and c["topk_agreement"] >= 0.5, (c["argmax_agreement"], c["topk_agreement"])
    assert all(isinstance(t, str) for t in c["row_argmax_ref"] + c["row_argmax_obs"] if t is not None)
    assert c["max_abs_diff"] < 1.0  # over shared keys: a wrong text would leave no shared key or large gaps
    notes = [n for n in data["notes"] if "matched by token text" in n]
    assert len(notes) == 1 and notes[0].startswith(
        f"the {text_side} keys its top-k log-probabilities by token text, the {id_side} by token id"), notes
    assert "matched by token text" in text
    aa = next(r for r in data["runs"] if r["variant"] == "control" and r.get("comparison"))
    assert aa["verdict"] == "bit-exact"  # the A/A compares like with like


def test_cli_ab_text_keyed_control_against_id_keyed_candidate(servers, tmp_path):
    data, text = run_cli(servers["text"], servers["ids"], tmp_path, "--control-model", "text")
    assert data["manifest"]["engine"]["scoring"]["mode"] == "echo"
    assert data["manifest"]["candidate_engine"]["server"]["kind"] == "llama-server"
    check_matched_by_text(data, text, "control", "candidate")


def test_cli_ab_id_keyed_control_against_text_keyed_candidate(servers, tmp_path):
    data, text = run_cli(servers["ids"], servers["text"], tmp_path, "--candidate-model", "text")
    assert data["manifest"]["engine"]["server"]["kind"] == "llama-server"
    assert data["manifest"]["candidate_engine"]["scoring"]["mode"] == "echo"
    check_matched_by_text(data, text, "candidate", "control")
