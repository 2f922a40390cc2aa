"""Limits given on the command line are refused by the option that takes them, one ``error:`` line naming it
(they named the result field, ``max_kld_p99 must be ...``, or passed nan through) — before any file is read."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: golden check is an engine command to the suite's guard (it loads none before its options are read)
ENGINE = pytest.mark.engine


@pytest.mark.parametrize("command, option, value, said", [
    (("history", "show"), "--max-pvalue", "2", "2.0 is not in the range 0<x<1."),
    (("history", "show"), "--max-pvalue", "nan", "'nan' is not a finite number."),
    (("history", "show"), "--min-size", "1", "1 is not in the range x>=2."),
    pytest.param(("golden", "check"), "--max-kld-p99", "-1", "-1.0 is not in the range x>=0.", marks=ENGINE),
    pytest.param(("golden", "check"), "--max-kld-mean", "nan", "'nan' is not a finite number.", marks=ENGINE),
    pytest.param(("golden", "check"), "--min-top1", "2", "2.0 is not in the range 0<=x<=1.", marks=ENGINE),
    pytest.param(("golden", "check"), "--min-top1", "inf", "inf is not in the range 0<=x<=1.", marks=ENGINE),
])
def test_a_bad_limit_is_one_error_line_naming_its_option(tmp_path, command, option, value, said):
    where = ["--dir", str(tmp_path / "no-history")] if command[0] == "history" else [str(tmp_path / "no-golden")]
    proc = subprocess.run([sys.executable, "-m", "logitlab", *command, *where, option, value], capture_output=True,
                          text=True)
    assert proc.returncode == 2
    assert proc.stderr == (f"error: Invalid value for '{option}': {said} "
                           f"(see 'logitlab {' '.join(command)} --help')\n"), proc.stderr
