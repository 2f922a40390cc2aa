"""logitlab's pytest plugin, run by pytest's own ``pytester``: passing, failing (exact message), regen, obtained file.

Also: the ``pytest11`` entry point in pyproject.toml loads the plugin when a distribution declares it.
"""

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

try:  # Python 3.11+; tomli (a dependency below 3.11) is the same parser
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture
def pytester(pytester):
    """Each run in its own process: an in-process run drops the modules it imported (numba's among them),
    which breaks numba for the tests that follow."""
    pytester.runpytest = pytester.runpytest_subprocess
    return pytester

ROOT = Path(__file__).resolve().parent.parent


def plugin_args() -> list[str]:
    """``-p logitlab.pytest_plugin`` unless an installed distribution already loads it through its entry point."""
    installed = any(ep.value == "logitlab.pytest_plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "logitlab.pytest_plugin"]


TEST_FILE = """
    import os
    import numpy as np
    from logitlab.pytest_plugin import assert_logits_close

    def logits():
        x = np.zeros((3, 8), np.float32)
        x[:, 2] = 5.0
        x[1, 4] = 1.0
        shift = float(os.environ.get("SHIFT", "0"))
        x[2, 6] += np.float32(shift)
        return x

    def test_model(golden_logits):
        golden_logits.check(logits(), token_ids=[1, 2, 3])

    def test_close():
        x = logits()
        y = x.copy()
        y[0, 2] = np.float32(5.25)
        assert_logits_close(x, y, max_ulp=16)
"""


def test_golden_logits_written_then_passing_then_failing_then_regen(pytester, monkeypatch):
    pytester.makepyfile(test_plugin_probe=textwrap.dedent(TEST_FILE))
    golden = pytester.path / "test_plugin_probe" / "test_model.safetensors"
    obtained = golden.with_name("test_model.obtained.safetensors")

    first = pytester.runpytest(*plugin_args(), "-k", "test_model")
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines([f"*golden logits {golden} did not exist: written now (float32 (3, 8), device cpu-*); "
                                "rerun the test to check against it*"])
    assert golden.is_file()

    pytester.runpytest(*plugin_args(), "-k", "test_model").assert_outcomes(passed=1)

    monkeypatch.setenv("SHIFT", "0.5")
    failing = pytester.runpytest(*plugin_args(), "-k", "test_model")
    failing.assert_outcomes(failed=1)
    failing.stdout.fnmatch_lines([
        "E       AssertionError: near-tie: first divergence at position 2, token 6: reference 0x0p+0 (0x00000000), "
        "observed 0x1p-1 (0x3f000000), 1056964608 ULP",
        "E       Mismatched elements: 1 / 24 (4.17 %) in 1 / 3 positions",
        "E       Greatest absolute difference: 0.5 at index (2, 6) (reference 0, observed 0.5)",
        "E       Greatest ULP difference: 1056964608 at index (2, 6) element-wise; 1.04858e+06 at the row's scale "
        "(position 2)",
        "E       Top-1 agreement: 3 / 3 positions; KLD (nats) mean *, p99 *, max *",
        "E       Verdict evidence: every flip and top-5 change at a reference margin < near_tie_margin = 0.5; *",
        "E       Smallest tolerance that would have passed: allowed={'near-tie'} (this run's verdict; allowed was "
        "{'bit-exact'})",
        f"E       Obtained logits kept at {obtained} (device cpu-*); golden {golden} (device cpu-*, logitlab *)",
    ])
    assert obtained.is_file()

    regen = pytester.runpytest(*plugin_args(), "-k", "test_model", "--logitlab-regen")
    regen.assert_outcomes(failed=1)
    regen.stdout.fnmatch_lines([f"*golden logits {golden} rewritten (--logitlab-regen)*rerun the test without "
                                "--logitlab-regen to check against it*"])
    assert not obtained.exists()
    pytester.runpytest(*plugin_args(), "-k", "test_model").assert_outcomes(passed=1)  # the new golden holds

    monkeypatch.setenv("SHIFT", "0")
    shape = pytester.runpytest(*plugin_args(), "-k", "test_model")
    shape.assert_outcomes(failed=1)
    shape.stdout.fnmatch_lines(["E       AssertionError: near-tie: first divergence at position 2, token 6: "
                                "reference 0x1p-1 (0x3f000000), observed 0x0p+0 (0x00000000), 1056964608 ULP"])


def test_assertion_message_in_a_plain_test(pytester):
    pytester.makepyfile(test_plugin_probe=textwrap.dedent(TEST_FILE))
    result = pytester.runpytest(*plugin_args(), "-k", "test_close")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E       AssertionError: noise: first divergence at position 0, token 2: reference 0x1.4p+2 (0x40a00000), "
        "observed 0x1.5p+2 (0x40a80000), 524288 ULP",
        "E       Mismatched elements: 1 / 24 (4.17 %) in 1 / 3 positions",
        "E       Smallest tolerance that would have passed: max_ulp=524288",
    ])
    # the traceback stops at the test's own line (__tracebackhide__)
    assert "assertions.py" not in result.stdout.str()


