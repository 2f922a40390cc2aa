#!/usr/bin/env bash
# Install headless Chromium for the HTML report tests (tests/report/test_html_browser.py):
#   the Debian packages chromium and chromium-driver; Playwright's Python package (the dev extra)
#   drives /usr/bin/chromium. Never `playwright install`: nothing is downloaded outside the package managers.
# Quiet and idempotent. Without root or apt it says so; the browser tests then fail with the same hint
# (they never skip).
set -u
PKGS="chromium chromium-driver"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-browser: not root or no apt-get; install$missing yourself (the browser tests fail without them)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >/dev/null 2>&1 \
    || echo "install-browser: apt-get install of$missing failed (the browser tests fail without them)" >&2
exit 0
