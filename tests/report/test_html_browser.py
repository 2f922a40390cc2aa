"""HTML reports in a real browser (headless Chromium through Playwright), opened from file://.

One report of every kind comes from a real short run (the embedded model on
llama.cpp: 8 tokens, 2 blocks; real commands and pytest-benchmark files for
the bench commands). Each page must load with no console error, no failed
request and no request outside the file, and every figure must render at a
real size; screenshots go to ``$LOGITLAB_SCREENSHOTS`` (default: pytest's
temporary folder). A crafted comparison checks the plotted data (markers
per flip, bars per bin); hostile prompts and commands check that nothing a
user or an engine wrote can run in the page.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from browser import browser_context, figure_sizes, open_page
from conftest import SHORT_PROMPT
from roundtrip_tools import ROOT, logitlab

sys.path.insert(0, str(ROOT / "tests" / "perf"))
from bench_tools import run_pytest_benchmark  # noqa: E402

pytestmark = pytest.mark.browser

LLAMA = "n_threads=1,n_threads_batch=1"
HOSTILE = "</script><script>alert(1)</script> <img src=x onerror=\"window.pwned=1;alert(2)\">"
#: figure kinds each report must draw (a bit-exact invariance probe has only its heatmap)
EXPECTED = {
    "ab": {"ulp-histogram", "kld-positions", "margin-scatter", "kld-confidence", "block-ratios", "slot-series"},
    "verify": {"verify-k"},
    "invariance": {"check-heatmap"},
    "dump-diff": {"dump-heatmap", "dump-growth"},
    "bench-run": {"block-ratios", "slot-series"},
    "bench-compare": {"scenario-ratios"},
    "bench-calibrate": {"noise-profile"},
}


def _run(*args, cwd=None):
    proc = logitlab(*args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """kind -> (page, result JSON, seconds `logitlab report --html` took to render it)."""
    folder = tmp_path_factory.mktemp("html")
    jsons = {}

    def out(kind):
        jsons[kind] = folder / f"{kind}.json"
        return ["--json", jsons[kind]]

    _run("ab", "--control", LLAMA, "--candidate", f"flash_attn=1,{LLAMA}", "--tokens", "8", "--repeats", "2",
         "--warmup", "0", "--prompt", f"{SHORT_PROMPT} {HOSTILE}", "-q", *out("ab"), "--log", folder / "runs.jsonl",
         "--html", folder / "ab.run.html")
    _run("verify", "--k", "1", "2", "4", "--tokens", "8", "--prompt", SHORT_PROMPT, "--options", LLAMA, "--guard",
         "0.5", "--guard-k", "2", "-q", *out("verify"))
    _run("invariance", "batch", "--batch", "1", "2", "--prompt", SHORT_PROMPT, "--variant", LLAMA, "-q",
         *out("invariance"))
    from logitlab.dumps import TensorFilter, dump_pair
    from logitlab.engines.variant import parse_variant

    dump_pair(parse_variant(LLAMA, "control", default_engine="llamacpp"),
              parse_variant(f"flash_attn=1,{LLAMA}", "candidate", default_engine="llamacpp"), SHORT_PROMPT, 2,
              folder / "d", select=TensorFilter.parse(layers="0-5"))
    _run("dump-diff", folder / "d" / "control", folder / "d" / "candidate", "-q", *out("dump-diff"))
    _run("bench", "run", "--control", "echo '</script><script>alert(1)</script>'", "--candidate",
         "echo '<img src=x onerror=alert(2)>' && sleep 0.003", "--blocks", "3", "--warmup", "1", "-q",
         *out("bench-run"))
    bench = folder / "pb"
    bench.mkdir()
    runs = [run_pytest_benchmark(bench, folder / f"pb{i}.json") for i in range(3)]
    _run("bench", "calibrate", *runs, "--out", folder / "noise.json", "-q")
    jsons["bench-calibrate"] = folder / "noise.json"
    _run("bench", "compare", runs[0], runs[1], "--noise", folder / "noise.json", "--bootstrap", "999", "-q",
         *out("bench-compare"))
    pages = {}
    for kind, js in jsons.items():  # the page of each kind from its saved result, timed
        page = folder / f"{kind}.html"
        start = time.perf_counter()
        _run("report", js, "--html", page, "-q")
        pages[kind] = (page, js, time.perf_counter() - start)
    # the page the run wrote itself equals the one rendered again from its JSON, byte for byte
    assert (folder / "ab.run.html").read_bytes() == pages["ab"][0].read_bytes()
    return pages


@pytest.fixture(scope="module")
def context():
    with browser_context() as ctx:
        yield ctx


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("LOGITLAB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.engine
@pytest.mark.parametrize("kind", list(EXPECTED))
def test_every_report_opens_from_a_file_and_draws_every_figure(reports, context, kind, tmp_path):
    path, js, seconds = reports[kind]
    page, problems = open_page(context, path)
    try:
        sizes = figure_sizes(page)
        page.screenshot(path=str(_shots(tmp_path) / f"{kind}.png"), full_page=True)
        assert problems.all() == []
        assert {s["kind"] for s in sizes} >= EXPECTED[kind], sizes
        for s in sizes:
            assert not s["failed"] and s["width"] >= 400 and s["height"] >= 150, s
            assert len(s["caption"]) > 80  # says what it shows and what to read from it
        assert page.locator("h1 .word").count() == 1 or kind in ("bench-compare", "bench-calibrate")
        assert page.locator("div.box.header").count() == 1
        embedded = page.evaluate("document.getElementById('logitlab-result').textContent")
        if kind != "dump-diff" or len(js.read_bytes()) < (1 << 20):
            assert json.loads(embedded) == json.loads(js.read_text())
        print(f"{kind}: page {path.stat().st_size / 1024:.0f} KiB, {len(sizes)} figures, "
              f"`logitlab report --html` {seconds:.1f} s")
    finally:
        page.close()


@pytest.mark.engine
@pytest.mark.parametrize("kind", ["ab", "dump-diff"])
def test_the_embedded_result_downloads_as_the_json_file(reports, context, kind):
    """The footer link saves the result JSON (for a large dump-diff, decompressed in the browser)."""
    path, js, _ = reports[kind]
    page, problems = open_page(context, path)
    try:
        with page.expect_download() as info:
            page.click("#download-result")
        saved = Path(info.value.path())
        assert json.loads(saved.read_text()) == json.loads(js.read_text())
        assert problems.all() == []
    finally:
        page.close()


@pytest.mark.engine
@pytest.mark.parametrize("kind", ["ab", "bench-run"])
def test_hostile_prompts_and_commands_render_as_text_and_run_nothing(reports, context, kind):
    path, js, _ = reports[kind]
    page, problems = open_page(context, path)
    try:
        page.wait_for_timeout(300)
        assert problems.dialogs == [] and page.evaluate("window.pwned") is None
        assert page.evaluate("document.querySelectorAll('img').length") == 0
        assert page.evaluate("document.scripts.length") == 2  # the data block and the page's own script
        data = page.evaluate("JSON.parse(document.getElementById('logitlab-result').textContent)")
        if kind == "ab":
            assert data["config"]["prompt"] == f"{SHORT_PROMPT} {HOSTILE}"
        else:
            header = page.locator("div.box.header").inner_text()
            assert "echo '</script><script>alert(1)</script>'" in header
            assert "echo '<img src=x onerror=alert(2)>' && sleep 0.003" in header
        assert problems.all() == []
    finally:
        page.close()


def test_plotted_data_of_a_crafted_comparison(context, tmp_path):
    """3 flips -> 3 markers in the KLD and the margin figures; 6 ULP bins -> 6 bars, taller for larger counts."""
    from logitlab.numerics import compare_logits
    from logitlab.report.document import Document, Heading
    from logitlab.report.figure_blocks import comparison_figures
    from logitlab.report.render_html import render_html

    rng = np.random.default_rng(0)
    ref = rng.normal(0, 2, (12, 300)).astype(np.float32)
    obs = ref + rng.normal(0, 1e-3, ref.shape).astype(np.float32)
    for p in (3, 7, 10):
        ref[p, 5], ref[p, 6] = 20.0, 19.99
        obs[p, 5], obs[p, 6] = 19.99, 20.0
    c = compare_logits(ref, obs)
    assert len(c.flips) == 3
    doc = Document("ab", "crafted").add(Heading("crafted"), *comparison_figures(c, near_tie_margin=0.5, n_prompt=8))
    path = tmp_path / "crafted.html"
    path.write_text(render_html(doc, {"kind": "crafted"}))
    page, problems = open_page(context, path)
    try:
        kinds = [s["kind"] for s in figure_sizes(page)]
        assert kinds == ["ulp-histogram", "kld-positions", "margin-scatter", "kld-confidence"]
        assert page.locator("#figure-2-flips use").count() == 3
        assert page.locator("#figure-3-flips use").count() == 3
        assert page.locator("#figure-2-first-mismatch").count() == 1
        assert page.locator("#figure-2-prompt-boundary").count() == 1
        assert page.locator("#figure-3-near-tie-band").count() == 1
        heights = page.evaluate("""() => Array.from(document.querySelectorAll('[id^="figure-1-bars-"] path'))
                                         .map(p => p.getBBox().height)""")
        counts = list(c.ulp_histogram.values())
        assert len(heights) == 6
        for i in range(6):
            for j in range(6):
                if counts[i] > counts[j] > 0:
                    assert heights[i] > heights[j], (counts, heights)
        buckets = page.locator('[id^="figure-4-bars-"]').count()
        assert buckets == 5
        page.screenshot(path=str(_shots(tmp_path) / "crafted.png"), full_page=True)
        assert problems.all() == []
    finally:
        page.close()


def test_the_invariance_matrix_figure_draws_one_cell_per_axis(context, tmp_path):
    """The matrix's figure in a real browser (a fake engine's matrix: four axes ran, three skipped): one visible
    cell per axis, at a real size, no console error."""
    from logitlab import report
    from logitlab.engines.variant import parse_variant
    from logitlab.experiments.invariance_matrix import AXES, MatrixConfig, run_invariance_matrix
    from logitlab.experiments.prompts import Prompt

    result = run_invariance_matrix(MatrixConfig(variant=parse_variant("", "probe", default_engine="fake"),
                                                prompts=(Prompt("p", SHORT_PROMPT),), runs=2, n_decode=2))
    path = tmp_path / "matrix.html"
    path.write_text(report.html(result), encoding="utf-8")
    page, problems = open_page(context, path)
    try:
        sizes = figure_sizes(page)
        page.screenshot(path=str(_shots(tmp_path) / "invariance-matrix.png"), full_page=True)
        assert problems.all() == []
        (size,) = [s for s in sizes if s["kind"] == "invariance-matrix"]
        assert not size["failed"] and size["width"] >= 400 and size["height"] >= 150, size
        cells = page.locator("figure[data-kind=invariance-matrix] g[id^='figure-1-axis-']")
        assert cells.count() == len(AXES)
        assert all(cells.nth(i).bounding_box()["width"] > 10 for i in range(len(AXES)))
    finally:
        page.close()
