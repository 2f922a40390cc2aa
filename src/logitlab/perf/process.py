"""One shell command, run and measured: the process runner behind ``bench run``.

The command runs in a shell, in its own process group, and is measured from
the operating system's accounting of the child: wall time
(``time.perf_counter`` from fork to reap), user and system CPU time and peak
resident set size (``os.wait4``'s ``struct rusage``, which on Linux covers
the shell and every descendant it waited for), and the exit status.
Optionally a number is parsed from the command's output with a regular
expression (``tokens_per_second=([0-9.]+)``, llama-bench's ``avg_ts``...).

Nothing here prints or logs.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

from logitlab.errors import InputError

__all__ = ["compile_metric", "metric_regex_fault", "run_command"]

#: Output kept per run (characters of the tail of stdout and stderr).
_TAIL = 2000
_RSS_SCALE = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux

def compile_metric(regex: str | None) -> re.Pattern | None:
    """Compile a metric regex: one capture group (or one named group) around the number.

    Raises
    ------
    InputError
        If the regex does not compile, has no capture group, or has several
        groups and not exactly one of them named.
    """
    if regex is None:
        return None
    try:
        pattern = re.compile(regex)
    except re.error as exc:
        raise InputError(f"--metric {regex!r} is not a valid regular expression ({exc})") from None
    if pattern.groups == 0:
        raise InputError(f"--metric {regex!r} has no capture group: put parentheses around the number, "
                         f"e.g. 'tokens_per_second=([0-9.]+)'")
    if pattern.groups > 1 and len(pattern.groupindex) != 1:
        raise InputError(f"--metric {regex!r} has {pattern.groups} groups: use one group around the number "
                         "(or name it: (?P<value>[0-9.]+))")
    return pattern


def _metric_group(pattern: re.Pattern) -> int | str:
    """The group holding the number: the only group, or the only named one."""
    return 1 if pattern.groups == 1 else next(iter(pattern.groupindex))


#: Start of the error of a run whose metric regex captured something that is not a number.
_NOT_A_NUMBER = "--metric regex "


def _parse_metric(pattern: re.Pattern, stdout: str, stderr: str) -> tuple[float | None, str | None]:
    for text in (stdout, stderr):
        matches = list(pattern.finditer(text))
        if matches:
            raw = matches[-1].group(_metric_group(pattern))
            try:
                value = float(raw)
            except (TypeError, ValueError):
                return None, (f"{_NOT_A_NUMBER}{pattern.pattern!r} captured {raw!r}, which is not a number: "
                              "make its group match only the number, e.g. ([0-9.]+)")
            if not math.isfinite(value) or value <= 0:
                return None, f"metric {value!r} is not positive and finite"
            return value, None
    return None, f"metric regex {pattern.pattern!r} matched nothing in the output"


def metric_regex_fault(error: str | None) -> bool:
    """Whether a run's ``error`` is the metric regex's fault, not the command's.

    Parameters
    ----------
    error : str or None
        The ``error`` of a :func:`run_command` result.

    Returns
    -------
    bool
        True when the regex captured something that is not a number.
    """
    return bool(error and error.startswith(_NOT_A_NUMBER))


#: Runs in a fresh, small interpreter (``python -S -I``) that forks the shell command and reports
#: its rusage: a child forked straight from this (large) process would inherit this process's
#: resident set as its ``ru_maxrss`` floor, since Linux carries the pre-exec peak across exec.
_LAUNCHER = """
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execv("/bin/sh", ["/bin/sh", "-c", sys.argv[1]])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
report = "%r %r %r %d %d" % (wall, ru.ru_utime, ru.ru_stime, ru.ru_maxrss, os.waitstatus_to_exitcode(status))
os.write(int(sys.argv[2]), report.encode())
"""


def run_command(
    command: str,
    *,
    metric: re.Pattern | None = None,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> dict[str, Any]:
    """Run one shell command and measure it.

    Parameters
    ----------
    command : str
        Run with ``/bin/sh -c``, in a new process group.
    metric : re.Pattern, optional
        From :func:`compile_metric`; searched in stdout, then stderr; the last
        match counts.
    timeout : float, optional
        Seconds; on expiry the whole process group gets SIGKILL and the run
        fails.
    env, cwd : optional
        As for :class:`subprocess.Popen`.

    Returns
    -------
    dict
        ``wall_s``, ``user_s``, ``sys_s`` (s), ``max_rss_bytes`` (bytes),
        ``exit_status``, ``metric``, ``error``, ``stdout_tail``,
        ``stderr_tail``: the fields of :class:`~logitlab.perf.commands.CommandRun` one run determines.

    Raises
    ------
    InputError
        If the process cannot be started at all.

    Notes
    -----
    A small launcher process forks the shell, times it with
    ``time.perf_counter`` from fork to reap, and reaps it with ``os.wait4``,
    whose ``struct rusage`` (getrusage(2): ``ru_utime``, ``ru_stime``,
    ``ru_maxrss``) covers the shell and every descendant it waited for. The
    launcher exists because Linux keeps a forked child's pre-exec resident
    set as a floor of its ``ru_maxrss``: forked from this process, every
    command would show at least this process's RSS (~100 MB with numpy and
    scipy loaded); forked from the launcher the floor is ~5 MB.
    """
    read_fd, write_fd = os.pipe()
    start = time.perf_counter()
    try:
        proc = subprocess.Popen([sys.executable, "-S", "-I", "-c", _LAUNCHER, command, str(write_fd)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True, pass_fds=(write_fd,))
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise InputError(f"cannot start {command!r}: {exc}") from None
    os.close(write_fd)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
    except KeyboardInterrupt:  # Ctrl-C: the command runs in its own session, so end it too
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        os.close(read_fd)
        raise
    outer_wall = time.perf_counter() - start
    with os.fdopen(read_fd, "rb") as f:
        report = f.read().decode("ascii", errors="replace").split()
    stdout = out.decode("utf-8", errors="replace")
    stderr = err.decode("utf-8", errors="replace")
    if len(report) == 5:
        wall, user, system = (float(x) for x in report[:3])
        rss, code = int(report[3]) * _RSS_SCALE, int(report[4])
    else:  # the launcher itself was killed (timeout) or failed
        wall, user, system, rss, code = outer_wall, 0.0, 0.0, 0, proc.returncode
    error = None
    value = None
    if timed_out:
        error = f"timed out after {timeout:g} s (killed)"
    elif len(report) != 5:
        error = f"launcher failed (exit status {proc.returncode}): {stderr.strip()[-200:]}"
    elif code < 0:
        error = f"killed by signal {-code} ({signal.Signals(-code).name})"
    elif code != 0:
        error = f"exit status {code}"
    elif metric is not None:
        value, error = _parse_metric(metric, stdout, stderr)
    return dict(wall_s=wall, user_s=user, sys_s=system, max_rss_bytes=rss, exit_status=code, metric=value,
                error=error, stdout_tail=stdout[-_TAIL:], stderr_tail=stderr[-_TAIL:])
