"""The audit's exit-code matrix: which test asserts which exit status of which ``logitlab`` command.

Every command (the keys of ``COMMANDS`` in ``src/logitlab/cli/__init__.py`` and their subcommands, read from the
click decorators) × exit 0 / 1 / 2 / 130. A cell comes from an assert on ``X.returncode`` / ``X.exit_code`` /
``X.value.code`` (or a helper that asserts on its argument's status, as ``exited_130(run, ...)``, or on the
status of the run it starts with its ``*args``, as ``run_and_render_again``), where ``X`` was bound to a
``logitlab`` invocation: ``cli("bench", "run", ...)``, ``[PY, "-m", "logitlab", *args]``, ``CliRunner().invoke(main,
[...])``, a wrapper that puts the group before its ``*args``, with the words read from literals, the test's
parametrize rows, its ``for`` loops over known values, its fixtures and ``request.getfixturevalue``. A ``--help``
run is no cell. A status whose run is not found is given to the one command the test runs (marked ``~`` when
the test runs several). Cells that cannot occur carry the reason (:data:`CANNOT_OCCUR`).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from audit_read import ROOT, TESTS, Module, call_name, dotted, helper, literal, parametrize_rows, test_functions

CODES = (0, 1, 2, 130)
RC_ATTRS = ("returncode", "exit_code")

#: (command, code) -> why that exit status cannot occur for that command.
CANNOT_OCCUR: dict[tuple[str, int], str] = {
    ("dump", 1): "no gate: a dump is written or the run fails (2)",
    ("bench calibrate", 1): "no gate: writes the noise file or fails (2)",
    ("golden record", 1): "no gate: records or fails (2)",
    ("golden update", 1): "no gate: the verdict vs the previous golden is reported, never judged",
    ("golden export-kld", 1): "no gate: writes the KLD base file or fails (2)",
    ("history add", 1): "no gate: adds the records or fails (2)",
    ("explain", 1): "no gate: explain judges nothing (docs/commands/explain.md)",
    ("report", 1): "no gate: renders a saved result or fails (2)",
    ("build", 1): "no gate: builds (cached) or fails (2)",
}


def cli_commands() -> dict[str, tuple[str, ...]]:
    """Command -> its subcommands (empty for a leaf), read from ``COMMANDS`` and the click decorators."""
    cli = ROOT / "src/logitlab/cli"
    trees = {path.stem: ast.parse(path.read_text()) for path in cli.glob("*.py")}
    named: dict[str, str] = {}  # function -> the name of the click command it is, for add_command
    subs: dict[tuple[str, str], list[str]] = defaultdict(list)  # (module, group function) -> subcommand names
    for stem, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for d in node.decorator_list:
                    if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "command":
                        name = d.args[0].value if d.args else node.name.replace("_", "-")
                        named[node.name] = name
                        if isinstance(d.func.value, ast.Name) and d.func.value.id != "click":
                            subs[(stem, d.func.value.id)].append(name)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "add_command" and isinstance(node.func.value, ast.Name) \
                    and node.args and isinstance(node.args[0], ast.Name):
                subs[(stem, node.func.value.id)].append(node.args[0].id)  # resolved below
    registry = next(n for n in trees["__init__"].body if isinstance(n, ast.AnnAssign)
                    and isinstance(n.target, ast.Name) and n.target.id == "COMMANDS")
    commands = {}
    for key, value in zip(registry.value.keys, registry.value.values):
        module, attr = value.elts[0].value.split(":")
        found = subs.get((module.rsplit(".", 1)[-1], attr), [])
        commands[key.value] = tuple(sorted(named.get(name, name) for name in found))
    return commands


@dataclass
class Matrix:
    commands: dict[str, tuple[str, ...]]
    modules: dict[Path, Module]
    index: dict[str, Module]
    cells: dict[tuple[str, int], dict[str, bool]] = field(default_factory=lambda: defaultdict(dict))
    unresolved: list[tuple[str, int, str]] = field(default_factory=list)  # group calls without a known subcommand
    resolved: set[tuple[str, int]] = field(default_factory=set)
    _fixtures: dict[tuple[Path, str], object] = field(default_factory=dict)

    @property
    def leaves(self) -> list[str]:
        return [f"{c} {s}" if s else c for c, subs in self.commands.items() for s in (subs or ("",))]

    # -- invocations
    def tokens(self, node: ast.expr, scope: "Scope") -> list[object]:
        if isinstance(node, ast.Starred):
            node = node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [t for e in node.elts for t in self.tokens(e, scope)]
        if isinstance(node, ast.Constant):
            return [node.value]
        value = scope.const(node)
        if isinstance(value, (list, tuple)):
            return list(value)
        return [value]

    def invocation(self, call: ast.Call, scope: "Scope") -> str | None:
        """``"bench run"`` when ``call`` runs logitlab with those words first, else None."""
        if call_name(call) in ("get", "pop", "setdefault", "joinpath", "mkdir", "open", "Path", "write_text",
                               "startswith", "endswith", "split", "join", "replace", "format", "index", "count"):
            return None
        words = [*self.prefix(call, scope), *(t for a in call.args for t in self.tokens(a, scope))]
        words = [w for w in words if w not in ("-m", "logitlab")]
        strings = [i for i, w in enumerate(words) if isinstance(w, str)]
        if not strings or words[strings[0]] not in self.commands or "--help" in words or "-h" in words:
            return None  # not logitlab, or its help (exit 0 without doing the command's work)
        first = strings[0]
        command, subs = words[first], self.commands[words[first]]
        if not subs:
            return command
        sub = words[first + 1] if first + 1 < len(words) else None
        if sub in subs:
            self.resolved.add((scope.label, call.lineno))
            return f"{command} {sub}"
        self.unresolved.append((scope.label, call.lineno, f"{command} {sub!r}"))
        return None

    def prefix(self, call: ast.Call, scope: "Scope") -> tuple[str, ...]:
        """The words a wrapper puts before its ``*args`` (``def in_process(*args): ... ["bench", *args]``)."""
        found = helper(scope.module, call_name(call), self.index)
        if found is None or found[1].args.vararg is None:
            return ()
        vararg = found[1].args.vararg.arg
        for node in ast.walk(found[1]):
            if not isinstance(node, (ast.List, ast.Tuple)):
                continue
            for i, element in enumerate(node.elts):
                inner = element.value if isinstance(element, ast.Starred) else None
                if isinstance(inner, ast.Call) and call_name(inner) == "map" and len(inner.args) == 2:
                    inner = inner.args[1]
                if isinstance(inner, ast.Name) and inner.id == vararg:
                    words = tuple(e.value for e in node.elts[:i] if isinstance(e, ast.Constant)
                                  and isinstance(e.value, str) and e.value not in ("-m", "logitlab"))
                    return words if words and words[0] in self.commands else ()
        return ()

    def invoked(self, node: ast.AST, scope: "Scope") -> set[str]:
        found = {self.invocation(c, scope) for c in ast.walk(node) if isinstance(c, ast.Call)}
        return {c for c in found if c}

    # -- fixtures
    def fixture(self, module: Module, name: str):
        """The binding a fixture returns (a command set, or a dict of them), looked up as pytest does."""
        folder = module.path.parent
        candidates = [module] + [self.modules.get(p / "conftest.py") for p in [folder, *folder.parents]
                                 if p == TESTS or TESTS in p.parents]
        for owner in filter(None, candidates):
            func = owner.functions.get(name)
            if func is not None and any("fixture" in dotted(d) for d in func.decorator_list):
                key = (owner.path, name)
                if key not in self._fixtures:
                    self._fixtures[key] = set()  # a cycle reads as nothing
                    self._fixtures[key] = merge(self.analyse(owner, func, {}))
                return self._fixtures[key]
        return None

    def helper_invoked(self, module: Module, func: ast.FunctionDef) -> set[str]:
        """The commands a helper runs whatever its arguments (its own words, not its caller's)."""
        key = (module.path, "helper:" + func.name)
        if key not in self._fixtures:
            self._fixtures[key] = set()
            self._fixtures[key] = self.invoked(func, Scope(self, module, func, {}))
        return self._fixtures[key]

    def analyse(self, module: Module, func: ast.FunctionDef, env: dict[str, object]) -> list[object]:
        """Read ``func`` once per value of each ``for`` loop over known values; the bindings it returns."""
        returned = []
        for row in loop_rows(Scope(self, module, func, env)):
            scope = Scope(self, module, func, row)
            scope.analyse()
            returned.append(scope.returned())
        return returned

    def run(self) -> None:
        for path, module in self.modules.items():
            if not path.name.startswith("test_"):
                continue
            for func, _ in test_functions(module):
                for env in parametrize_rows(func, module):
                    self.analyse(module, func, env)


def loop_rows(scope: "Scope") -> list[dict[str, object]]:
    """``scope.env`` once plus once per iteration of each ``for`` loop whose values are known (the loop's names
    bound to that iteration's values)."""
    rows = [scope.env]
    for node in ast.walk(scope.func):
        if not isinstance(node, ast.For):
            continue
        values = scope.const(node.iter)
        if not isinstance(values, tuple):
            continue
        for value in values:
            if isinstance(node.target, ast.Name):
                rows.append({**scope.env, node.target.id: value})
            elif isinstance(node.target, ast.Tuple) and isinstance(value, tuple) and \
                    len(value) == len(node.target.elts) and all(isinstance(t, ast.Name) for t in node.target.elts):
                rows.append({**scope.env, **{t.id: v for t, v in zip(node.target.elts, value)}})
    return rows


def merge(bindings: list[object]) -> object:
    """One binding from several (the rows of one fixture): sets united, dicts merged key by key."""
    dicts = [b for b in bindings if isinstance(b, dict)]
    if dicts:
        out: dict[object, object] = {}
        for d in dicts:
            for key, value in d.items():
                out[key] = merge([out[key], value]) if key in out else value
        return out
    return set().union(*(b for b in bindings if isinstance(b, set)))


class Scope:
    """One function read once (one parametrize row): its bindings of names to logitlab invocations, its asserts."""

    def __init__(self, matrix: Matrix, module: Module, func: ast.FunctionDef, env: dict[str, object]):
        self.matrix, self.module, self.func, self.env = matrix, module, func, env
        self.label = f"{module.rel}::{func.name}"
        self.bindings: dict[str, object] = {}
        self.assigned: dict[str, ast.expr] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.assigned[node.targets[0].id] = node.value

    def const(self, node: ast.AST | None, depth: int = 0):
        """The value of ``node`` where it is known without running the test (parametrize rows and loop values in
        ``env``, literals, local and module names, f-strings, ``+``, subscripts, ``str.split``), else None."""
        if node is None or depth > 8:
            return None
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            if node.id in self.assigned:
                return self.const(self.assigned[node.id], depth + 1)
            return literal(self.module.constants.get(node.id), self.module)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            items = []
            for e in node.elts:
                value = self.const(e.value if isinstance(e, ast.Starred) else e, depth + 1)
                items += list(value) if isinstance(e, ast.Starred) and isinstance(value, (list, tuple)) else [value]
            return tuple(items)
        if isinstance(node, ast.Dict):
            return {self.const(k, depth + 1): v for k, v in zip(node.keys, node.values)}  # values read on demand
        if isinstance(node, ast.Subscript):
            holder, key = self.const(node.value, depth + 1), self.const(node.slice, depth + 1)
            if isinstance(holder, dict) and key in holder:
                value = holder[key]
                return self.const(value, depth + 1) if isinstance(value, ast.AST) else value
            return None
        if isinstance(node, ast.JoinedStr):
            parts = [self.const(v.value if isinstance(v, ast.FormattedValue) else v, depth + 1) for v in node.values]
            return "".join(map(str, parts)) if all(isinstance(p, (str, int)) for p in parts) else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.const(node.left, depth + 1), self.const(node.right, depth + 1)
            if isinstance(left, tuple) and isinstance(right, tuple) or isinstance(left, str) and isinstance(right, str):
                return left + right
            return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split" \
                and not node.args:
            value = self.const(node.func.value, depth + 1)
            return tuple(value.split()) if isinstance(value, str) else None
        return literal(node, self.module)

    def evaluate(self, node: ast.AST | None):
        if node is None:
            return set()
        if isinstance(node, ast.Name):
            if node.id in self.bindings:
                return self.bindings[node.id]
            return set()
        if isinstance(node, ast.Attribute):
            return self.evaluate(node.value)
        if isinstance(node, ast.Subscript):
            inner = self.evaluate(node.value)
            key = self.const(node.slice)
            return inner.get(key, set()) if isinstance(inner, dict) else inner
        if isinstance(node, ast.Dict):
            return {self.const(k): self.evaluate(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.Call):
            if call_name(node) == "getfixturevalue" and node.args:
                name = self.const(node.args[0])
                return (self.matrix.fixture(self.module, name) or set()) if isinstance(name, str) else set()
            command = self.matrix.invocation(node, self)
            if command:
                return {command}
            inside = self.matrix.invoked(node, self)
            if inside:
                return inside
            found = helper(self.module, call_name(node), self.matrix.index)
            if found is not None and found[1] is not self.func and "fixture" not in str(found[1].decorator_list):
                return self.matrix.helper_invoked(*found)
        return self.matrix.invoked(node, self)

    def bind(self, target: ast.expr, value) -> None:
        if isinstance(target, ast.Name):
            self.bindings[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind(element, value if not isinstance(value, dict) else set())
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            holder = self.bindings.setdefault(target.value.id, {})
            if isinstance(holder, dict):
                holder[self.const(target.slice)] = value

    def analyse(self) -> None:
        for arg in self.func.args.args:
            binding = self.matrix.fixture(self.module, arg.arg)
            if binding:
                self.bindings[arg.arg] = binding
        nodes = sorted((n for n in ast.walk(self.func) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset))
        for node in nodes:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self.bind(target, self.evaluate(node.value))
            elif isinstance(node, ast.With):
                for item in node.items:
                    if item.optional_vars is not None and "raises" in dotted(item.context_expr):
                        self.bind(item.optional_vars, set().union(*(self.matrix.invoked(s, self) for s in node.body)))
            elif isinstance(node, ast.Assert):
                for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                    self.compared(compare)
            elif isinstance(node, ast.Call):
                self.helper_checks(node)

    def codes(self, node: ast.expr) -> set[int]:
        value = self.const(node)
        values = value if isinstance(value, (tuple, frozenset)) else (value,)
        return {130 if v == -2 else v for v in values if isinstance(v, int) and not isinstance(v, bool)} & set(CODES)

    def code_subject(self, node: ast.expr) -> ast.expr | None:
        """What ``node`` is the exit status of, when it is one."""
        if isinstance(node, ast.Attribute) and node.attr in RC_ATTRS:
            return node.value
        if isinstance(node, ast.Attribute) and node.attr == "code" and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "value":
            return node.value.value
        if isinstance(node, ast.Name) and (node.id.endswith("code") or node.id in ("rc", "status")):
            return node
        return None

    def compared(self, compare: ast.Compare) -> None:
        if len(compare.ops) != 1 or not isinstance(compare.ops[0], (ast.Eq, ast.In)):
            return
        left, right = compare.left, compare.comparators[0]
        pairs = list(zip(left.elts, right.elts)) if isinstance(left, ast.Tuple) and isinstance(right, ast.Tuple) \
            and len(left.elts) == len(right.elts) else [(left, right)]
        for subject_node, code_node in pairs:
            subject = self.code_subject(subject_node)
            if subject is not None:
                self.record(subject, self.codes(code_node))

    def record(self, subject: ast.expr, codes: set[int]) -> None:
        commands = self.evaluate(subject)
        exact = bool(commands) and isinstance(commands, set)
        if not exact:
            commands = self.matrix.invoked(self.func, self)
            for arg in self.func.args.args:
                binding = self.bindings.get(arg.arg)
                commands |= binding if isinstance(binding, set) else set()
        for command in commands if isinstance(commands, set) else ():
            for code in codes:
                cell = self.matrix.cells[(command, code)]
                cell[self.label] = cell.get(self.label, False) or exact or len(commands) == 1

    def helper_checks(self, call: ast.Call) -> None:
        """A helper that asserts on its argument's exit status (``exited_130(run, ...)``)."""
        found = helper(self.module, call_name(call), self.matrix.index)
        if found is None or found[1] is self.func:
            return
        for position, codes in param_codes(*found).items():
            if position == VARARGS:
                self.record(call, codes)  # the helper runs logitlab with the words it was given
            elif position < len(call.args):
                self.record(call.args[position], codes)

    def returned(self):
        for node in ast.walk(self.func):
            if isinstance(node, ast.Return) and node.value is not None:
                return self.evaluate(node.value)
        return set()


#: ``param_codes``'s key for "the status of the run the helper starts with its ``*args``".
VARARGS = -1


def param_codes(module: Module, func: ast.FunctionDef, depth: int = 0) -> dict[int, set[int]]:
    """Argument position -> the exit codes ``func`` asserts on that argument's ``returncode`` (helpers followed);
    :data:`VARARGS` -> those it asserts on a run it starts with its ``*args`` (``run_and_render_again``)."""
    params = [a.arg for a in func.args.args]
    vararg = func.args.vararg.arg if func.args.vararg else None
    runs = {node.targets[0].id for node in ast.walk(func) if vararg and isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)
            and any(isinstance(a, ast.Starred) and isinstance(a.value, ast.Name) and a.value.id == vararg
                    for a in node.value.args)}
    found: dict[int, set[int]] = defaultdict(set)
    scope = Scope(Matrix({}, {}, {}), module, func, {})
    for node in ast.walk(func):
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.Eq, ast.In)):
            subject = scope.code_subject(node.left)
            if isinstance(subject, ast.Name) and subject.id in params:
                found[params.index(subject.id)] |= scope.codes(node.comparators[0])
            elif isinstance(subject, ast.Name) and subject.id in runs:
                found[VARARGS] |= scope.codes(node.comparators[0])
        elif isinstance(node, ast.Call) and depth < 3 and isinstance(node.func, ast.Name) \
                and node.func.id in module.functions and module.functions[node.func.id] is not func:
            inner = param_codes(module, module.functions[node.func.id], depth + 1)
            for position, codes in inner.items():
                arg = node.args[position] if position < len(node.args) else None
                if isinstance(arg, ast.Name) and arg.id in params:
                    found[params.index(arg.id)] |= codes
    return found


