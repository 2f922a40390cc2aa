"""Reading a sweep matrix file (TOML or JSON) into a :class:`~logitlab.experiments.sweep.matrix.Matrix`.

The format, in TOML::

    name = "flash-attn x n_ubatch"          # optional, shown in the report
    prompts = ["The lighthouse keeper ...", "def fib(n):"]
                                            # or [[prompts]] tables with name/text,
                                            # or "FILE" (JSONL or one per line), or
                                            # "builtin:default" / "builtin:calibration";
                                            # default: ab's built-in prose prompt

    [control]                               # every cell's control (verify: the base variant)
    engine = "llamacpp"                     # default llamacpp
    model = "models/q8_0.gguf"              # default: the engine's default model;
                                            # relative paths are relative to this file
    options = { n_threads = 1 }
    env = { GGML_SOME_KNOB = "0" }
    # or spec = "llamacpp:model.gguf?n_threads=1" (the --control grammar)

    [axes]                                  # candidate = control + one value of each axis
    options.flash_attn = [0, 1]             # an engine option
    options.n_ubatch = [512, 4]
    env.GGML_OTHER = ["0", "1", false]      # an environment knob; false: not set
    model = ["q4_1.gguf", "q2_k.gguf"]      # the candidate's model
    engine = ["llamacpp", "hf:?dtype=float32"]   # the candidate's engine (a --candidate spec)
    spec = ["flash_attn=1", "hf:"]          # whole --candidate specs: a list, not a product

    [shared_axes]                           # applied to control and candidate alike
    model = ["q4_1.gguf", "q8_0.gguf"]      # e.g. every model: its candidate vs its control

    [experiment]
    kind = "ab"                             # "ab", "verify" or "invariance-matrix"
    speed = false                           # ab: false = numerics only, true = timed blocks
    tokens = 32                             # greedy decode tokens per prompt
    repeats = 5                             # ab with speed: ABBA/BAAB blocks, or "auto"
    ks = [1, 2, 4, 8]                       # verify: block sizes K
    axes = ["determinism", "batch"]         # invariance-matrix: its axes (and runs, max_batch)

    [resources]                             # per job, read by the executors
    num_cpus = 1
    num_gpus = 0
    keep_engines = 2                        # engines a worker keeps loaded between jobs

    [ray]                                   # ray executor only
    runtime_env = { env_vars = { HF_HOME = "/data/hf" } }

An axis value that is the control's own value gives an A/A cell (the
candidate is the control). ``ab`` numerics only (``speed = false``) runs one
ABBA block without warmup: the reference, one A/A control run and two
candidate runs; the report gives no speed call. ``ab`` with speed runs
``warmup`` untimed runs per variant and ``repeats`` blocks, and the summary
pools every prompt's blocks of a cell into one paired speed comparison. The
two arms of an A/B always run in one job, on one worker and device: the
executors distribute cells and prompts, never the arms of one comparison.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from logitlab.engines import DEFAULT_ENGINE, engine_class
from logitlab.engines.variant import Variant, parse_variant
from logitlab.errors import InputError
from logitlab.experiments.isolation import ISOLATION_LEVELS
from logitlab.experiments.sweep.matrix import (AXIS_KINDS, EXPERIMENT_KINDS, PLACEMENT_STRATEGIES, Axis,
                                         ExperimentSettings, Matrix, Resources, absolute_path)
from logitlab.experiments.prompts import DEFAULT_PROMPT, Prompt, builtin_prompts, check_unique, load_prompts
from logitlab.jsonio import json_error_text, read_text

__all__ = ["load_matrix", "parse_matrix"]

_TOP_KEYS = ("name", "control", "axes", "shared_axes", "prompts", "experiment", "resources", "ray")
_VARIANT_KEYS = ("engine", "model", "options", "env", "spec")
#: Settings that only one experiment kind (or ``ab`` with speed) reads.
_ONLY = {"ks": "verify", "speed": "ab", "repeats": "ab", "max_repeats": "ab", "max_time": "ab", "warmup": "ab",
         "isolation": "ab", "escalate": "ab", "randomize": "ab", "margin": "ab", "axes": "invariance-matrix",
         "runs": "invariance-matrix", "max_batch": "invariance-matrix"}
_SPEED_ONLY = ("repeats", "max_repeats", "max_time", "warmup", "randomize", "margin")


# -- parsing ---------------------------------------------------------------------------
def load_matrix(path: str | Path) -> Matrix:
    """Read a matrix file: ``.toml``, or ``.json`` (anything else is read as TOML, then JSON).

    Raises:
        InputError: missing or unreadable file, a syntax error (with its line),
            or a matrix that :func:`parse_matrix` rejects.
    """
    path = Path(path)
    text = read_text(path, what="matrix file")
    data = _parse_text(text, path)
    return parse_matrix(data, base=path.parent, source=str(path))


def _parse_text(text: str, path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    if path.suffix.lower() == ".json" or (path.suffix.lower() != ".toml" and text.lstrip().startswith("{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"matrix file {path} is not valid JSON: {json_error_text(exc)}") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"matrix file {path} is not valid TOML: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"matrix file {path} must hold a table (a JSON object), not a {type(data).__name__}")
    return data


def parse_matrix(data: Mapping[str, Any], *, base: str | Path = ".", source: str = "") -> Matrix:
    """Build a :class:`Matrix` from the file's data (see the module docstring).

    ``base``: the folder relative model and prompt paths are relative to.

    Raises:
        InputError: an unknown key (the message lists the valid ones), a value of
            the wrong type, an empty axis, no axes, or settings the experiment
            would reject (unknown engine, engine option or isolation level,
            ``tokens`` < 1, ...).
    """
    base = Path(base)
    _check_keys(data, _TOP_KEYS, "the matrix")
    name = str(data.get("name") or (Path(source).stem if source else "sweep"))
    control = _control(data.get("control", {}), base)
    axes = _axes(data.get("shared_axes", {}), base, shared=True) + _axes(data.get("axes", {}), base, shared=False)
    if not axes:
        raise InputError("the matrix has no axes: add an [axes] table, e.g. options.flash_attn = [0, 1]")
    names = [axis.name for axis in axes]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise InputError(f"two axes are named {twice!r} (in [axes] and [shared_axes], or as an option and an "
                         "environment knob): give each axis once")
    experiment = _experiment(data.get("experiment", {}))
    resources = _resources(data.get("resources", {}))
    ray = _table(data.get("ray", {}), "[ray]")
    _check_keys(ray, ("runtime_env",), "[ray]")
    prompts = _prompts(data.get("prompts"), base)
    matrix = Matrix(name=name, control=control, axes=tuple(axes), prompts=tuple(prompts), experiment=experiment,
                    resources=resources, ray=dict(ray), source=source, base=str(base))
    _validate(matrix)
    return matrix


def _check_keys(table: Mapping[str, Any], valid: Sequence[str], where: str) -> None:
    unknown = [k for k in table if k not in valid]
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r} in {where}; valid keys: {', '.join(valid)}")


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(f"{where} must be a table (a JSON object), got {type(value).__name__}")
    return value


def _text(value: Any, where: str) -> str:
    """An option or knob value as the command line would give it: a string."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    raise InputError(f"{where}: expected a string, number or boolean, got {value!r}")


