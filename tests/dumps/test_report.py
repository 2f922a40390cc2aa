"""Rendering of dump-diff results (terminal and Markdown)."""

import io

from rich.console import Console

from logitlab.dumps import diff_dumps, open_dump
from logitlab import report
from logitlab.report.dumps import fmt_cos, layer_rows
from rawdumps import N_POS, base_tensors, plant, write_folder, write_logitlab_dump


def _result(tmp_path):
    base = base_tensors()
    a = write_folder(tmp_path / "a", base, "p")
    b = write_folder(tmp_path / "b", plant(base, ("kqv_out", 2, 0)), "q")
    return diff_dumps(open_dump(a), open_dump(b))


def test_markdown_report(tmp_path):
    text = report.markdown(_result(tmp_path), max_rows=2)
    assert text.startswith("## logitlab dump-diff: **differs**")
    assert "**first divergence: kqv_out-2@pos0 (layer 2, attention, float32 [64])" in text
    assert "| tensor | kind | differing | max \\|Δ\\| |" in text
    assert "| 0…1 | 0/30 | 0 | 0 | 0 | 1 | (bit-exact) |" in text


def test_terminal_report_and_layer_rows(tmp_path):
    result = _result(tmp_path)
    rows = layer_rows(result)
    assert [r[0] for r in rows] == ["0…1", "2", "3", "output"] and rows[1][6] == "kqv_out-2@pos0"
    out = io.StringIO()
    report.display(result, Console(file=out, width=160))
    text = out.getvalue()
    assert "verdict: differs" in text and "growth by layer" in text and "where each position first differs" in text
    assert fmt_cos(1 - 2e-14).startswith("1-2.0e-14") and fmt_cos(0.5) == "0.500000"


def _lines(result):
    out = io.StringIO()
    report.display(result, Console(file=out, width=400))
    return out.getvalue()


def test_growth_table_says_not_compared_where_nothing_could_be(tmp_path):
    base = base_tensors()
    a = write_folder(tmp_path / "a", base, "p")
    b = write_folder(tmp_path / "b", plant(base, ("kqv_out", 2, 0)), "q")
    for path in b.glob("q_*-1_pos*.bin"):  # every layer-1 tensor of B as int32: a dtype mismatch each
        path.rename(path.with_suffix(".i32"))
    rows = layer_rows(diff_dumps(open_dump(a), open_dump(b)))
    assert rows[:3] == [["0", "0/15", "0", "0", "0", "1", "(bit-exact)"],
                        ["1", "0/0", "", "", "", "", "not compared (15 tensor-positions)"],
                        ["2", "12/15"] + rows[2][2:6] + ["kqv_out-2@pos0"]]
    assert not any("bit-exact" in row[6] for row in rows[1:])


def test_a_missing_step_file_is_missing_positions_not_names_b_lacks(tmp_path):
    base = base_tensors()
    a = write_logitlab_dump(tmp_path / "a", base)
    b = write_logitlab_dump(tmp_path / "b", plant(base, ("ffn_out", 2, 1)))
    last = b / f"step-{N_POS - 1:04d}-decode.safetensors"
    for cut in ("delete", "truncate"):
        if cut == "delete":
            last.rename(tmp_path / "kept.safetensors")
        else:
            (tmp_path / "kept.safetensors").rename(last)
            last.write_bytes(last.read_bytes()[:-100])
        text = _lines(diff_dumps(open_dump(a), open_dump(b)))
        assert "B lacks these" not in text, cut
        assert (f"missing positions in B at or before layer 2: attn_norm (layers 0-3, positions {N_POS - 1}): 4; "
                "kqv_out (layers 0-3, positions 2): 4;") in text, cut
        assert "B has these names at other positions or layers (a missing or truncated step file?)" in text
        assert f"B: {last}: " in text


def test_names_b_has_nowhere_are_still_names_b_lacks(tmp_path):
    base = base_tensors()
    fused = {key: value for key, value in plant(base, ("ffn_out", 1, 0)).items() if key[0] != "kqv_out"}
    text = _lines(diff_dumps(open_dump(write_logitlab_dump(tmp_path / "a", base)),
                             open_dump(write_logitlab_dump(tmp_path / "b", fused))))
    assert "only in A at or before layer 1: kqv_out — B lacks these (not computed" in text
    assert "missing positions in B" not in text