def test_obtained_file_goes_away_once_passing(pytester, monkeypatch):
    pytester.makepyfile(test_plugin_probe=textwrap.dedent(TEST_FILE))
    pytester.runpytest(*plugin_args(), "-k", "test_model")  # writes the golden
    monkeypatch.setenv("SHIFT", "1")
    pytester.runpytest(*plugin_args(), "-k", "test_model").assert_outcomes(failed=1)
    obtained = pytester.path / "test_plugin_probe" / "test_model.obtained.safetensors"
    assert obtained.is_file()
    monkeypatch.setenv("SHIFT", "0")
    pytester.runpytest(*plugin_args(), "-k", "test_model").assert_outcomes(passed=1)
    assert not obtained.exists()


def test_a_golden_from_another_device_key_gets_the_other_device_bar(pytester, monkeypatch):
    pytester.makepyfile(test_other=textwrap.dedent("""
        import numpy as np
        from safetensors.numpy import save_file

        def test_other(golden_logits):
            x = np.zeros((2, 8), np.float32)
            x[:, 2] = 5.0
            golden = golden_logits.path()
            if not golden.exists():  # a golden some other machine recorded
                golden.parent.mkdir(parents=True, exist_ok=True)
                save_file({"logits": x}, str(golden), metadata={"device_key": "cpu-elsewhere-00000000"})
            y = x.copy()
            y[1, 6] = np.float32(0.5)
            golden_logits.check(y, other_device="near-tie")
            golden_logits.check(y)  # the default bar: bit-exact
    """))
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*golden_logits.check(y)  # the default bar: bit-exact",
                                 "E       AssertionError: near-tie: first divergence at position 1, token 6:*",
                                 "E       *golden * (device cpu-elsewhere-00000000, logitlab ?)"])


def test_detection_is_opt_in_on_the_returned_comparison_and_in_the_failure_message(pytester):
    """Issue #32: golden_logits.check(..., detection=True) (assert_verdict's argument) returns the detection
    limits with the comparison, and a failure's message states them; by default nothing is measured."""
    pytester.makepyfile(test_detect=textwrap.dedent("""
        import numpy as np
        from safetensors.numpy import save_file

        def test_detect(golden_logits):
            x = np.random.default_rng(0).normal(0, 3, (12, 512)).astype(np.float32)
            golden = golden_logits.path()
            if not golden.exists():
                golden.parent.mkdir(parents=True, exist_ok=True)
                save_file({"logits": x}, str(golden), metadata={"device_key": "cpu-elsewhere-00000000"})
            y = (x + np.random.default_rng(1).normal(0, 0.01, x.shape)).astype(np.float32)
            assert golden_logits.check(y, allowed="near-tie").detection is None  # off by default
            c = golden_logits.check(y, allowed="near-tie", detection=True)
            up = c.detection.shape("argmax-up")
            assert c.verdict.word == c.detection.verdict and 0 < up.limit < 1 and up.caught == up.probed == 12
            print("argmax-up limit", up.limit)
            golden_logits.check(y, detection=True)  # the default bar: bit-exact
    """))
    result = pytester.runpytest(*plugin_args(), "-s")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*argmax-up limit *",
        "*golden_logits.check(y, detection=True)  # the default bar: bit-exact",
        "E       AssertionError: *: first divergence at position 0, token 0:*",
        "E       Detection limit (logits; the smallest planted fault that reads divergent wherever it lands): "
        "argmax-up *, argmax-down *, tail-up *, row-noise *, top2-swap caught */*, all-rows-shift * "
        "(systematic-offset)",
        "E       Smallest tolerance that would have passed: *",
    ])


def test_pytest11_entry_point_loads_the_plugin(tmp_path):
    """pyproject declares the entry point; a distribution declaring it makes pytest load the plugin by itself."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert declared == {"logitlab": "logitlab.pytest_plugin"}
    site = tmp_path / "site"
    info = site / "logitlab_plugin_probe-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: logitlab-plugin-probe\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")])}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "--logitlab-regen" in out.stdout
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # inverse control: without entry points, no option
    out = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert "--logitlab-regen" not in out.stdout
