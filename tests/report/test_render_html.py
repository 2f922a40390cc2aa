"""The HTML renderer without a browser: escaping, the embedded JSON, the figure registry, the --html options.

What a browser makes of the pages is tested in ``test_html_browser.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.numerics import compare_logits
from logitlab.report import figures
from logitlab.report.document import Bullets, Document, Figure, Heading, KeyValues, Paragraph, Span, Table, rich
from logitlab.report.figure_blocks import comparison_figures
from logitlab.report.render_html import GZIP_ABOVE, embed_json, extract_json, render_html

HOSTILE = "</script><script>alert(1)</script> <img src=x onerror=alert(2)> & \"quotes\" 'single' $x$ \u2028"
DATA = Path(__file__).resolve().parents[1] / "data" / "bench"


def hostile_document() -> Document:
    doc = Document("ab", HOSTILE)
    doc.add(Heading(rich("logitlab ab: ", Span(HOSTILE, "verdict:<b>near-tie</b>"))),
            KeyValues([("model", Span(HOSTILE, "code")), (HOSTILE, HOSTILE, "note")], boxed=True),
            Paragraph(rich(Span(HOSTILE, "strong"), HOSTILE), tone=HOSTILE),
            Table(("h", HOSTILE), [(HOSTILE, rich(Span(HOSTILE, "code")))], title=HOSTILE, tone="error"),
            Bullets([HOSTILE, rich(Span(HOSTILE, "dim"))]))
    return doc


def test_every_text_is_escaped_and_no_markup_gets_through():
    page = render_html(hostile_document(), {"kind": "ab", "prompt": HOSTILE})
    body = page.split("<main>", 1)[1]
    assert "<img" not in page  # shown as &lt;img ... in the text, \u003cimg ... in the data block
    assert page.count("<script") == 2  # the data block and the page's own script, nothing injected
    assert "alert(1)</script>" not in page
    assert body.count("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;") == 12  # every place it is shown
    assert 'class="word w-bnear-tieb"' in page  # a style word is reduced to [a-z0-9-] before it becomes a class
    assert "<title>logitlab ab: </script>" not in page and "<title>logitlab ab: &lt;/script&gt;" in page


def test_embedded_json_cannot_close_its_element_and_reads_back_unchanged():
    data = {"kind": "ab", "prompt": HOSTILE, "nested": [{"token": "</SCRIPT >"}, 1.5, None]}
    text, encoding = embed_json(data)
    assert encoding is None and "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == data
    page = render_html(Document("ab", "t"), data)
    assert extract_json(page) == data
    assert extract_json(render_html(Document("ab", "t"))) is None


def test_large_results_are_embedded_gzip_compressed(monkeypatch):
    data = {"kind": "dump-diff", "tensors": [{"label": f"t{i}", "value": i / 7} for i in range(60_000)],
            "note": HOSTILE}
    assert len(json.dumps(data)) > GZIP_ABOVE
    page = render_html(Document("dump-diff", "t"), data)
    assert 'data-encoding="gzip+base64"' in page and len(page) < GZIP_ABOVE
    assert extract_json(page) == data
    block = re.search(r'data-encoding="gzip\+base64">([^<]*)</script>', page).group(1)
    assert re.fullmatch(r"[A-Za-z0-9+/=]+", block)


def test_the_page_allows_only_its_own_script():
    page = render_html(Document("ab", "t"), {"kind": "ab"})
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)
    assert "default-src 'none'" in policy and "unsafe-inline'; img" not in policy
    assert re.search(r"script-src 'sha256-[A-Za-z0-9+/=]+'", policy)
    assert "http://" not in page and "https://" not in page  # nothing to fetch: no link, font or script source


def crafted_comparison():
    """12 positions, 3 argmax flips at near-ties (positions 3, 7, 10), position 0 bit-identical."""
    rng = np.random.default_rng(0)
    ref = rng.normal(0, 2, (12, 300)).astype(np.float32)
    obs = ref + rng.normal(0, 1e-3, ref.shape).astype(np.float32)
    obs[0] = ref[0]
    for p in (3, 7, 10):
        ref[p, 5], ref[p, 6] = 20.0, 19.99
        obs[p, 5], obs[p, 6] = 19.99, 20.0
    return compare_logits(ref, obs)


def test_comparison_figures_carry_the_data_they_plot():
    c = crafted_comparison()
    figs = {f.kind: f for f in comparison_figures(c, near_tie_margin=0.5, n_prompt=8, what="crafted")}
    assert list(figs) == ["ulp-histogram", "kld-positions", "margin-scatter", "kld-confidence"]
    assert figs["kld-positions"].data["flips"] == [3, 7, 10] and figs["kld-positions"].data["n_prompt"] == 8
    assert figs["kld-positions"].data["first_mismatch"] == 1
    assert figs["margin-scatter"].data["flips"] == [3, 7, 10]
    assert figs["ulp-histogram"].data["counts"] == list(c.ulp_histogram.values())
    buckets = figs["kld-confidence"].data["buckets"]
    assert sum(b["positions"] for b in buckets) == 11  # the bit-identical position is not bucketed
    assert all(f.caption for f in figs.values())
    assert comparison_figures(compare_logits(np.ones((2, 4), np.float32), np.ones((2, 4), np.float32)),
                              near_tie_margin=0.5) == []


def test_figures_of_selected_rows_plot_run_positions():
    """Issue #31: a comparison of selected rows (``--positions``) plots its rows at their run positions; the
    margin scatter, indexed like the rows, gets the flips' rows."""
    c = crafted_comparison()
    rows = list(range(100, 100 + c.n_positions))
    selected = c.at_positions(rows)
    figs = {f.kind: f for f in comparison_figures(selected, near_tie_margin=0.5, what="selected")}
    assert figs["kld-positions"].data["positions"] == rows and figs["kld-positions"].data["flips"] == [103, 107, 110]
    assert figs["kld-positions"].data["first_mismatch"] == 101 and figs["margin-scatter"].data["flips"] == [3, 7, 10]
    svg = figures.figure_svg(figs["kld-positions"], "figure-1")
    assert re.search(r'<g id="figure-1-flips">(.*?)</g>\s*</g>', svg, re.S).group(1).count("<use ") == 3
    assert "positions" not in {f.kind: f for f in comparison_figures(c, near_tie_margin=0.5)}["kld-positions"].data


