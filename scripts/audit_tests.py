"""The test audit of issue #35, measured by reading the tests (no test runs; a few seconds).

``python scripts/audit_tests.py`` prints three parts and their counts (``-v``: every test of every cell):

(a) **tests with no check**: test functions in ``tests/**/test_*.py`` whose body (and the bodies of the helpers
    it calls that are defined in the same file or in a ``tests/`` helper module, one level deep) has no
    ``assert``, no ``pytest.raises``/``pytest.warns``/``pytest.fail``, no ``raise AssertionError``, no call of a
    name starting with ``assert``/``check``/``expect`` (``np.testing.assert_*`` and ``mock.assert_*`` included).
(b) **verdict checks that admit divergent**: every comparison of a verdict word in the tests (``== "..."``,
    ``in (...)``, ``in {...}``, ``!=``, ``not in``; a name on the other side is read from the parametrize rows,
    the function or the module). What a test admits for a value is what all its checks of that value admit
    together (``!= "bit-exact"`` beside ``in ("ulp-noise", "noise")``). Those that still admit ``divergent`` are
    listed with whether the test runs a real engine (its ``engine`` marker) and whether divergent is the truth
    there: a fault planted at a known place (:data:`DIVERGENT_TRUTH`, judged by reading each test) or a detection
    limit's ``above`` (the verdict of the faults it planted). The count is the real-engine ones where it is not.
(c) **the exit-code matrix** (``scripts/audit_exit_codes.py``): every command × exit 0 / 1 / 2 / 130, each cell
    with the tests that assert it, or why the status cannot occur.

Exit status: 0, or 1 when a count is not zero or a cell that can occur has no test.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from audit_exit_codes import CANNOT_OCCUR, CODES, Matrix, cli_commands
from audit_read import ROOT, Module, call_name, helper, is_engine_test, literal, module_index, \
    parametrize_rows, read_modules, test_functions

#: Names whose call is a check: their leading word.
CHECK_PREFIXES = ("assert", "check", "expect")

#: (file, function) -> why ``divergent`` is the truth where a real-engine test admits it: a fault planted at a
#: known place and size, or a crash. Judged by reading the test; a new check that admits divergent is listed as
#: "not judged" until it is added here.
DIVERGENT_TRUTH: dict[tuple[str, str], str] = {
    ("tests/numerics/test_planted_faults.py",
     "test_top2_swapped_at_a_nearly_tied_position_is_a_fault_alone_and_a_near_tie_inside_row_wide_noise"):
        "planted: the top two logits of one row swapped, nothing else changed",
    ("tests/numerics/test_planted_faults.py", "test_one_logit_of_one_confident_position_moved_far_is_divergent_there"):
        "planted: one logit of a confident position moved by ±3",
    ("tests/engines/test_command.py", "test_ab_cli_nan_from_a_candidate_knob_is_a_divergent_verdict_not_bad_usage"):
        "planted: the candidate's logits hold a NaN (FAKE_BAD=nan)",
    ("tests/engines/test_command.py", "test_a_fault_at_one_position_is_caught_against_the_pairs_noise_floor"):
        "planted: position 10 perturbed by N(0, 1) (LLAMACPP_CMD_PERTURB=10:1.0)",
    ("tests/engines/test_command.py", "test_the_detection_limit_brackets_a_fault_planted_by_the_engine"):
        "planted: row noise at 1.1 × the detection limit at its position",
    ("tests/engines/test_hf_cmd_engine.py",
     "test_the_detection_limit_brackets_a_logit_planted_by_the_engine_under_bfloat16"):
        "planted: argmax-up at 1.1 × the detection limit at its position",
    ("tests/cli/test_exit_codes.py", "test_explain_exits_0_on_a_pair_whose_flip_is_a_bug"):
        "planted: position 7's top two logits swapped (the swap engine)",
    ("tests/docs/test_python_pages.py", "test_the_python_api_page_runs"):
        "planted: the page's crafted pair, one entry of one row moved by 0.5",
    ("tests/engines/test_command.py",
     "test_a_golden_of_selected_positions_sees_a_planted_fault_only_where_it_stored_rows"):
        "planted: position 10 perturbed by N(0, 1) (LLAMACPP_CMD_PERTURB=10:1.0), in the golden's stored rows",
    ("tests/experiments/test_verify_positions.py",
     "test_a_fault_outside_the_selection_is_not_seen_and_one_inside_is_at_its_run_position"):
        "planted: decode step 1's lowest M=K logit raised 10 above its argmax (the planted llama.cpp verify path)",
}
#: A detection limit's ``above``: the verdict of the faults it planted above the limit, divergent by definition.
PLANTED_SUBJECTS = ("above",)


# -- (a) tests with no check ------------------------------------------------------------------------------------
def is_check(node: ast.AST) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Raise) and node.exc is not None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        return isinstance(exc, ast.Name) and exc.id == "AssertionError"
    if isinstance(node, ast.Call):
        name = call_name(node)
        if name.startswith(CHECK_PREFIXES) or name.startswith("_" + CHECK_PREFIXES[0]):
            return True
        func = node.func
        return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "pytest"
                and func.attr in ("raises", "warns", "fail", "deprecated_call"))
    return False


def has_check(func: ast.AST) -> bool:
    return any(is_check(node) for node in ast.walk(func))


def unchecked_tests(modules: dict[Path, Module], index: dict[str, Module]) -> list[tuple[str, int, str]]:
    found = []
    for path, module in modules.items():
        if not path.name.startswith("test_"):
            continue
        for func, _ in test_functions(module):
            if has_check(func):
                continue
            called = {call_name(c) for c in ast.walk(func) if isinstance(c, ast.Call)}
            helpers = [helper(module, name, index) for name in called]
            if any(h is not None and h[1] is not func and has_check(h[1]) for h in helpers):
                continue
            found.append((module.rel, func.lineno, func.name))
    return found


# -- (b) verdict comparisons -------------------------------------------------------------------------------------
def verdict_words() -> tuple[str, ...]:
    tree = ast.parse((ROOT / "src/logitlab/numerics/verdict.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "VERDICTS":
            return tuple(ast.literal_eval(node.value))
    raise SystemExit("VERDICTS not found in src/logitlab/numerics/verdict.py")


@dataclass
class VerdictCheck:
    where: str
    function: str
    text: str
    admitted: frozenset[str]
    negative: bool
    engine: bool
    subject: str = ""  # the value compared, as source text
    together: frozenset[str] = frozenset()  # what all the test's checks of that value admit

    @property
    def file(self) -> str:
        return self.where.split(":")[0]

    def truth(self) -> str | None:
        """Why divergent is the truth here, when it is."""
        if self.subject.endswith(tuple(f".{s}" for s in PLANTED_SUBJECTS)) or \
                self.subject.endswith(tuple(f"[{s!r}]" for s in PLANTED_SUBJECTS)):
            return "planted: a detection limit's fault above the limit"
        return DIVERGENT_TRUTH.get((self.file, self.function))


def local_literals(func: ast.AST, module: Module) -> dict[str, object]:
    values = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = literal(node.value, module)
            if value is not None:
                values[node.targets[0].id] = value
    return values


def words_of(node: ast.expr, env: dict[str, object], module: Module, verdicts: tuple[str, ...],
             equality: bool) -> set[str] | None:
    """The verdict words a comparison's literal side names (one word for ``==``/``!=``, a collection for ``in``),
    or None when it is no verdict literal."""
    value = env.get(node.id) if isinstance(node, ast.Name) and node.id in env else literal(node, module)
    if not equality and not isinstance(value, (tuple, frozenset)):
        return None
    if equality:  # one word, or the alternatives of ``A if COND else B``
        items = {value} if isinstance(value, str) else set(value) if isinstance(value, frozenset) else None
    else:
        items = set(value)
    if not items or not all(isinstance(i, str) and i in verdicts for i in items):
        return None
    return items


def verdict_checks(modules: dict[Path, Module], verdicts: tuple[str, ...]) -> list[VerdictCheck]:
    found = []
    for path, module in modules.items():
        if not path.name.startswith("test_"):
            continue
        for func, class_decorators in test_functions(module):
            engine = is_engine_test(func, class_decorators, module)
            local = local_literals(func, module)
            seen: dict[tuple, VerdictCheck] = {}
            for env in parametrize_rows(func, module):
                for node in ast.walk(func):
                    if not isinstance(node, ast.Compare):
                        continue
                    sides = [node.left, *node.comparators]
                    for op, left, right in zip(node.ops, sides, sides[1:]):
                        if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                            continue
                        equality = isinstance(op, (ast.Eq, ast.NotEq))
                        words = words_of(right, {**local, **env}, module, verdicts, equality)
                        if words is None and equality:
                            words, left = words_of(left, {**local, **env}, module, verdicts, equality), right
                        if words is None:
                            continue
                        negative = isinstance(op, (ast.NotEq, ast.NotIn))
                        admitted = frozenset(set(verdicts) - words if negative else words)
                        key = (node.lineno, node.col_offset, ast.dump(left))
                        check = seen.setdefault(key, VerdictCheck(
                            f"{module.rel}:{node.lineno}", func.name, ast.unparse(node), frozenset(), negative,
                            engine, ast.unparse(left)))
                        check.admitted = check.admitted | admitted
            narrow(list(seen.values()))
            found += seen.values()
    return found


def narrow(checks: list[VerdictCheck]) -> None:
    """What one test admits for a value is what all its checks of that value admit together (a ``!= "bit-exact"``
    next to an ``in (...)`` of the same value admits only what both do)."""
    by_subject: dict[str, frozenset[str]] = {}
    for check in checks:
        by_subject[check.subject] = by_subject.get(check.subject, check.admitted) & check.admitted
    for check in checks:
        check.together = by_subject[check.subject]


# -- the report ----------------------------------------------------------------------------------------------------
def main() -> int:
    modules = read_modules()
    index = module_index(modules)
    verdicts = verdict_words()
    n_tests = sum(len(test_functions(m)) for p, m in modules.items() if p.name.startswith("test_"))

    unchecked = unchecked_tests(modules, index)
    print(f"(a) test functions with no check: {len(unchecked)} of {n_tests}")
    for rel, line, name in unchecked:
        print(f"    {rel}:{line} {name}")

    checks = verdict_checks(modules, verdicts)
    admitting = [c for c in checks if "divergent" in c.admitted]
    narrowed = [c for c in admitting if "divergent" not in c.together]
    listed = [c for c in admitting if "divergent" in c.together]
    wrong = [c for c in listed if c.engine and c.truth() is None]
    print(f"\n(b) verdict comparisons: {len(checks)} ({sum(c.engine for c in checks)} in real-engine tests)"
          f"\n    admitting divergent: {len(listed)} ({sum(c.engine for c in listed)} real-engine; "
          f"{sum(c.negative for c in listed)} negative)\n    real-engine ones where divergent is not the truth: "
          f"{len(wrong)}")
    for c in listed:
        truth = c.truth()
        judged = f"truth: divergent ({truth})" if truth else \
            "NOT JUDGED: divergent is not known to be the truth" if c.engine else "crafted arrays (no engine)"
        print(f"    {c.where} [{'engine' if c.engine else 'crafted'}{', negative' if c.negative else ''}] "
              f"{c.text[:80]}\n        -> {judged}")
    for c in narrowed:
        print(f"    {c.where} [{'engine' if c.engine else 'crafted'}, negative] {c.text[:60]} "
              f"-> narrowed by the test's other checks of {c.subject} to {', '.join(sorted(c.together))}")

    matrix = Matrix(cli_commands(), modules, index)
    matrix.run()
    missing = 0
    print(f"\n(c) exit codes: {len(matrix.leaves)} commands × {len(CODES)} codes"
          "\n    (n: tests asserting it, ~: read from the one command the test runs, -: cannot occur)")
    width = max(map(len, matrix.leaves)) + 2
    print(f"    {'command':<{width}}" + "".join(f"{code:>8}" for code in CODES))
    for leaf in matrix.leaves:
        row = []
        for code in CODES:
            tests = matrix.cells.get((leaf, code), {})
            if tests:
                row.append(f"{len(tests)}{'' if any(tests.values()) else '~'}")
            elif (leaf, code) in CANNOT_OCCUR:
                row.append("-")
            else:
                row.append("MISSING")
                missing += 1
        print(f"    {leaf:<{width}}" + "".join(f"{cell:>8}" for cell in row))
    print(f"    cells tested: {sum(1 for leaf in matrix.leaves for c in CODES if matrix.cells.get((leaf, c)))}; "
          f"cannot occur: {len(CANNOT_OCCUR)}; missing: {missing}")
    for leaf in matrix.leaves:  # each cell with a test that checks it (-v: every one), or why it cannot occur
        for code in CODES:
            tests = sorted(matrix.cells.get((leaf, code), {}).items(), key=lambda t: (not t[0].startswith(
                ("tests/cli/test_exit_codes.py", "tests/cli/test_ctrl_c.py")), t[0]))
            shown = [f"{t}{'' if exact else ' ~'}" for t, exact in (tests if "-v" in sys.argv else tests[:1])]
            more = f" (+{len(tests) - len(shown)})" if len(tests) > len(shown) else ""
            what = ", ".join(shown) + more if shown else CANNOT_OCCUR.get((leaf, code), "MISSING")
            print(f"    {leaf} {code}: {what}")
    if "-v" in sys.argv:
        for label, line, words in sorted(set(matrix.unresolved)):
            if (label, line) not in matrix.resolved:
                print(f"    not read as a command (a group without a known subcommand): {label}:{line} {words}")
    return 1 if unchecked or wrong or missing else 0


if __name__ == "__main__":
    sys.exit(main())
