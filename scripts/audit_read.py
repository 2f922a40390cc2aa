"""Reading the tests without running them: modules, their functions, helpers, markers, parametrize rows.

Shared by ``scripts/audit_tests.py`` (the audit) and ``scripts/audit_exit_codes.py`` (its exit-code matrix).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


# -- reading the tests --------------------------------------------------------------------------------------------
@dataclass
class Module:
    path: Path
    tree: ast.Module
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # module-level and class methods
    constants: dict[str, ast.expr] = field(default_factory=dict)  # NAME = <expr> at module level
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name)

    @property
    def rel(self) -> str:
        return str(self.path.relative_to(ROOT))


def read_modules() -> dict[Path, Module]:
    modules = {}
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        module = Module(path, tree)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                module.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        module.functions.setdefault(item.name, item)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                module.constants[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                module.constants[node.target.id] = node.value
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = (node.module, alias.name)
        modules[path] = module
    return modules


def module_index(modules: dict[Path, Module]) -> dict[str, Module]:
    """Import name -> module, as the tests import each other (``conftest``, ``report.roundtrip_tools``, ...)."""
    index = {}
    for path, module in modules.items():
        parts = path.relative_to(TESTS).with_suffix("").parts
        for start in range(len(parts)):
            index.setdefault(".".join(parts[start:]), module)
        index.setdefault("tests." + ".".join(parts), module)
    return index


def test_functions(module: Module) -> list[tuple[ast.FunctionDef, list[ast.expr]]]:
    """The test functions of a test module, each with the decorators of its class (for markers)."""
    found = []
    for node in module.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found.append((node, []))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found += [(item, node.decorator_list) for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test")]
    return found


def call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def helper(module: Module, name: str, index: dict[str, Module]) -> tuple[Module, ast.FunctionDef] | None:
    """The function ``name`` called in ``module``: its own, or one imported from a tests/ module."""
    if name in module.functions:
        return module, module.functions[name]
    if name in module.imports:
        source, real = module.imports[name]
        other = index.get(source.lstrip("."))
        if other is not None and real in other.functions:
            return other, other.functions[real]
    return None


# -- markers and parametrize rows ------------------------------------------------------------------------------
def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return dotted(node.func)
    return ""


def marks_in(node: ast.AST, module: Module) -> set[str]:
    """The marker names in a decorator, a ``pytestmark`` value or a ``marks=`` value."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(marks_in(e, module) for e in node.elts)) if node.elts else set()
    if isinstance(node, ast.Name) and node.id in module.constants:
        return marks_in(module.constants[node.id], module)
    name = dotted(node)
    return {name.split(".")[-1]} if name.startswith("pytest.mark.") else set()


def is_engine_test(func: ast.FunctionDef, class_decorators: list[ast.expr], module: Module) -> bool:
    marks = set().union(*(marks_in(d, module) for d in [*func.decorator_list, *class_decorators]))
    if "pytestmark" in module.constants:
        marks |= marks_in(module.constants["pytestmark"], module)
    return "engine" in marks


def literal(node: ast.AST | None, module: Module, depth: int = 0):
    """The Python value of a literal (names of module constants followed), else None."""
    if node is None or depth > 5:
        return None
    if isinstance(node, ast.Name) and node.id in module.constants:
        return literal(module.constants[node.id], module, depth + 1)
    if isinstance(node, ast.Call) and dotted(node) == "pytest.param":
        return tuple(literal(a, module, depth + 1) for a in node.args)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = literal(node.operand, module, depth + 1)
        return -value if isinstance(value, int) else None
    if isinstance(node, ast.Attribute) and dotted(node) == "signal.SIGINT":
        return 2
    if isinstance(node, (ast.List, ast.Tuple)):
        return tuple(literal(e, module, depth + 1) for e in node.elts)
    if isinstance(node, ast.Set):
        items = [literal(e, module, depth + 1) for e in node.elts]
        return frozenset(items) if all(isinstance(i, (str, int)) for i in items) else None
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.IfExp):  # either branch: their values as alternatives
        both = [literal(node.body, module, depth + 1), literal(node.orelse, module, depth + 1)]
        return frozenset(both) if all(isinstance(b, (str, int)) for b in both) else None
    return None


def parametrize_rows(func: ast.FunctionDef, module: Module) -> list[dict[str, object]]:
    """One environment per parametrize row (the product over stacked decorators); [{}] without any."""
    rows: list[dict[str, object]] = [{}]
    for decorator in func.decorator_list:
        if not (isinstance(decorator, ast.Call) and dotted(decorator).endswith("mark.parametrize")
                and len(decorator.args) >= 2):
            continue
        names = literal(decorator.args[0], module)
        values = literal(decorator.args[1], module)
        if not isinstance(names, str) or not isinstance(values, tuple):
            continue
        keys = [n.strip() for n in names.split(",")]
        table = [dict(zip(keys, v if len(keys) > 1 and isinstance(v, tuple) else (v,))) for v in values]
        rows = [{**row, **new} for row in rows for new in table] if table else rows
    return rows
