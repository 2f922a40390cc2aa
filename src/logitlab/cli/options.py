"""The option groups several subcommands share, and what they parse to.

Each group is a decorator that adds its options (one spelling, one help text,
one default for every command); its reader turns the parsed values into the
typed object the experiment takes: :func:`variant_pair_options` /
:func:`variant_pair`, :func:`prompt_options` / :func:`prompt_from` / :func:`prompts_from`,
:func:`threshold_options` /
:func:`thresholds_from`, :func:`positions_option` / :func:`positions_from`,
:func:`run_log_option` / :func:`run_log_path`, :func:`metric_options` /
:func:`metric_name`, and
:func:`output_options` (``--json``, ``--markdown``, ``--html``, ``--quiet``: :func:`quiet_option`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable

import click

from logitlab.formats import FORMATS
from logitlab.numerics.verdict import Thresholds, check_thresholds

MODEL_HELP = "Model file (default: the embedded SmolLM2-135M Q4_1 GGUF)."


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf`` (which pass its range checks: every comparison
    with nan is false), so a bad limit is click's one line naming the option, never a field name further down."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class SpelledOption(click.Option):
    """A click option with more than one name (``--repeats`` and its former name ``--blocks``) that remembers which
    one the command line used, so that a message about its value names the option the user typed
    (:func:`spelled`). Parsed, helped and completed as any option; a value option only (not a flag), given by one
    spelling: ``--repeats 3 --blocks 4`` is refused (which one was meant?)."""

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        if self.is_flag or self.multiple or self.count or len(self.opts) < 2:
            raise TypeError(f"SpelledOption {self.name}: a value option with several names")
        for opt in self.opts:  # one parser entry per spelling: the value lands under the spelling that was typed
            parser.add_option(obj=self, opts=[opt], dest=f"{self.name}{_TYPED_AS}{opt}", action="store",
                              nargs=self.nargs)

    def handle_parse_result(self, ctx: click.Context, opts: Any, args: list[str]) -> Any:
        typed = [key.split(_TYPED_AS, 1)[1] for key in opts if key.startswith(f"{self.name}{_TYPED_AS}")]
        if len(typed) > 1:
            raise click.UsageError(f"{' and '.join(typed)} name the same option: give it once", ctx)
        if typed:
            ctx.meta.setdefault(_TYPED, {})[self.name] = typed[0]
            opts = {**opts, self.name: opts[f"{self.name}{_TYPED_AS}{typed[0]}"]}
        return super().handle_parse_result(ctx, opts, args)


#: a SpelledOption's parser destination when typed as OPT: NAME@OPT; the ctx.meta key of the spellings typed
_TYPED_AS, _TYPED = "@", "logitlab.typed_options"


def spelled(name: str) -> str:
    """The option of the running command whose value is ``opts[name]``, as the command line spelled it (a
    :class:`SpelledOption` given by a former name: that name), else its first name: what a message about the
    value names."""
    ctx = click.get_current_context()
    typed = ctx.meta.get(_TYPED, {}).get(name)
    if typed:
        return typed
    return next(p.opts[0] for p in ctx.command.params if p.name == name)


SPEC_HELP = "KEY=VALUE[,KEY=VALUE] engine options, or [ENGINE:][MODEL][?KEY=VALUE&...]"


#: ``--quiet``/``-q``, one meaning in every command (:func:`quiet_option`): as pip's, pytest's and curl's -q, less
#: output, not only no progress bar.
QUIET_HELP = ("Print no progress bar and no report: only errors, warnings and a failed check (--require), one line "
              "each on stderr. The files asked for are still written (--json -: the JSON on stdout); the exit "
              "status is the same.")


def quiet_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--quiet``/``-q`` (:data:`QUIET_HELP`): the command shows no progress bar and prints no report, nor notes such
    as where the run log or a record went; it still writes every file asked for, prints each error or warning as
    one ``error:``/``warning:`` line on stderr and exits with the same status (the verdict of ``--require``)."""
    return click.option("--quiet", "-q", is_flag=True, help=QUIET_HELP)(func)


