#!/usr/bin/env bash
# Install the Debian benchmark tools that the `bench` tests run for real:
#   libbenchmark-dev (Google Benchmark, compiled with g++) and hyperfine.
# Quiet and idempotent; never fails the build: without root or apt the tests
# that need a tool are skipped with a reason naming its package.
set -u
PKGS="libbenchmark-dev hyperfine"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-bench-tools: not root or no apt-get; skipping:$missing (their tests will be skipped)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >/dev/null 2>&1 \
    || echo "install-bench-tools: apt-get install of$missing failed (their tests will be skipped)" >&2
exit 0
