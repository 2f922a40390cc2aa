"""Packaging metadata that pip reads: no deprecated forms."""

try:  # Python 3.11+; tomli (a dependency below 3.11) is the same parser
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_license_is_an_spdx_expression_not_a_deprecated_table():
    """setuptools >= 77 warns on ``license = {text = ...}`` (PEP 639); the SPDX string is the supported form."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0"
    requires = project["build-system"]["requires"]
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in requires), requires