def output_options(*, json_help: str = "Write the full result as JSON.", markdown: bool = True,
                   json: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--json PATH``, ``--NAME PATH`` for each report format of :data:`logitlab.formats.FORMATS` (``--markdown``,
    ``--html``; unless ``markdown=False``: a command without a report) and ``--quiet`` (:func:`quiet_option`): one
    group for every command.

    ``json=False``: the command declares its own JSON output option (``bench calibrate --out/--json``,
    required there); it must keep the ``json_path`` name that :func:`~logitlab.cli.outputs.write_reports` reads.
    """
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        options = [click.option("--json", "json_path", type=str, default=None, metavar="PATH",
                                help=f"{json_help} '-': to stdout (then the rest goes to stderr).")] if json else []
        if markdown:
            options.extend(click.option(f"--{name}", f"{name}_path", type=str, default=None, help=fmt.help)
                           for name, fmt in FORMATS.items())
        options.append(quiet_option)
        return apply_options(func, options)
    return decorate


def metric_options(*, example: str, scope: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--metric REGEX``, ``--metric-name``, ``--unit`` and ``--higher-is-better/--lower-is-better``: the metric a
    benchmark command's output gives (``bench run``, ``bisect --probe speed``), parsed by
    :mod:`logitlab.perf.commands`; :func:`metric_name` is the name's default. ``example``: a REGEX for the help;
    ``scope``: what each help starts with (``"speed: "``, the probe the options belong to)."""
    def text(words: str) -> str:
        return scope + words if scope else words[0].upper() + words[1:]

    options = [
        click.option("--metric", "metric_regex", default=None, metavar="REGEX",
                     help=text("parse the primary metric from the output: the one capture group (or the one named "
                               f"group) of the last match, e.g. '{example}'. Default: wall time.")),
        click.option("--metric-name", default=None,
                     help=text("name of the --metric (default: the text before '=' in REGEX).")),
        click.option("--unit", "metric_unit", default="", help=text("unit of the --metric, for reports (e.g. tokens/s).")),
        click.option("--higher-is-better/--lower-is-better", "higher_is_better", default=None,
                     help=text("direction of the --metric (required with --metric).")),
    ]
    return lambda func: apply_options(func, options)


def metric_name(regex: str | None) -> str:
    """The name of a ``--metric`` REGEX: the text before its ``=`` or ``:`` (``wall`` without a REGEX, ``metric``
    when there is none)."""
    if not regex:
        return "wall"
    match = re.match(r"\s*([A-Za-z_][\w./ -]*?)\s*[=:]", regex)
    return match.group(1).strip() if match else "metric"


def run_log_option(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--log PATH``: the run log (:mod:`logitlab.runlog`) each finished run is appended to."""
    return click.option("--log", "log_path", type=str, default=None,
                        help="JSONL file each run is appended to as it finishes, so a killed run keeps them "
                             "(`logitlab report` shows it; default: next to --json, else "
                             f"./logitlab-runs/{command}-TIMESTAMP.jsonl).")


def run_log_path(opts: dict[str, Any], command: str) -> str:
    """``--log``, else ``X.runs.jsonl`` next to ``--json X.json``, else (no ``--json``, or ``--json -``)
    ``logitlab-runs/COMMAND-TIMESTAMP.jsonl``.

    Raises:
        InputError: ``--log`` names a file that holds something else than a run log
            (:func:`logitlab.runlog.check_appendable`).
    """
    from datetime import datetime

    from logitlab.runlog import check_appendable

    if opts.get("log_path"):
        check_appendable(opts["log_path"])
        return opts["log_path"]
    if opts.get("json_path") and opts["json_path"] != "-":
        return str(Path(opts["json_path"]).with_suffix(".runs.jsonl"))
    return f"logitlab-runs/{command}-{datetime.now():%Y%m%d-%H%M%S}.jsonl"


def apply_options(func: Callable[..., Any], options: list[Callable[..., Any]]) -> Callable[..., Any]:
    """``func`` decorated with each click option of ``options``, the first one outermost (listed first in --help)."""
    for option in reversed(options):
        func = option(func)
    return func


def variant_pair_options(*, engine_help: str, candidate_help: str,
                         slots: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--model --engine --control --candidate --control-env --candidate-env`` (read by :func:`variant_pair`).

    ``slots`` names where an environment knob applies ("control slots", "the control").
    """
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        from logitlab.engines import DEFAULT_ENGINE

        return apply_options(func, [
            click.option("--model", type=str, default=None, help=MODEL_HELP),
            click.option("--engine", "engine", default=DEFAULT_ENGINE, show_default=True, help=engine_help),
            click.option("--control", default="", help=f"Control spec: {SPEC_HELP}."),
            click.option("--candidate", default=None, help=candidate_help),
            click.option("--control-env", multiple=True, metavar="NAME[=VALUE]",
                         help=f"Environment knob for {slots.format(side='control')}."),
            click.option("--candidate-env", multiple=True, metavar="NAME[=VALUE]",
                         help=f"Environment knob for {slots.format(side='candidate')}."),
        ])
    return decorate


def variant_pair(opts: dict[str, Any]) -> tuple[Any, Any]:
    """The control and candidate :class:`~logitlab.engines.variant.Variant` of :func:`variant_pair_options`.

    Without ``--candidate`` the candidate is the control's spec (an A/A).
    ``--control-model`` / ``--candidate-model``, where a command has them,
    override ``--model`` for one side.

    Raises:
        InputError: a malformed spec or environment knob.
    """
    from logitlab.engines.variant import parse_env, parse_variant

    def side(name: str, spec: str) -> Any:
        model = opts.get(f"{name}_model") or opts["model"]
        return parse_variant(spec, name, default_engine=opts["engine"], default_model=model,
                             env=parse_env(opts[f"{name}_env"]))

    return side("control", opts["control"]), side("candidate", opts["control"] if opts["candidate"] is None
                                                   else opts["candidate"])


#: The help of the prompt options, one text for every command (``{default}``: what runs without them).
PROMPT_HELP = {
    "--prompt": "Prompt text{repeat} (default: {default}).",
    "--prompt-file": "A text file whose whole content is one prompt (newlines and all).",
    "--prompts": "Prompts file: JSONL ({{\"name\": ..., \"text\": ...}} or a JSON string per line) or plain text, "
                 "one prompt per line (\\n for a newline){one}.",
}


def prompt_options(default_help: str, *, many: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--prompt TEXT``, ``--prompt-file FILE`` and ``--prompts FILE``: the prompts of every command that takes
    one (read by :func:`prompt_from` or :func:`prompts_from`); one of the three at most.

    ``default_help`` says what runs without them; ``many``: the command runs several prompts (``--prompt``
    repeats, a ``--prompts`` file is the prompt set), else one (``--prompt`` twice, or a ``--prompts`` file of
    several, is an error: :func:`~logitlab.experiments.prompts.one_prompt`).
    """
    repeat = " (repeatable: one prompt each)" if many else ""
    one = "" if many else "; this command runs one, so the file must hold one"

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        return apply_options(func, [
            click.option("--prompt", "prompt_texts", multiple=True, metavar="TEXT",
                         help=PROMPT_HELP["--prompt"].format(repeat=repeat, default=default_help)),
            click.option("--prompt-file", "prompt_file", type=str, default=None, metavar="FILE",
                         help=PROMPT_HELP["--prompt-file"]),
            click.option("--prompts", "prompts_file", type=str, default=None, metavar="FILE",
                         help=PROMPT_HELP["--prompts"].format(one=one)),
        ])
    return decorate


def prompt_from(opts: dict[str, Any], command: str, default: str | None = None) -> str:
    """The text of the one prompt of :func:`prompt_options` (``default``: when none is given; None: the built-in
    prose prompt).

    Raises:
        InputError: two of the options, several prompts, a missing, unreadable or empty file, an empty prompt.
    """
    from logitlab.experiments.prompts import one_prompt

    return one_prompt(opts["prompt_texts"], opts["prompt_file"], opts["prompts_file"], command=command,
                      default=default)


def prompts_from(opts: dict[str, Any], default: Callable[[], list[Any]]) -> list[Any]:
    """The :class:`~logitlab.experiments.prompts.Prompt` list of :func:`prompt_options` (``many=True``), or
    ``default()`` when none is given.

    Raises:
        InputError: two of the options, a missing, unreadable or empty file, an empty prompt, duplicate names.
    """
    from logitlab.experiments.prompts import select_prompts

    prompts = select_prompts(opts["prompt_texts"], opts["prompt_file"], opts["prompts_file"])
    return default() if prompts is None else prompts


def prompt_inputs(opts: dict[str, Any]) -> list[str | None]:
    """The files the prompt options read (for :func:`~logitlab.cli.outputs.check_output_paths`' ``inputs``)."""
    return [opts["prompt_file"], opts["prompts_file"]]


#: The help of ``--positions``, one text for every command that takes it.
POSITIONS_HELP = ("The rows of each run compared and stored: all, prompt, decode, last (the run's last row), "
                  "every:K, and row numbers A, A-B, A- (0 is the first prompt token's row; comma-separated, "
                  "united). Verdicts and reports say which they rest on.")


def positions_option(func: Callable[..., Any] | None = None, *, default: str | None = "all",
                     default_help: str = "") -> Any:
    """``--positions SPEC`` (default ``all``) into ``opts["positions"]`` (read by :func:`positions_from`); as
    ``@positions_option(default=None, default_help=TEXT)`` a command whose default is not a spec says what it
    is (``golden check``: the golden's own)."""
    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        return click.option("--positions", "positions", default=default, show_default=default is not None,
                            metavar="SPEC", help=f"{POSITIONS_HELP} {default_help}".strip())(f)

    return decorate if func is None else decorate(func)


def positions_from(opts: dict[str, Any]) -> str | None:
    """The ``--positions`` spec of :func:`positions_option`, its spelling checked before any engine loads (None:
    not given, where the option has no default).

    Raises:
        InputError: a bad spec (:func:`logitlab.experiments.positions.parse_positions`).
    """
    from logitlab.experiments.positions import parse_positions

    return None if opts["positions"] is None else parse_positions(opts["positions"]).spec


def memory_check_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--memory-check/--no-memory-check`` (default on) into ``opts["memory_check"]`` (read by
    :func:`check_memory`)."""
    return click.option("--memory-check/--no-memory-check", "memory_check", default=True, show_default=True,
                        help="Before loading any engine, estimate the run's peak memory (positions × vocabulary × "
                             "4 bytes, times the run-sized arrays this command holds) and refuse (exit 2) a run "
                             "that would not fit the available memory; --no-memory-check runs it anyway.")(func)


def check_memory(opts: dict[str, Any], command: str, variants: Any, prompts: Any, n_decode: int, *,
                 positions: int | None = None, units: int = 0, selected: str | None = None) -> None:
    """The memory check of :func:`memory_check_option` (:func:`logitlab.experiments.memory.check_memory`):
    ``variants`` are the engines the command loads, ``prompts`` the prompt texts, ``n_decode`` the decode tokens
    after each (or ``positions``: the longest run's, where the token ids are known); ``units``: the runs an option
    multiplies (:attr:`logitlab.experiments.memory.Footprint.units`); ``selected``: the ``--positions`` spec (the
    rows of each run kept count for what the command holds beyond the run itself).

    Raises:
        InputError: the run would not fit the available memory (one line: the expected peak, the available
            memory, the positions that would fit).
    """
    if not opts["memory_check"]:
        return
    from logitlab.engines import engine_class
    from logitlab.experiments.memory import check_memory as check
    from logitlab.experiments.positions import row_counter

    check(command, [(engine_class(v.engine), v.model, dict(v.options)) for v in variants], list(prompts), n_decode,
          positions=positions, units=units, selected=row_counter(selected, n_decode))


def detection_option(what: str, cost: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--detection-limit/--no-detection-limit`` (default on) into ``opts["detection"]``; ``what``: the
    comparison the faults are planted into; ``cost``: what it costs."""
    return click.option("--detection-limit/--no-detection-limit", "detection", default=True, show_default=True,
                        help=f"Plant standard faults into a copy of {what} and report the smallest that would "
                             f"have read divergent ({cost}).")


def threshold_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Verdict thresholds (``--max-ulp``, ``--near-tie-margin``, ``--offset-ratio``, ``--floor-factor``,
    ``--outlier-z``, ``--min-positions``, ``--fixed-thresholds``, ``--top-k``)."""
    defaults = Thresholds()
    options = [
        click.option("--max-ulp", type=float, default=defaults.max_ulp, show_default=True,
                     help="ulp-noise: largest |Δ| in ULPs at the row's scale."),
        click.option("--near-tie-margin", type=float, default=defaults.near_tie_margin, show_default=True,
                     help="near-tie: flips at a reference top1–top2 margin (logits) below this; at or above it, "
                          "a flip inside the noise floor is lossy (without a floor: divergent)."),
        click.option("--offset-ratio", type=float, default=defaults.offset_ratio, show_default=True,
                     help="systematic-offset: the positions' mean Δ averages at least this many of its standard "
                          "deviations across positions."),
        click.option("--floor-factor", type=float, default=defaults.floor_factor, show_default=True,
                     help="a position whose top-k Δ spread exceeds this many times the pair's noise floor (p99 "
                          "over the positions that kept their argmax), or whose whole row's Δ sd exceeds this many "
                          "times the p99 of the rows' Δ sd, is divergent."),
        click.option("--outlier-z", type=float, default=defaults.outlier_z, show_default=True,
                     help="a position with one logit this many sd of its own row's Δ from the row's mean Δ (a "
                          "within-row outlier) is divergent."),
        click.option("--min-positions", type=int, default=defaults.min_positions, show_default=True,
                     help="fewest positions for a noise floor and for a systematic offset."),
        click.option("--fixed-thresholds", is_flag=True, default=False,
                     help="judge with the fixed thresholds only, not against the pair's noise floor."),
        click.option("--top-k", type=int, default=5, show_default=True, help="k of the top-k set agreement."),
    ]
    return apply_options(func, options)


def thresholds_from(opts: dict[str, Any]) -> Thresholds:
    """Build Thresholds from the options of :func:`threshold_options`.

    Raises:
        InputError: a threshold out of range (the message names it).
    """
    names = ("max_ulp", "near_tie_margin", "offset_ratio", "floor_factor", "outlier_z", "min_positions")
    values = {name: opts[name] for name in names}
    check_thresholds(values, options={name: "--" + name.replace("_", "-") for name in names})
    return Thresholds(**values, calibrate=not opts["fixed_thresholds"])
