#!/usr/bin/env bash
# Install headless Chromium for the HTML report tests (tests/report/test_html_browser.py):
#   the Debian packages chromium and chromium-driver; Playwright's Python package (the dev extra)
#   drives /usr/bin/chromium. Never `playwright install`: nothing is downloaded outside the package managers.
# Quiet and idempotent. Without root or apt it says so; the browser tests then fail with the same hint
# (they never skip).
exec bash "$(dirname "$0")/apt-install.sh" install-browser "the browser tests fail without them" \
    chromium chromium-driver
