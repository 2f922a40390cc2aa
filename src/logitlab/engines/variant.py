"""Variant specs: an engine, a model, engine options and environment knobs.

Grammar of a spec string (``--control`` / ``--candidate``)::

    [ENGINE:][MODEL][?KEY=VALUE[&KEY=VALUE...]]     llamacpp:model.gguf?flash_attn=1
    KEY=VALUE[,KEY=VALUE...]                        n_ubatch=4,flash_attn=1
    ENGINE:                                          hf:   (engine's defaults)
    ENGINE:TARGET[?KEY=VALUE...]                     openai:http://127.0.0.1:8080/v1

For engines with a target option (``cmd``: the command template, ``openai``:
the server URL; see ``Engine.TARGET_OPTION``) the text after ``ENGINE:`` is
that target, not a model. ``default_engine`` may be ``NAME:TARGET[?K=V&...]``
too (``--engine 'cmd:./my-engine --tokens {tokens} --logits {logits}'``); its
target and options apply to variants of that engine unless their spec gives
its own (a target must not contain ``?``).

Environment knobs (``--candidate-env NAME[=VALUE]``): ``NAME`` alone sets it to
``1``, as the seed report's ``--candidate-env DS4_METAL_DISABLE_INDEXER_LLT``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logitlab.engines import canonical_engine_name, engine_class, known_engines
from logitlab.errors import InputError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: What may be an engine name before ``:`` in a spec (``llamacpp``, ``llama.cpp``, ``hf-transformers``).
_ENGINE_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class Variant:
    """One side of a comparison.

    Attributes:
        label: ``"control"`` or ``"candidate"``.
        engine: registered engine name.
        model: model path (None: the engine's default, the embedded model).
        options: engine options as given (strings until the engine converts them).
        env: environment knobs set for this variant's slots.
    """

    label: str
    engine: str
    model: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.options.items()]
        parts += [f"env {k}={v}" for k, v in self.env.items()]
        return f"{self.engine}" + (f" ({', '.join(parts)})" if parts else " (defaults)")

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "engine": self.engine, "model": self.model,
                "options": dict(self.options), "env": dict(self.env)}


def parse_options(text: str, separators: str = ",&") -> dict[str, str]:
    """Parse ``k=v,k=v`` (or ``&``-separated) into a dict of strings.

    Raises:
        InputError: an item without ``=``, with an empty key, or a key given twice.
    """
    options: dict[str, str] = {}
    for item in re.split(f"[{re.escape(separators)}]", text):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"bad option {item!r}: expected KEY=VALUE")
        if key.strip() in options:
            raise InputError(f"option {key.strip()!r} given twice in {text!r}: give each option once")
        options[key.strip()] = value.strip()
    return options


def parse_env(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Parse ``NAME[=VALUE]`` knobs; ``NAME`` alone means ``NAME=1``.

    Raises:
        InputError: a name that is not a valid environment variable name, or a name given twice.
    """
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not _ENV_NAME.match(name):
            raise InputError(f"bad environment knob {item!r}: expected NAME or NAME=VALUE")
        if name in env:
            raise InputError(f"environment knob {name!r} given twice ({name}={env[name]}, {item}): give each "
                             "knob once")
        env[name] = value if sep else "1"
    return env


def _looks_like_options(text: str) -> bool:
    return "=" in text and "/" not in text.split("=", 1)[0] and not text.endswith(".gguf")


def parse_variant(
    text: str | None,
    label: str,
    *,
    default_engine: str,
    default_model: str | None = None,
    env: dict[str, str] | None = None,
    option: str | None = None,
) -> Variant:
    """Parse a variant spec string (see the module docstring).

    ``option`` names the spec's command-line option in messages (default ``--LABEL``).

    Raises:
        InputError: malformed or repeated options, or ``NAME:`` naming no engine (and no existing path).
    """
    text = (text or "").strip()
    engine, default_target = _split_engine(default_engine)
    default_target, _, default_query = default_target.partition("?")
    model, options, target = default_model, {}, ""
    prefix, colon, rest = text.partition(":")
    if colon and canonical_engine_name(prefix) is None:
        _reject_unknown_engine(prefix, text, option or f"--{label}")
    elif colon:
        spec_engine, text = canonical_engine_name(prefix), rest
        if _target_option(spec_engine) is not None:
            target, sep, query = text.partition("?")
            target, text = target.strip(), sep + query
        if spec_engine != engine:
            default_target = default_query = ""
        engine = spec_engine
    target = target or default_target
    if "?" in text:
        path, _, query = text.partition("?")
        model = path or model
        options = parse_options(query)
    elif _looks_like_options(text):
        options = parse_options(text)
    elif text:
        model = text
    if default_query:
        options = {**parse_options(default_query), **options}
    if target:
        key = _target_option(engine)
        if key is None:
            model = model or target
        else:
            options = {key: target, **options}
    return Variant(label=label, engine=engine, model=model, options=options, env=dict(env or {}))


def _reject_unknown_engine(prefix: str, text: str, option: str) -> None:
    """Raise when ``text`` starts with ``NAME:`` and is no existing path (a model path may hold a colon)."""
    if _ENGINE_PREFIX.match(prefix) and not Path(text.partition("?")[0]).exists():
        raise InputError(f"unknown engine {prefix!r} in {option} spec {text!r} (engines: {known_engines()}); "
                         "a model path with ':' must exist")


def _split_engine(text: str) -> tuple[str, str]:
    """``NAME:TARGET`` -> (registered name, target); a bare or unknown name -> (text, "")."""
    name, colon, target = text.partition(":")
    if colon and canonical_engine_name(name) is not None:
        return canonical_engine_name(name), target.strip()
    return text, ""


def _target_option(engine: str) -> str | None:
    """The option ``ENGINE:TARGET`` fills, or None (TARGET is the model); None if the adapter cannot load."""
    try:
        return getattr(engine_class(engine), "TARGET_OPTION", None)
    except InputError:
        return None
