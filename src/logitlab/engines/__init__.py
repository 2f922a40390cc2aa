"""Engine registry: names and aliases map to lazily imported adapter classes.

``import logitlab`` imports no engine library; an adapter module is imported
only when its engine is first asked for (as lm-evaluation-harness's
``MODEL_MAPPING`` does). Third-party engines register through the entry-point
group ``logitlab.engines`` (``name = "module:Class"``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from logitlab.errors import InputError

if TYPE_CHECKING:
    from logitlab.engines.base import Engine, Session, StepTiming


def __getattr__(name: str) -> Any:
    """``Engine``, ``Session``, ``StepTiming`` load with :mod:`logitlab.engines.base` (numpy) on first use (PEP 562),
    so that ``DEFAULT_ENGINE`` and the registry cost no numpy (the CLI's help)."""
    if name in ("Engine", "Session", "StepTiming"):
        from logitlab.engines import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: canonical name -> "module:Class"
ENGINES: dict[str, str] = {
    "llamacpp": "logitlab.engines.llamacpp:LlamaCppEngine",
    "cmd": "logitlab.engines.command:CommandEngine",
    "openai": "logitlab.engines.openai:OpenAIEngine",
    "hf": "logitlab.engines.hf:HfEngine",
    "ortgenai": "logitlab.engines.ortgenai:OrtGenAiEngine",
}
ALIASES: dict[str, str] = {"llama.cpp": "llamacpp", "llama_cpp": "llamacpp", "llama-cpp": "llamacpp",
                           "command": "cmd", "openai-compatible": "openai"}
ALIASES.update({"transformers": "hf", "huggingface": "hf", "hf-transformers": "hf"})
ALIASES.update({"onnxruntime-genai": "ortgenai", "ort-genai": "ortgenai", "onnxruntime_genai": "ortgenai",
                "ort_genai": "ortgenai"})
DEFAULT_ENGINE = "llamacpp"


def register_engine(name: str, target: str, *aliases: str) -> None:
    """Register an adapter ``"module:Class"`` under ``name`` and aliases.

    Raises:
        InputError: a name or alias is already taken by another engine.
    """
    for key in (name, *aliases):
        taken = ENGINES.get(key) or ENGINES.get(ALIASES.get(key, ""))
        if taken and taken != target:
            raise InputError(f"engine name {key!r} is already registered to {taken}")
    ENGINES[name] = target
    ALIASES.update({alias: name for alias in aliases})


def _load_entry_points() -> None:
    from importlib.metadata import entry_points  # 26 ms: only when a name is not registered here

    for ep in entry_points(group="logitlab.engines"):
        if ep.name not in ENGINES:
            ENGINES[ep.name] = ep.value


def canonical_engine_name(name: str) -> str | None:
    """The registered name for ``name`` or an alias of it, else None."""
    if name in ENGINES:
        return name
    if name in ALIASES:
        return ALIASES[name]
    _load_entry_points()
    return name if name in ENGINES else None


def known_engines() -> str:
    """The registered engine names, sorted and comma-separated (for error messages)."""
    _load_entry_points()
    return ", ".join(sorted(ENGINES))


def engine_class(name: str) -> type[Engine]:
    """Import and return the adapter class registered as ``name``.

    Raises:
        InputError: unknown name (the message lists the valid ones), or the
            engine's optional dependency is not installed.
    """
    canonical = canonical_engine_name(name)
    if canonical is None:
        raise InputError(f"unknown engine {name!r}; valid engines: {known_engines()}")
    return import_engine(ENGINES[canonical], canonical)


def registered_engines() -> list[tuple[str, type[Engine]]]:
    """(name, adapter class) of every registered engine whose adapter imports (entry points included), in
    registry order. Imports each adapter module, none of the engines' libraries."""
    _load_entry_points()
    found = []
    for name, target in ENGINES.items():
        try:
            found.append((name, import_engine(target, name)))
        except InputError:  # its optional dependency is missing
            continue
    return found


def engines_with(ability: str) -> list[str]:
    """Sorted names of the registered engines that declare ``ability`` (those whose package is installed)."""
    return sorted(name for name, adapter in registered_engines() if adapter.supports(ability))


def engine_target(name: str) -> str:
    """The ``"module:Class"`` registered for ``name`` (so a subprocess can import it without the registry).

    Raises:
        InputError: unknown name.
    """
    engine_class(name)
    return ENGINES[canonical_engine_name(name)]


def import_engine(target: str, name: str | None = None) -> type[Engine]:
    """Import an adapter class from ``"module:Class"``.

    Raises:
        InputError: the module (or the engine's optional dependency) cannot be imported.
    """
    module_name, class_name = target.split(":")
    canonical = name or module_name
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(
            f"engine {canonical!r} needs a package that is not installed ({exc.name}): "
            f"pip install 'logitlab[{canonical}]'"
        ) from None
    return getattr(module, class_name)


__all__ = [
    "ALIASES",
    "DEFAULT_ENGINE",
    "ENGINES",
    "Engine",
    "Session",
    "StepTiming",
    "canonical_engine_name",
    "engine_class",
    "engine_target",
    "engines_with",
    "import_engine",
    "known_engines",
    "register_engine",
    "registered_engines",
]
