"""The README's Python API example runs as written (on the embedded model)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks(section: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


@pytest.mark.engine
def test_python_api_example_runs(capsys):
    blocks = _python_blocks("Python API")
    assert len(blocks) == 1
    exec(compile(blocks[0], str(README) + ":Python API", "exec"), {})
    from logitlab.numerics import VERDICTS

    out = capsys.readouterr().out.splitlines()
    word, ratio = out[0].split()
    assert word in VERDICTS and word != "bit-exact" and float(ratio) > 0  # flash attention changes the logits
    assert out[1].startswith(f"## logitlab ab: **{word}**")
    assert out[-1].split()[0] in VERDICTS and "argmax" in out[-1]  # a verdict with its evidence lines