def _model_path(value: Any, base: Path, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: a model is a non-empty path string, got {value!r}")
    return absolute_path(value, base)


def _control(table: Any, base: Path) -> Variant:
    table = _table(table, "[control]")
    _check_keys(table, _VARIANT_KEYS, "[control]")
    if "spec" in table:
        extra = [k for k in table if k != "spec"]
        if extra:
            raise InputError(f"[control] gives spec and {extra[0]!r}: put everything in the spec, or leave it out")
        variant = parse_variant(_spec_text(table["spec"], "[control] spec"), "control",
                                default_engine=DEFAULT_ENGINE, option="[control] spec")
        return _resolve_model(variant, base)
    engine = table.get("engine", DEFAULT_ENGINE)
    if not isinstance(engine, str) or not engine.strip():
        raise InputError(f"[control] engine must be an engine name, got {engine!r}")
    variant = parse_variant(f"{engine}:" if ":" not in engine else engine, "control", default_engine=DEFAULT_ENGINE,
                            option="[control] engine")
    model = _model_path(table["model"], base, "[control] model") if "model" in table else variant.model
    options = {**variant.options, **{str(k): _text(v, f"[control] options.{k}")
                                     for k, v in _table(table.get("options", {}), "[control] options").items()}}
    env = {str(k): _env_value(v, f"[control] env.{k}", allow_unset=False)
           for k, v in _table(table.get("env", {}), "[control] env").items()}
    return Variant(label="control", engine=variant.engine, model=model, options=options, env=env)


def _spec_text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{where}: a spec is a string like 'flash_attn=1' or 'hf:', got {value!r}")
    return value


def _resolve_model(variant: Variant, base: Path) -> Variant:
    if variant.model is None:
        return variant
    return replace(variant, model=absolute_path(variant.model, base))


def _env_value(value: Any, where: str, *, allow_unset: bool) -> str | None:
    if value is False and allow_unset:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    return _text(value, where)


def _axes(table: Any, base: Path, *, shared: bool) -> list[Axis]:
    section = "[shared_axes]" if shared else "[axes]"
    table = _table(table, section)
    nested: dict[str, Any] = {}
    for key, value in table.items():  # JSON may write "options.flash_attn" as one key
        kind, dot, name = str(key).partition(".")
        if dot and kind in ("options", "env"):
            nested.setdefault(kind, {})[name] = value
        elif key in ("options", "env") and isinstance(value, Mapping):
            nested.setdefault(key, {}).update(value)
        else:
            nested[key] = value
    axes = []
    for kind, value in nested.items():
        if kind not in AXIS_KINDS:
            raise InputError(f"unknown axis {kind!r} in {section}; axes: options.NAME, env.NAME, model, engine, spec")
        if shared and kind == "spec":
            raise InputError(f"{section} cannot hold spec (a spec names a whole candidate): use [axes]")
        if kind in ("options", "env"):
            for name, values in _table(value, f"{section} {kind}").items():
                where = f"{section} {kind}.{name}"
                items = _values(values, where)
                if kind == "options":
                    axes.append(Axis(kind, str(name), tuple(_text(v, where) for v in items), shared))
                else:
                    axes.append(Axis(kind, str(name), tuple(_env_value(v, where, allow_unset=True)
                                                            for v in items), shared))
        else:
            where = f"{section} {kind}"
            items = _values(value, where)
            if kind == "model":
                axes.append(Axis(kind, "", tuple(_model_path(v, base, where) for v in items), shared))
            else:
                axes.append(Axis(kind, "", tuple(_spec_text(v, where) for v in items), shared))
    for axis in axes:
        if len(set(axis.values)) != len(axis.values):
            raise InputError(f"{section} {axis.name} lists a value twice: {list(axis.values)}")
    return axes


def _values(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InputError(f"{where}: an axis is a list of values, got {value!r}")
    if not value:
        raise InputError(f"{where}: the axis is empty; give at least one value")
    return value


def _experiment(table: Any) -> ExperimentSettings:
    table = dict(_table(table, "[experiment]"))
    valid = [f for f in ExperimentSettings.__dataclass_fields__]
    _check_keys(table, valid, "[experiment]")
    kind = table.get("kind", "ab")
    if kind not in EXPERIMENT_KINDS:
        raise InputError(f"[experiment] kind {kind!r} is not one of {', '.join(EXPERIMENT_KINDS)}")
    for key in table:
        if _ONLY.get(key, kind) != kind:
            raise InputError(f"[experiment] {key} is a setting of {_ONLY[key]}, not of {kind}")
    if kind == "ab" and not table.get("speed", False):
        timed = [k for k in _SPEED_ONLY if k in table]
        if timed:
            raise InputError(f"[experiment] {timed[0]} needs speed = true (numerics only runs one untimed-call "
                             "ABBA block)")
    types = {"speed": bool, "escalate": bool, "randomize": bool, "tokens": int, "max_repeats": int, "warmup": int,
             "seed": int, "top_k": int, "kind": str, "isolation": str, "runs": int, "max_batch": int}
    for key, typ in types.items():
        if key in table and (not isinstance(table[key], typ) or typ is int and isinstance(table[key], bool)):
            raise InputError(f"[experiment] {key} must be {'a' if typ is not int else 'an'} {typ.__name__}, "
                             f"got {table[key]!r}")
    for key in ("max_time", "margin", "max_ulp", "near_tie_margin", "offset_ratio"):
        if key in table and (isinstance(table[key], bool) or not isinstance(table[key], (int, float))):
            raise InputError(f"[experiment] {key} must be a number, got {table[key]!r}")
    if "repeats" in table:
        repeats = table["repeats"]
        if repeats != "auto" and (isinstance(repeats, bool) or not isinstance(repeats, int)):
            raise InputError(f"[experiment] repeats must be a number of blocks or \"auto\", got {repeats!r}")
    if "ks" in table:
        ks = table["ks"]
        if not isinstance(ks, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in ks):
            raise InputError(f"[experiment] ks must be a list of integers, got {ks!r}")
        table["ks"] = tuple(ks)
    if "axes" in table:
        axes = table["axes"]
        if not isinstance(axes, list) or not all(isinstance(a, str) for a in axes):
            raise InputError(f"[experiment] axes must be a list of invariance axes, got {axes!r}")
        table["axes"] = tuple(axes)
    if table.get("isolation", "session") not in ISOLATION_LEVELS:
        raise InputError(f"[experiment] isolation {table['isolation']!r} is not one of {', '.join(ISOLATION_LEVELS)}")
    settings = ExperimentSettings(**table)
    if kind == "ab" and not settings.speed:
        settings = replace(settings, repeats=1, warmup=0)
    return settings


def _resources(table: Any) -> Resources:
    table = _table(table, "[resources]")
    _check_keys(table, list(Resources.__dataclass_fields__), "[resources]")
    values: dict[str, Any] = {}
    for key in ("num_cpus", "num_gpus"):
        if key in table:
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InputError(f"[resources] {key} must be a number >= 0, got {value!r}")
            values[key] = float(value)
    if "keep_engines" in table:
        value = table["keep_engines"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"[resources] keep_engines must be an integer >= 0, got {value!r}")
        values["keep_engines"] = value
    if "bundles" in table:
        bundles = table["bundles"]
        if not isinstance(bundles, list) or not bundles or not all(
                isinstance(b, Mapping) and b and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                     and v >= 0 for v in b.values()) for b in bundles):
            raise InputError("[resources] bundles must be a non-empty list of tables of resource amounts, e.g. "
                             f"[{{GPU = 1}}, {{GPU = 1}}]; got {bundles!r}")
        values["bundles"] = tuple(dict(b) for b in bundles)
    if "strategy" in table:
        if table["strategy"] not in PLACEMENT_STRATEGIES:
            raise InputError(f"[resources] strategy {table['strategy']!r} is not one of "
                             f"{', '.join(PLACEMENT_STRATEGIES)}")
        values["strategy"] = table["strategy"]
    resources = Resources(**values)
    if resources.bundles:
        first = resources.bundles[0]
        for key, need in (("CPU", resources.num_cpus), ("GPU", resources.num_gpus)):
            if need > first.get(key, 0):
                raise InputError(f"[resources] the job runs in bundle 0 of the placement group: it needs "
                                 f"{key} = {need:g} there, bundle 0 has {first.get(key, 0)!r}")
    return resources


def _prompts(value: Any, base: Path) -> list[Prompt]:
    if value is None:
        return [Prompt("prose", DEFAULT_PROMPT, "prose")]
    if isinstance(value, str):
        if value.startswith("builtin:"):
            return builtin_prompts(value.partition(":")[2])
        path = Path(value).expanduser()
        return load_prompts(path if path.is_absolute() else base / path)
    if not isinstance(value, list) or not value:
        raise InputError("prompts must be a non-empty list (of texts or of {name, text} tables), a file path, or "
                         f"\"builtin:default\"; got {value!r}")
    out = []
    for number, item in enumerate(value, 1):
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, Mapping):
            raise InputError(f"prompt {number}: expected a text or a {{name, text}} table, got {item!r}")
        _check_keys(item, ("name", "text", "kind"), f"prompt {number}")
        text = item.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"prompt {number}: needs a non-empty text")
        out.append(Prompt(str(item.get("name") or f"prompt-{number}"), text, str(item.get("kind", ""))))
    check_unique(out)
    return out


