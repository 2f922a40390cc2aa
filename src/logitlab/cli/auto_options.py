"""Option types of the sequential runs: ``--repeats auto`` (``ab``, ``bench run``) and ``--max-time 10m``, and
the option group that declares them (:func:`sequential_options`)."""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import click

from logitlab.cli.options import SpelledOption

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


class CountOrAuto(click.ParamType):
    """A positive number of blocks, or ``auto`` (the sequential rule decides when to stop)."""

    name = "N|auto"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | str:
        if isinstance(value, int) or value == "auto":
            return value
        try:
            return int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither a number of blocks nor 'auto'", param, ctx)


class Duration(click.ParamType):
    """A duration in seconds: ``90``, ``90s``, ``10m``, ``1.5h``."""

    name = "DURATION"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h)?\s*", str(value))
        if not match:
            self.fail(f"{value!r} is not a duration: use e.g. 90s, 10m or 1.5h", param, ctx)
        seconds = float(match.group(1)) * _UNITS[match.group(2) or ""]
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r} is not a positive duration", param, ctx)
        return seconds


def sequential_options(flag: str, *, default: int, each: str, called: str, noise: str,
                       former: str | None = None) -> Callable[[Any], Any]:
    """The options of a run of ABBA/BAAB blocks that may stop sequentially, as one decorator: ``flag`` (a
    :class:`CountOrAuto` of blocks, ``default`` of them, each 4 timed ``each``; ``auto``: stop as soon as
    ``called`` is called faster, slower or equivalent), ``--max-<flag>`` (the budget of blocks of auto, 12 when
    not given), ``--max-time`` (a :class:`Duration`, the wall-clock budget of auto) and ``--noise FILE`` (auto's
    equivalence margin δ, fixed before the first look, from a calibration of this machine: ``noise`` names the
    files it takes; repeatable, a tuple of paths; :mod:`logitlab.perf.prereg`). What each command does with them
    is its own (``ab`` refuses a
    budget without auto; ``bench run`` takes ``--max-time`` for fixed blocks too).

    ``former``: the command's earlier spelling of ``flag`` (``bench run --blocks``, now ``--repeats`` as in
    ``ab``), kept as a second name of the option and of its budget (``--max-blocks``), so old scripts run; the
    values keep the former's name in the command's options (``opts["blocks"]``, ``opts["max_blocks"]``), and
    :func:`~logitlab.cli.options.spelled` says which name the command line used (a message names that one)."""
    budget = f"--max-{flag.lstrip('-')}"
    names = [flag, former, former.lstrip("-").replace("-", "_")] if former else [flag]
    budget_names = [budget, f"--max-{former.lstrip('-')}", f"max_{former.lstrip('-')}"] if former else [budget]
    was = f" ({former}: the same, its former name.)" if former else ""
    spelling = {"cls": SpelledOption} if former else {}
    options = [
        click.option(*names, **spelling, type=CountOrAuto(), default=default, show_default=True,
                     help=f"ABBA/BAAB blocks (4 timed {each} each), or 'auto': after each block a sequential rule "
                          "(O'Brien-Fleming-type alpha spending, repeated CIs valid at any stopping time) stops as "
                          f"soon as {called} is called faster, slower or equivalent.{was}"),
        click.option(*budget_names, **spelling, type=int, default=None,
                     help=f"Budget of blocks of {flag} auto.  [default: 12]"
                          + (f" ({budget_names[1]}: the same, its former name.)" if former else "")),
        click.option("--max-time", type=Duration(), default=None,
                     help=f"Wall-clock budget of {flag} auto, e.g. 10m: no block starts that would end past it."),
        click.option("--noise", "noise_path", multiple=True, metavar="FILE",
                     help=f"{flag} auto: δ fixed before the first look from a calibration of this machine, {noise} "
                          "(repeat the option to pool several A/As: δ then carries how much runs differ, not only "
                          "blocks; --margin overrides it). Default δ of auto: 2 %, never the run's own A/A."),
    ]

    def decorate(func: Any) -> Any:
        for option in reversed(options):  # the first outermost: listed first in --help
            func = option(func)
        return func

    return decorate
