"""The docs site builds strictly (broken links, anchors and unreadable docstrings fail), loads nothing from the
network, and opens from file:// in a real browser."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "report"))


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    done = _mkdocs(REPO / "mkdocs.yml", site)
    assert done.returncode == 0, done.stderr[-4000:]
    return site


def test_every_page_of_the_nav_is_built(site):
    import yaml

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from pages(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)

    nav = list(pages(config["nav"]))
    assert len(nav) > 30
    for page in nav:
        assert (site / page.replace(".md", ".html")).is_file(), page
    on_disk = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert on_disk == set(nav), f"pages not in the nav: {sorted(on_disk - set(nav))}"


def test_the_api_reference_is_generated_from_the_docstrings(site):
    page = (site / "reference" / "numerics.html").read_text(encoding="utf-8")
    assert 'id="logitlab.numerics.verdict.Thresholds"' in page
    perf = (site / "reference" / "perf.html").read_text(encoding="utf-8")
    assert "Schuirmann" in perf and "Killick" in perf  # the sources the docstrings cite


def test_nothing_loads_from_the_network(site):
    loads = re.compile(r"<(?:script|img|iframe|source)[^>]*\bsrc=\"(https?:[^\"]+)\"|<link[^>]*\bhref=\"(https?:[^\"]+)\"")
    css_urls = re.compile(r"url\(\s*['\"]?(https?:[^)'\"]+)")
    found = []
    for path in site.rglob("*"):
        if path.suffix in (".html", ".css"):
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.name}: {m.group(1) or m.group(2)}" for m in loads.finditer(text)] if path.suffix == ".html" else []
            found += [f"{path.name}: {m.group(1)}" for m in css_urls.finditer(text)]
    assert found == []


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """Inverse control: the strict build does catch a link to a page that does not exist."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text("site_name: t\ndocs_dir: docs\nuse_directory_urls: false\ntheme: {name: material, font: false}\n"
                      "validation: {unrecognized_links: warn, anchors: warn}\n")
    done = _mkdocs(config, tmp_path / "site")
    assert done.returncode != 0 and "missing.md" in done.stderr


def test_the_readme_links_to_files_that_exist():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", text)
    assert len(links) > 15
    missing = [link for link in links if not (REPO / link).is_file()]
    assert missing == []


@pytest.mark.browser
def test_the_site_opens_from_file_and_its_links_work(site):
    from browser import browser_context, open_page

    with browser_context() as context:
        page, problems = open_page(context, site / "index.html")
        assert page.title().startswith("logitlab")
        page.locator("article a[href='getting-started.html']").first.click(timeout=30_000)
        page.wait_for_load_state("load")
        assert page.url.endswith("getting-started.html")
        assert page.locator("h1").first.inner_text().startswith("Getting started")
        page.goto((site / "commands" / "ab.html").resolve().as_uri(), wait_until="load")
        page.locator("article a[href='../concepts/verdicts.html']").first.click(timeout=30_000)
        page.wait_for_load_state("load")
        assert page.url.endswith("concepts/verdicts.html")
        assert problems.all() == []