def _validate(matrix: Matrix) -> None:
    """What the experiments would reject, found before any job runs (exit 2, nothing started)."""
    exp = matrix.experiment
    cells = matrix.cells()
    checked: set[tuple[str, tuple]] = set()
    for cell in cells:
        for variant in (cell.control, cell.candidate):
            key = (variant.engine, tuple(sorted(variant.options.items())))
            if key in checked:
                continue
            checked.add(key)
            try:
                cls = engine_class(variant.engine)
            except InputError as exc:
                if "not installed" in str(exc):
                    continue  # the workers may have it (a cluster's nodes); they report it if not
                raise
            try:
                cls.validate_options(variant.options)
            except InputError as exc:
                raise InputError(f"cell {cell.label!r}: {exc}") from None
    try:
        _validate_experiment(exp, cells[0], matrix.prompts)
    except InputError as exc:
        raise InputError(f"matrix [experiment]: {exc}") from None


#: The ``[experiment]`` key of each setting of the experiments' configs, as their checks name it (instead of the
#: CLI option: ``tokens``, not ``--tokens``).
_EXPERIMENT_KEYS = {"n_decode": "tokens", **{key: key for key in ("repeats", "warmup", "top_k", "max_repeats",
                                                                  "max_time", "margin", "runs", "max_batch", "ks")}}


