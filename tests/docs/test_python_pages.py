"""The Python blocks of the docs run as written: the toy adapter (no model) and the API example (the embedded model)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _run_blocks(page: str) -> dict:
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, page
    namespace: dict = {"__name__": f"docs_{Path(page).stem}"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{DOCS / page}:block {i + 1}", "exec"), namespace)
    return namespace


def test_the_adapter_page_toy_engine_runs_and_is_judged(capsys):
    namespace = _run_blocks("engines/adapter.md")
    assert capsys.readouterr().out.split() == ["systematic-offset"]
    assert namespace["observed"].logits.shape == (len(namespace["prompt"]) + 8, 256)


@pytest.mark.engine
def test_the_python_api_page_runs(capsys):
    _run_blocks("python-api.md")
    out = capsys.readouterr().out.splitlines()
    word, ratio = out[0].split()
    assert word == "near-tie" and float(ratio) > 0  # flash attention changes the logits
    assert out[1].startswith(f"## logitlab ab: **{word}**")
    # the crafted pair: one entry of one row moved by 0.5, a change confined to a few entries (seeded: fixed)
    assert out[-1].split()[0] == "divergent" and "a change confined to a few entries" in out[-1]
