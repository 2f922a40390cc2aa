#!/usr/bin/env bash
# Install the Debian benchmark tools that the `bench` tests run for real:
#   libbenchmark-dev (Google Benchmark, compiled with g++) and hyperfine.
# Quiet and idempotent; never fails the build: without root or apt it says so, and the tests that need
# a tool then fail under `make test` (LOGITLAB_NO_SKIPS=1) or skip with a reason naming its package.
exec bash "$(dirname "$0")/apt-install.sh" install-bench-tools \
    "their tests fail under make test, or skip elsewhere" libbenchmark-dev hyperfine