def test_figure_svg_draws_every_registered_kind_of_a_comparison_with_unique_ids():
    c = crafted_comparison()
    svgs = [figures.figure_svg(f, f"figure-{i}") for i, f in
            enumerate(comparison_figures(c, near_tie_margin=0.5, n_prompt=8), start=1)]
    assert all(s.startswith("<svg") and s.rstrip().endswith("</svg>") for s in svgs)
    ids = [i for s in svgs for i in re.findall(r' id="([^"]+)"', s)]
    assert len(ids) == len(set(ids)) and all(re.match(r"figure-\d+-", i) for i in ids)
    for s in svgs:  # every reference points at an id of the same figure
        assert set(re.findall(r'(?:href="#|url\(#)([^")]+)', s)) <= set(re.findall(r' id="([^"]+)"', s))
    flips = re.search(r'<g id="figure-2-flips">(.*?)</g>\s*</g>', svgs[1], re.S).group(1)
    assert flips.count("<use ") == 3
    assert "Date" not in svgs[0] and figures.figure_svg(Figure("ulp-histogram", "c", {
        "bins": ["0", "1"], "counts": [5, 1], "exact_share": 5 / 6}), "x") == figures.figure_svg(
        Figure("ulp-histogram", "c", {"bins": ["0", "1"], "counts": [5, 1], "exact_share": 5 / 6}), "x")


def test_registry_unknown_kind_and_a_registered_function(monkeypatch):
    with pytest.raises(InputError, match="no plot for figure kind 'nope'; known kinds: block-ratios"):
        figures.figure_svg(Figure("nope", "c", {}))
    monkeypatch.setitem(figures.FIGURES, "line", "")

    def line(fig, data):
        fig.add_subplot().plot(data["y"], gid="the-line")

    figures.register_figure("line", line)
    svg = figures.figure_svg(Figure("line", "c", {"y": [1, 3, 2]}), "f9")
    assert 'id="f9-the-line"' in svg


