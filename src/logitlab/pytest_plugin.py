"""logitlab's pytest plugin: logit assertions and a ``golden_logits`` fixture (``pytest11`` entry point).

Installed with logitlab, it is loaded by pytest on its own (entry point
``logitlab`` in the ``pytest11`` group); ``-p logitlab.pytest_plugin`` loads
it where entry points are off.

Assertions (from :mod:`logitlab.numerics.assertions`, re-exported here)::

    from logitlab.pytest_plugin import assert_logits_equal, assert_logits_close, assert_verdict
    assert_logits_close(ref, obs, max_ulp=16, kld_p99=1e-3)

The ``golden_logits`` fixture works like pytest-regressions'
``ndarrays_regression``: ``golden_logits.check(logits)`` compares with
``<test file's folder>/<test file stem>/<test name>.safetensors``:

- missing golden: it is written and the test fails (rerun to check against it);
- ``--logitlab-regen``: it is rewritten and the test fails (rerun without it);
- a mismatch: the obtained logits are kept beside the golden
  (``<test name>.obtained.safetensors``) and the test fails with the
  assertion's message (verdict, first divergence, numpy-style lines, the
  smallest tolerance that would have passed; with ``detection=True`` the
  detection limits too), plus where both files are and on which device keys
  they were made.

The golden file records logitlab's version and the device key
(:mod:`logitlab.device`) in its safetensors metadata.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

import pytest

__all__ = ["GoldenLogitsFixture", "REGEN_OPTION", "golden_logits"]
#: The assertions of :mod:`logitlab.numerics.assertions`, importable from here (loaded on first use, PEP 562).
ASSERTIONS = ("assert_logits_equal", "assert_logits_close", "assert_verdict", "assert_logits_equivalent",
              "assert_probe_sensitive")

REGEN_OPTION = "--logitlab-regen"


def __getattr__(name: str) -> Any:
    """The assertions, imported on first use (loading the plugin must not load numba kernels)."""
    if name in ASSERTIONS:
        from logitlab.numerics import assertions

        return getattr(assertions, name)
    raise AttributeError(name)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("logitlab")
    group.addoption(REGEN_OPTION, action="store_true", default=False,
                    help="Rewrite the golden logits of golden_logits checks (the tests then fail: rerun without it).")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "logitlab: tests using logitlab's golden logits")


class GoldenLogitsFixture:
    """The ``golden_logits`` fixture: one test's golden logits files.

    Attributes:
        folder: where the test's goldens live (``<test file's folder>/<test file stem>/``).
        basename: default file stem (the test's name, made filesystem-safe).
        regen: ``--logitlab-regen`` was given.
    """

    def __init__(self, folder: Path, basename: str, regen: bool):
        self.folder = folder
        self.basename = basename
        self.regen = regen

    def path(self, basename: str | None = None) -> Path:
        """The golden file of ``basename`` (default: the test's)."""
        return self.folder / f"{basename or self.basename}.safetensors"

    def check(self, logits: Any, *, token_ids: Iterable[int] | None = None, basename: str | None = None,
              allowed: Any = "bit-exact", other_device: Any = None, thresholds: Any = None,
              detection: bool = False) -> Any:
        """Compare ``logits`` with the golden (``(n_positions, n_vocab)``, float32/float16/bfloat16).

        Args:
            logits: the obtained logits.
            token_ids: the token fed at each position (stored with a new golden, checked against an old one).
            basename: file stem (several goldens in one test).
            allowed: verdicts that pass (:func:`~logitlab.numerics.assertions.assert_verdict`); default bit-exact.
            other_device: verdicts that pass when the golden was recorded under another device key
                (default: ``allowed``), e.g. ``"near-tie"`` for a golden shared by CI runners of other CPUs.
            thresholds: verdict thresholds (:class:`~logitlab.numerics.verdict.Thresholds`).
            detection: also measure the detection limits (opt-in: about 80 comparisons of the logits; see
                :func:`~logitlab.numerics.assertions.assert_verdict`): on the returned object and in the
                failure message.

        Returns:
            The :class:`~logitlab.numerics.assertions.VerdictComparison` (a
            :class:`~logitlab.numerics.compare.LogitComparison` with ``verdict`` and ``detection``).

        Raises:
            AssertionError: the logits do not pass (the obtained file is kept), or a golden was written.
        """
        __tracebackhide__ = True  # noqa: F841
        import numpy as np

        from logitlab.device import device_info
        from logitlab.numerics.assertions import assert_verdict
        from logitlab.numerics.verdict import Thresholds

        array = np.asarray(logits)
        if array.ndim == 1:
            array = array.reshape(1, -1)
        ids = None if token_ids is None else [int(t) for t in token_ids]
        golden = self.path(basename)
        obtained = golden.with_name(golden.stem + ".obtained.safetensors")
        device = device_info().key
        if self.regen or not golden.exists():
            why = f"rewritten ({REGEN_OPTION})" if golden.exists() else "did not exist: written now"
            _write(golden, array, ids, device)
            obtained.unlink(missing_ok=True)
            pytest.fail(f"golden logits {golden} {why} ({array.dtype} {tuple(array.shape)}, device {device}); "
                        f"rerun the test{' without ' + REGEN_OPTION if self.regen else ''} to check against it",
                        pytrace=False)
        expected, expected_ids, meta = _read(golden)
        where = (f"\nObtained logits kept at {obtained} (device {device}); golden {golden} "
                 f"(device {meta.get('device_key', '?')}, logitlab {meta.get('logitlab_version', '?')})")
        problem = None
        if expected.shape != array.shape or expected.dtype != array.dtype:
            problem = (f"golden logits are {expected.dtype} {tuple(expected.shape)}, obtained "
                       f"{array.dtype} {tuple(array.shape)}")
        elif ids is not None and expected_ids is not None and list(expected_ids) != ids:
            at = next(i for i, (a, b) in enumerate(zip(expected_ids, ids)) if a != b) \
                if len(expected_ids) == len(ids) else min(len(expected_ids), len(ids))
            problem = f"token ids differ from the golden's, first at position {at}: the inputs changed"
        if problem is not None:
            _write(obtained, array, ids, device)
            raise AssertionError(problem + where)
        recorded_on = meta.get("device_key")
        if other_device is not None and recorded_on != device:
            allowed = other_device
        try:
            comparison = assert_verdict(expected, array, allowed, thresholds=thresholds or Thresholds(),
                                        token_ids=ids, detection=detection)
        except AssertionError as exc:
            _write(obtained, array, ids, device)
            raise AssertionError(str(exc) + where) from None
        obtained.unlink(missing_ok=True)
        return comparison


def _write(path: Path, logits: Any, ids: list[int] | None, device: str) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    from logitlab import __version__

    tensors = {"logits": np.ascontiguousarray(logits)}
    if ids is not None:
        tensors["token_ids"] = np.asarray(ids, dtype=np.int32)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"format": "logitlab-golden-logits", "logitlab_version": __version__,
                                            "device_key": device})


def _read(path: Path) -> tuple[Any, Any, dict[str, str]]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = dict(f.metadata() or {})
            logits = f.get_tensor("logits")
            keys = set(f.keys())  # safe_open has no __contains__
            ids = f.get_tensor("token_ids").tolist() if "token_ids" in keys else None
    except Exception as exc:  # the library raises its own error types for damaged files
        pytest.fail(f"golden logits {path} cannot be read ({exc}); rewrite it with {REGEN_OPTION}", pytrace=False)
    return logits, ids, meta


def _basename(node_name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", node_name).strip("_")


@pytest.fixture
def golden_logits(request: pytest.FixtureRequest) -> GoldenLogitsFixture:
    """Golden logits for this test: ``golden_logits.check(logits)`` (see :class:`GoldenLogitsFixture`)."""
    path = Path(str(request.node.path))
    return GoldenLogitsFixture(path.parent / path.stem, _basename(request.node.name),
                               bool(request.config.getoption(REGEN_OPTION)))
