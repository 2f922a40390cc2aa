"""The floor plan, checked: imports point one way, and only engines/ knows concrete engines.

Layers, left to right (DESIGN.md): the package root (errors, jsonio, manifest,
models, events, tools) → engines → numerics → perf → dumps → experiments →
report → cli. A module may import from its own layer and layers to its left,
never to its right — at module level or inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import logitlab
from logitlab.engines import ENGINES

PACKAGE = Path(logitlab.__file__).resolve().parent
LAYERS = ("", "engines", "numerics", "perf", "dumps", "experiments", "report", "cli")
#: engine adapter modules: only engines/ and an engine's own capture module may import one — every registered
#: engine's module (so a new engine is covered by its ENGINES line) and the modules only adapters use
ADAPTERS = {target.partition(":")[0].split(".")[2] for target in ENGINES.values()
            if target.startswith("logitlab.engines.")} | {"llamacpp_batch", "servers"}
#: what numerics may use of the engine layer: the contract of top-k rows, nothing else
NUMERICS_FROM_ENGINES = {"logitlab.engines.topk"}


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(["logitlab", *parts]), path))
    return out


def _layer(module: str) -> int:
    if module in ("logitlab.__main__", "logitlab.pytest_plugin"):  # entry points: the outermost layer
        return LAYERS.index("cli")
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return 0  # package root


def _imports(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every logitlab import in the file, lazy ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "logitlab"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "logitlab":
                continue
            # "from logitlab.engines import hf" imports a module: count the submodule
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if (PACKAGE / Path(*sub.split(".")[1:])).with_suffix(".py").exists()
                              or (PACKAGE / Path(*sub.split(".")[1:]) / "__init__.py").exists() else target))
    return found


MODULES = _modules()


def test_every_module_is_in_a_layer():
    for module, _ in MODULES:
        parts = module.split(".")
        if len(parts) > 2:
            assert parts[1] in LAYERS, f"{module}: package {parts[1]!r} is not a layer of DESIGN.md"


@pytest.mark.parametrize("module, path", MODULES, ids=[m for m, _ in MODULES])
def test_imports_point_one_way(module, path):
    mine = _layer(module)
    bad = [f"line {line}: {target} ({LAYERS[_layer(target)] or 'root'})"
           for line, target in _imports(module, path) if _layer(target) > mine]
    assert not bad, f"{module} ({LAYERS[mine] or 'root'}) imports from a layer to its right: " + "; ".join(bad)


@pytest.mark.parametrize("module, path", MODULES, ids=[m for m, _ in MODULES])
def test_only_engines_know_concrete_engines(module, path):
    layer = LAYERS[_layer(module)]
    name = module.rsplit(".", 1)[-1]
    bad = []
    for line, target in _imports(module, path):
        parts = target.split(".")
        if len(parts) < 3 or parts[1] != "engines" or parts[2] not in ADAPTERS or layer == "engines":
            continue
        own_capture = layer == "dumps" and name == f"capture_{parts[2]}"
        if not own_capture:
            bad.append(f"line {line}: {target}")
    assert not bad, f"{module} names a concrete engine outside engines/: " + "; ".join(bad)


@pytest.mark.parametrize("module, path", [(m, p) for m, p in MODULES if _layer(m) == LAYERS.index("numerics")],
                         ids=[m for m, _ in MODULES if _layer(m) == LAYERS.index("numerics")])
def test_numerics_use_only_the_engine_contract(module, path):
    bad = [f"line {line}: {target}" for line, target in _imports(module, path)
           if _layer(target) == LAYERS.index("engines") and target not in NUMERICS_FROM_ENGINES]
    assert not bad, f"{module} reaches into engines/ beyond the contract: " + "; ".join(bad)


def test_the_checker_sees_a_violation(tmp_path):
    """Inverse control: a lazy import to the right is found."""
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from logitlab.report.text import plural\n", encoding="utf-8")
    assert [t for _, t in _imports("logitlab.engines.x", path) if _layer(t) > 1] == ["logitlab.report.text"]