def test_a_figure_that_fails_costs_only_itself(monkeypatch):
    def broken(fig, data):
        raise ValueError("<b>bad</b> data")

    monkeypatch.setitem(figures.FIGURES, "broken", broken)
    doc = Document("ab", "t").add(Figure("broken", "caption <i>", {}), Paragraph("after"))
    page = render_html(doc)
    assert 'class="plot failed"' in page and "figure broken could not be drawn: ValueError: &lt;b&gt;bad" in page
    assert "caption &lt;i&gt;" in page and "<p>after</p>" in page


def test_user_text_in_figures_is_never_mathtext():
    fig = Figure("scenario-ratios", "c", {"scenarios": [
        {"name": "$unbalanced \\frac{", "ratio": 1.01, "ci_low": 0.99, "ci_high": 1.03, "margin": 0.02,
         "status": "unchanged", "higher_is_better": False}]})
    svg = figures.figure_svg(fig, "s")
    assert "$unbalanced \\frac{ (unchanged)" in svg


def logitlab(*args):
    return subprocess.run([sys.executable, "-m", "logitlab", *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("command", [("ab",), ("verify",), ("invariance", "batch"), ("invariance", "determinism"),
                                     ("dump-diff",), ("bench", "run"), ("bench", "compare"), ("bench", "calibrate"),
                                     ("report",)])
def test_every_command_with_a_report_has_html(command):
    from click.testing import CliRunner

    from logitlab.cli import main

    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0 and "--html TEXT" in result.output


def test_report_writes_html_and_reads_a_result_back_from_a_page(tmp_path):
    js, page, again = tmp_path / "c.json", tmp_path / "c.html", tmp_path / "again.json"
    proc = logitlab("bench", "compare", DATA / "criterion", "--baseline", "main", "--bootstrap", "999", "-q",
                    "--json", js, "--html", page)
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and 'data-kind="scenario-ratios"' in html
    proc = logitlab("report", page, "--json", again, "-q")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(again.read_text()) == json.loads(js.read_text())
    out = logitlab("report", js, "--html", tmp_path / "x.html", "-q")
    assert out.returncode == 0 and (tmp_path / "x.html").read_text() == html  # the same bytes from the JSON


def test_bad_pages_and_paths_are_one_error_line(tmp_path):
    plain = tmp_path / "plain.html"
    plain.write_text("<html><body>no result</body></html>")
    proc = logitlab("report", plain)
    assert proc.returncode == 2 and proc.stderr == f"error: result file {plain}: no logitlab result embedded in " \
                                                   "this page (written with --html?)\n"
    damaged = tmp_path / "damaged.html"
    damaged.write_text('<script type="application/json" id="logitlab-result">{"kind": </script>')
    proc = logitlab("report", damaged)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: result file {damaged}: the result embedded")
    proc = logitlab("bench", "compare", DATA / "criterion", "--baseline", "main", "--html", tmp_path)
    assert proc.returncode == 2 and proc.stderr == f"error: --html {tmp_path} is a folder; give a file path\n"


def test_figures_of_rows_with_nan_infinities_and_a_flat_reference_draw():
    """A NaN (KLD undefined), a -inf on one side (KLD infinite) and a uniform reference row all still draw."""
    rng = np.random.default_rng(1)
    a = rng.normal(0, 2, (6, 200)).astype(np.float32)
    b = a + rng.normal(0, 1e-2, a.shape).astype(np.float32)
    b[2, 3], b[4, 7] = np.nan, -np.inf
    a[5], b[5] = 0, 0
    b[5, 1] = 1e-3
    c = compare_logits(a, b)
    assert c.row_kld[2] is None and c.row_kld[4] == float("inf") and c.row_top1_prob_ref[5] == pytest.approx(1 / 200)
    blocks = comparison_figures(c, near_tie_margin=0.5, n_prompt=3)
    assert [f.kind for f in blocks] == ["ulp-histogram", "kld-positions", "margin-scatter", "kld-confidence"]
    svgs = [figures.figure_svg(f, f"f{i}") for i, f in enumerate(blocks)]
    assert all(s.startswith("<svg") for s in svgs) and "infinite KLD (1)" in svgs[1]
