"""A server that keys its top-k by token text against one that keys it by token id, both real.

llama-cpp-python's server (``python -m llama_cpp.server``, echo mode) names
each top-k entry by its text, llama.cpp's ``llama-server`` (teacher-forced) by
its id. ``ab`` re-keys the id side by text with the control's detokenizer
(:func:`logitlab.engines.topk.rekey_by_text`) and says so in a note; before
that, no key was shared and the verdict was ``divergent`` at 0 % top-1
agreement. Both servers run the embedded model on 127.0.0.1, started and
stopped here. About 40 s on a busy 2-core machine (a 5-token prompt: llama-cpp-python's
echo sorts the vocabulary in Python at every position).
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


def test_cli_ab_text_keyed_control_against_id_keyed_candidate_is_matched_by_text(model_path, tmp_path):
    out = tmp_path / "ab.json"
    with llama_servers(model_path, tmp_path, ("text", [])) as ([text_url], _), \
            llama_server(model_path, tmp_path, ["-c", "256", "-np", "1", "-t", "1", "-tb", "1", "-fa", "off"]) as ids:
        proc = subprocess.run(
            [sys.executable, "-m", "logitlab", "ab", "--engine", f"openai:{text_url}", "--control-model", "text",
             "--candidate", f"openai:{ids}/v1", "--prompt", PROMPT, "--tokens", str(N_DECODE), "--repeats", "1",
             "--warmup", "0", "--json", str(out)],
            capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["manifest"]["engine"]["scoring"]["mode"] == "echo"
    assert data["manifest"]["candidate_engine"]["server"]["kind"] == "llama-server"
    run = next(r for r in data["runs"] if r["slot"] == data["verdict_slot"])
    c = run["comparison"]
    # the keys met: the same tokens are found on both sides, the argmax agrees almost everywhere
    assert data["verdict"]["word"] != "divergent", data["verdict"]["evidence"]
    assert c["argmax_agreement"] >= 0.8 and c["topk_agreement"] >= 0.5, (c["argmax_agreement"], c["topk_agreement"])
    assert all(isinstance(t, str) for t in c["row_argmax_ref"] + c["row_argmax_obs"] if t is not None)
    assert c["max_abs_diff"] < 1.0  # shared keys only: a wrong text would leave big gaps or no shared key
    notes = [n for n in data["notes"] if "matched by token text" in n]
    assert notes == [notes[0]] and notes[0].startswith("the control keys its top-k log-probabilities by token "
                                                       "text, the candidate by token id")
    assert "matched by token text" in " ".join(proc.stdout.replace("│", " ").split())
