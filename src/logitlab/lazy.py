"""Lazy package attributes (PEP 562): a package's public names, each imported from its module on first access.

``logitlab.numerics`` and ``logitlab.perf`` list ``{public name: defining
module}`` and take their module-level
``__getattr__`` and ``__dir__`` from :func:`lazy_exports`, so that importing a
light module of the package (the CLI's option choices) does not load the heavy
ones (numpy, numba, scipy) that other names of the package need.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``) for the names of ``exports``.

    ``__getattr__(name)`` imports ``exports[name]``, caches the value in the
    package's namespace (so the next access is a plain lookup) and returns it;
    a name not in ``exports`` raises ``AttributeError``, as a missing attribute does.
    """
    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
