"""Open HTML reports in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

``scripts/install-browser.sh`` installs Chromium (as root, like the benchmark
tools); Playwright's Python package comes with the ``dev`` extra. Playwright
never downloads a browser here: it drives ``/usr/bin/chromium``. Without
either, the tests fail (never skip) with a line saying what to install.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str:
    """The Chromium binary; fails the test with the install hint when it is missing."""
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail("Chromium is not installed: run `bash scripts/install-browser.sh` as root (Debian packages "
                    "chromium, chromium-driver); `make test` does it", pytrace=False)
    return path


@contextmanager
def browser_context() -> Iterator[Any]:
    """A fresh Chromium profile (its own --user-data-dir) in a Playwright persistent context."""
    path = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright's Python package is missing: pip install -e '.[dev]' (never `playwright install`: "
                    "the tests drive the system's Chromium)", pytrace=False)
    profile = tempfile.mkdtemp(prefix="logitlab-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile, executable_path=path, args=CHROMIUM_ARGS, headless=True, accept_downloads=True,
                viewport={"width": 1200, "height": 900})
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@dataclass
class PageProblems:
    """What went wrong while a page loaded: console errors, script errors, failed or outside requests, dialogs."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    outside_requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        return [*self.console_errors, *self.page_errors, *self.failed_requests, *self.outside_requests, *self.dialogs]


def open_page(context: Any, path: Path) -> tuple[Any, PageProblems]:
    """Open ``path`` from file:// in a new tab; every request that leaves the file is recorded and refused."""
    page = context.new_page()
    problems = PageProblems()
    page.on("console", lambda m: problems.console_errors.append(f"console {m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.page_errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.failed_requests.append(f"request failed: {r.url} ({r.failure})"))

    def on_dialog(dialog: Any) -> None:
        problems.dialogs.append(f"dialog {dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", on_dialog)

    def route(r: Any) -> None:
        if r.request.url.startswith(("file://", "data:", "blob:")):
            r.continue_()
        else:
            problems.outside_requests.append(f"request outside the file: {r.request.url}")
            r.abort()

    page.route("**/*", route)
    page.goto(path.resolve().as_uri(), wait_until="load")
    return page, problems


def figure_sizes(page: Any) -> list[dict[str, Any]]:
    """Per ``<figure class="plot">``: its kind, whether it failed, and its SVG's rendered width and height (px)."""
    return page.evaluate("""() => Array.from(document.querySelectorAll("figure.plot")).map(f => {
        const svg = f.querySelector("svg"), box = svg ? svg.getBoundingClientRect() : null;
        return {kind: f.dataset.kind, failed: f.classList.contains("failed"), caption: f.querySelector("figcaption")
                ? f.querySelector("figcaption").textContent : "", width: box ? box.width : 0, height: box ? box.height : 0};
    })""")
