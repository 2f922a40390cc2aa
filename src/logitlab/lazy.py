"""Lazy package attributes (PEP 562): a package's public names, each imported from its module on first access.

``logitlab.numerics`` and ``logitlab.perf`` list ``{defining module: public
names}`` once and take their module-level ``__getattr__``, ``__dir__`` and
``__all__`` from :func:`lazy_exports`, so that importing a light module of
the package (the CLI's option choices) does not load the heavy ones (numpy,
numba, scipy) that other names of the package need.

The statistics import SciPy inside their functions for the same reason; a run
imports it ahead with :func:`preload_statistics`, before its first timed slot,
so that a Ctrl-C cannot land inside that import (see there).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Iterable, Mapping

__all__ = ["STATISTICS_MODULES", "lazy_exports", "preload_statistics"]

#: What the analysis of a run imports inside its functions (``from scipy import stats`` in perf/ and numerics/,
#: ``scipy.special`` in the KL divergence): ~0.3-0.5 s on first use.
STATISTICS_MODULES = ("scipy.stats", "scipy.special")


def lazy_exports(package: str, modules: Mapping[str, Iterable[str]],
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The ``__getattr__``, ``__dir__`` and ``__all__`` of ``package`` (its ``__name__``) for the names of ``modules``.

    ``modules`` maps a defining module to the public names the package takes
    from it. ``__getattr__(name)`` imports the name's module, caches the value
    in the package's namespace (so the next access is a plain lookup) and
    returns it; a name not listed raises ``AttributeError``, as a missing
    attribute does. ``__all__`` is every listed name, in the order given.

    Raises:
        ValueError: a name listed under two modules.
    """
    exports: dict[str, str] = {}
    for module, names in modules.items():
        for name in names:
            if name in exports:
                raise ValueError(f"{package}: {name!r} is listed under {exports[name]} and {module}")
            exports[name] = module

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__, list(exports)


def preload_statistics() -> None:
    """Import :data:`STATISTICS_MODULES` now, before a run measures anything.

    A Ctrl-C that lands inside an import leaves the package half initialised:
    SciPy's ``scipy.ndimage`` (which ``scipy.stats`` imports) then fails its
    next import with ``NameError: name '_ndimage_api' is not defined``, so the
    analysis of the partial result that an interrupted run owes its user
    raised instead (seen in ``bisect --probe speed``: SIGINT during the first
    sequential look's ``from scipy import stats``, exit 1 and a traceback
    instead of 130). Imported ahead, a Ctrl-C in a slot finds them loaded; one
    during this call stops the run before anything was measured.

    Raises:
        KeyboardInterrupt: Ctrl-C while importing (nothing measured yet).
    """
    for name in STATISTICS_MODULES:
        importlib.import_module(name)
