"""Rendering of dump-diff results (terminal and Markdown)."""

import io

from rich.console import Console

from logitlab.dumps import diff_dumps, open_dump
from logitlab.report.dumps import display_dump_diff, fmt_cos, format_dump_diff_markdown, layer_rows
from rawdumps import base_tensors, plant, write_folder


def _result(tmp_path):
    base = base_tensors()
    a = write_folder(tmp_path / "a", base, "p")
    b = write_folder(tmp_path / "b", plant(base, ("kqv_out", 2, 0)), "q")
    return diff_dumps(open_dump(a), open_dump(b))


def test_markdown_report(tmp_path):
    text = format_dump_diff_markdown(_result(tmp_path), max_rows=2)
    assert text.startswith("## logitlab dump-diff: **differs**")
    assert "**first divergence: kqv_out-2@pos0 (layer 2, attention, float32 [64])" in text
    assert "| tensor | kind | differing | max \\|Δ\\| |" in text
    assert "| 0…1 | 0/30 | 0 | 0 | 0 | 1 | (bit-exact) |" in text


def test_terminal_report_and_layer_rows(tmp_path):
    result = _result(tmp_path)
    rows = layer_rows(result)
    assert [r[0] for r in rows] == ["0…1", "2", "3", "output"] and rows[1][6] == "kqv_out-2@pos0"
    out = io.StringIO()
    display_dump_diff(result, Console(file=out, width=160))
    text = out.getvalue()
    assert "verdict: differs" in text and "growth by layer" in text and "where each position first differs" in text
    assert fmt_cos(1 - 2e-14).startswith("1-2.0e-14") and fmt_cos(0.5) == "0.500000"
