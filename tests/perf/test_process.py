"""The process runner: measuring real commands, their failures, timeouts and the metric regex."""

from __future__ import annotations

import sys

import pytest

from logitlab.errors import InputError
from logitlab.perf.process import compile_metric, run_command

PY = sys.executable


def test_run_command_measures_the_child():
    r = run_command(f"{PY} -c \"x = bytearray(80_000_000); print('tokens_per_second=12.5')\"",
                    metric=compile_metric(r"tokens_per_second=([0-9.]+)"))
    assert r["error"] is None and r["exit_status"] == 0 and r["metric"] == 12.5
    assert r["max_rss_bytes"] >= 80_000_000  # the child's own peak, from wait4's rusage
    assert r["wall_s"] > 0 and r["user_s"] + r["sys_s"] > 0
    assert "tokens_per_second" in r["stdout_tail"]


def test_small_command_rss_is_not_the_parents():
    # a child forked straight from this process would report this process's RSS (~100 MB) as its peak
    assert run_command("true")["max_rss_bytes"] < 30_000_000


@pytest.mark.parametrize("command, error", [
    ("exit 3", "exit status 3"),
    ("kill -9 $$", "killed by signal 9 (SIGKILL)"),
    ("echo nothing here", "matched nothing in the output"),
    ("echo x=abc", "is not a number"),
    ("echo x=0", "not positive"),
])
def test_run_command_failures(command, error):
    r = run_command(command, metric=compile_metric(r"x=(\w+)"))
    assert error in r["error"]


def test_timeout_kills_the_process_group():
    r = run_command("sleep 30; echo late", timeout=0.3)
    assert r["error"] == "timed out after 0.3 s (killed)" and "late" not in r["stdout_tail"]


def test_metric_regex_checks():
    with pytest.raises(InputError, match="not a valid regular expression"):
        compile_metric("(")
    with pytest.raises(InputError, match="2 groups"):
        compile_metric(r"(a)=(\d+)")
    with pytest.raises(InputError, match=r"--metric 'x=\[0-9\]\+' has no capture group: put parentheses"):
        compile_metric("x=[0-9]+")
    named = compile_metric(r"(tokens|toks)=(?P<value>[0-9.]+)")  # several groups, one named: the named one
    assert run_command("echo toks=42", metric=named)["metric"] == 42.0
