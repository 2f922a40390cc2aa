"""logitlab.lazy: a package's public names, listed once by defining module, each imported on first access.

SciPy is imported inside the statistics' functions (a command that needs none starts faster), and ahead of a run's
first slot (``logitlab.lazy.preload_statistics``): a Ctrl-C that lands inside ``from scipy import stats`` leaves
``scipy.ndimage`` half initialised, and the analysis of the partial result then raised ``NameError`` (seen: ``bisect
--probe speed`` interrupted during its first sequential look exited 1 with a traceback, not 130).
"""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
import types

import pytest

from logitlab.lazy import lazy_exports


@pytest.fixture
def package(monkeypatch):
    module = types.ModuleType("lazy_fake_pkg")
    monkeypatch.setitem(sys.modules, "lazy_fake_pkg", module)
    return module


def test_all_lists_the_names_in_the_order_given_and_getattr_imports_them(package):
    get, listing, names = lazy_exports("lazy_fake_pkg", {"math": ("pi", "tau"), "json": ("dumps",)})
    assert names == ["pi", "tau", "dumps"]
    assert "pi" not in vars(package)
    assert get("pi") == math.pi
    assert vars(package)["pi"] == math.pi  # cached: the next access is a plain lookup
    assert get("dumps") is sys.modules["json"].dumps
    assert {"pi", "tau", "dumps"} <= set(listing())


def test_an_unlisted_name_is_a_missing_attribute(package):
    get, _, _ = lazy_exports("lazy_fake_pkg", {"math": ("pi",)})
    with pytest.raises(AttributeError, match="'lazy_fake_pkg' has no attribute 'e'"):
        get("e")


def test_a_name_listed_under_two_modules_is_refused(package):
    with pytest.raises(ValueError, match="'pi' is listed under math and cmath"):
        lazy_exports("lazy_fake_pkg", {"math": ("pi",), "cmath": ("pi",)})


@pytest.mark.parametrize("name", ["logitlab.numerics", "logitlab.perf"])
def test_each_public_name_of_the_lazy_packages_resolves(name):
    package = importlib.import_module(name)
    assert len(package.__all__) == len(set(package.__all__)) > 0
    for public in package.__all__:
        assert getattr(package, public) is not None


# -- and ahead of a run --------------------------------------------------------------------------------------------
SCRIPT = r'''
import json, sys
from logitlab.errors import Interrupted
from logitlab.experiments.base import Experiment
from logitlab.perf.commands import BenchRunConfig, bench_run

out = {"imported_by_the_modules": "scipy.stats" in sys.modules}
seen = []

def runner(command, *, metric=None, timeout=None):
    seen.append("scipy.stats" in sys.modules)
    if len(seen) == 7:  # Ctrl-C in the second block (ABBA, then BAAB)
        raise KeyboardInterrupt
    wall = 1.0 if command == "ctl" else 0.8
    return dict(wall_s=wall * (1 + 0.01 * len(seen)), user_s=wall / 2, sys_s=0.1, max_rss_bytes=1000,
                exit_status=0, metric=None, error=None, stdout_tail="", stderr_tail="")

try:
    bench_run(BenchRunConfig(control="ctl", candidate="cand", blocks=4, warmup=0, n_bootstrap=200), runner=runner)
except Interrupted as exc:
    out["bench_run"] = {"loaded_at_each_slot": seen, "blocks_analysed": exc.partial.primary.n_blocks}

for name in [m for m in sys.modules if m.startswith("scipy")]:
    del sys.modules[name]  # as before any import: the lifecycle of the experiments imports them again

class Probe(Experiment):
    KIND = "probe"

class Result:
    error = None
    def to_dict(self):
        return {}

inside = []
Probe().measure(Result(), lambda: inside.append("scipy.stats" in sys.modules))
out["experiment_body"] = inside
print(json.dumps(out))
'''


def test_a_run_has_the_statistics_imported_before_its_first_slot():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["imported_by_the_modules"] is False  # still lazy: importing the modules loads no SciPy
    assert found["bench_run"] == {"loaded_at_each_slot": [True] * 7, "blocks_analysed": 1}
    assert found["experiment_body"] == [True]
