#!/usr/bin/env bash
# Install Debian packages quietly and idempotently, for the tests that run real tools:
#   bash scripts/apt-install.sh WHO "WHAT HAPPENS WITHOUT THEM" PACKAGE...
# Never fails the build: without root or apt-get, or when apt-get fails, it prints one line naming
# the missing packages and what happens without them, and exits 0.
set -u
who=$1
without=$2
shift 2
missing=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: not root or no apt-get; install$missing yourself ($without)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >/dev/null 2>&1 \
    || echo "$who: apt-get install of$missing failed ($without)" >&2
exit 0
