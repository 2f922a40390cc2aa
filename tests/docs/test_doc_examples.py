"""Examples in the docs cannot go stale: the run=test ones are re-run and compared with their pages, every
example's logitlab commands still parse, and the check fails on a page whose pasted output was edited."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import docs_examples as dx  # noqa: E402

EXAMPLES = dx.all_examples()
RUN = [pytest.param(ex, id=ex.ident, marks=[pytest.mark.engine] if ex.runs_a_model else [])
       for ex in EXAMPLES if ex.run == "test"]


def test_the_examples_are_found_and_every_page_with_output_has_one():
    assert len(EXAMPLES) >= 8 and len(RUN) >= 5
    assert {"exact", "shape"} <= {ex.check for ex in EXAMPLES}
    for ex in EXAMPLES:
        assert all(c.output for c in ex.commands[-1:]) or ex.setting("keep", "") != "", \
            f"{ex.ident}: no output written yet: make docs-examples"


@pytest.mark.parametrize("example", EXAMPLES, ids=[ex.ident for ex in EXAMPLES])
def test_every_example_command_still_parses(example):
    assert dx.parse_commands(example) == []


@pytest.mark.parametrize("example", RUN)
def test_the_page_shows_what_the_command_prints(example):
    problems = dx.check_example(example)
    assert not problems, "\n\n".join(problems) + "\n\nmake docs-examples rewrites the pages"


# -- the check itself, on a copy of a real page ------------------------------------------------------------------

def _bench_page(tmp_path: Path, edit=None, marker=None) -> dx.Example:
    page = REPO / "docs" / "commands" / "bench.md"
    text = page.read_text(encoding="utf-8")
    if edit:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1], 1)
    if marker:
        text = text.replace(marker[0], marker[1], 1)
    copy = tmp_path / "bench.md"
    copy.write_text(text, encoding="utf-8")
    (ex,) = [e for e in dx.parse_page(copy) if "criterion" in e.commands[0].text]
    return ex


def test_the_check_passes_on_the_page_as_it_is(tmp_path):
    assert dx.check_example(_bench_page(tmp_path)) == []


def test_an_edited_word_fails_the_check_and_says_where(tmp_path):
    ex = _bench_page(tmp_path, edit=("│ ✅ unchanged │ gather/f16_4096", "│ ✅ improved  │ gather/f16_4096"))
    (problem,) = dx.check_example(ex)
    assert "bench compare tests/data/bench/criterion" in problem and "exact check" in problem
    assert "-│ ✅ improved  │ gather/f16_4096" in problem and "+│ ✅ unchanged │ gather/f16_4096" in problem


def test_an_edited_number_fails_the_exact_check(tmp_path):
    assert dx.check_example(_bench_page(tmp_path, edit=("│ 36.87 µs │ 43.99 µs │", "│ 36.87 µs │ 44.99 µs │")))


def test_the_shape_check_allows_other_numbers_but_not_other_words(tmp_path):
    shape = ("check=exact", "check=shape")
    assert dx.check_example(_bench_page(tmp_path, edit=("PR/base 1.092 (+9.2%)", "PR/base 1.111 (+11.1%)"),
                                        marker=shape)) == []
    assert dx.check_example(_bench_page(tmp_path, edit=("Geometric mean over", "Arithmetic mean over"), marker=shape))


def test_a_renamed_option_is_found_without_running(tmp_path):
    ex = _bench_page(tmp_path, edit=("bench/criterion --baseline main --markdown comment.md --fail-on regressed",
                                    "bench/criterion --baseline main --markdown comment.md --fail-when regressed"))
    (problem,) = dx.parse_commands(ex)
    assert "no longer parses" in problem and "--fail-when" in problem


def test_keep_shortens_to_the_matching_lines():
    ex = dx.Example(REPO / "README.md", 1, {"keep": ["^A"]}, [], 0, 0)
    assert dx._keep(["b", "A1", "b", "c", "A2", "d"], ex) == ["A1", "...", "A2"]