def _validate_experiment(exp: Any, first: Any, prompts: Any) -> None:
    """The experiment's own checks of its configuration, on the first cell's variants (raise InputError naming
    the ``[experiment]`` key)."""
    from logitlab.experiments.ab_config import AbConfig
    from logitlab.experiments.verify.config import VerifyConfig

    if exp.kind == "ab":
        AbConfig(control=first.control, candidate=first.candidate, prompt=prompts[0].text,
                 n_decode=exp.tokens, repeats=exp.repeats, warmup=exp.warmup, isolation=exp.isolation,
                 randomize=exp.randomize, seed=exp.seed, escalate=exp.escalate, top_k=exp.top_k,
                 thresholds=exp.thresholds, margin=exp.margin, max_repeats=exp.max_repeats,
                 max_time=exp.max_time).validate(_EXPERIMENT_KEYS)
    elif exp.kind == "verify":
        VerifyConfig(variant=first.candidate, prompts=prompts, ks=exp.ks, n_decode=exp.tokens,
                     top_k=exp.top_k, thresholds=exp.thresholds).validate(_EXPERIMENT_KEYS)
    else:
        from logitlab.experiments.sweep.job import matrix_config

        matrix_config(exp, first.candidate, prompts).validate(_EXPERIMENT_KEYS)
