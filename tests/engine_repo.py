"""A throw-away git repository of a small engine, 16 commits, for the history and bisect tests.

The engine is ``examples/numpy_cmd_engine.py`` (pure numpy, speaks the ``cmd``
protocol, has a ``--bench`` mode): chosen over the llama.cpp wrapper because a
run takes ~0.3 s (Python start-up, numpy import, weights from a seed), so
16 commits × several runs stay within a couple of minutes on a loaded 2-core
machine, and because its switches change real arithmetic. The ``build`` is
``python build.py``: byte-compile the engine (a syntax error fails the build)
and install it as ``build/engine.py``.

Commits (0 = the oldest, tagged ``v1.0``; 15 = HEAD, tagged ``v1.1``):

- :data:`NUMERICS` (5): ``NORM_FLOAT64 = True`` — the RMS norm's mean of
  squares accumulates in float64: different rounding, different logits bits,
  no measurable cost;
- :data:`BROKEN` (7): a typo in ``build.py`` — the build fails (a skip);
  commit 8 fixes it;
- :data:`SLOWER` (11): ``CHECK_FINITE = True`` — a debug check left on scans
  the output weights at every decode step: decode about twice as slow, same
  logits;
- every other commit touches a comment, the README or the build's message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "examples" / "numpy_cmd_engine.py"
PY = sys.executable
NUMERICS, BROKEN, SLOWER = 5, 7, 11
#: The build command, run in the work tree.
BUILD = f"{PY} build.py"
#: The engine as a ``cmd`` spec, paths relative to the work tree (vocab of the toy model).
SPEC = (f"cmd:{PY} build/engine.py --tokens {{tokens}} --logits {{logits}} --n-prompt {{n_prompt}} "
        f"--n-decode {{n_decode}}?vocab=4096")


def spec(folder: str | Path) -> str:
    """The engine built in ``folder`` (e.g. a pinned reference build) as a ``cmd`` spec."""
    return SPEC.replace("build/engine.py", f"{folder}/build/engine.py")


def pinned_build(repo: Path, rev: str, folder: Path) -> Path:
    """Export ``rev`` of ``repo`` into ``folder`` (``git archive``, no second work tree) and build it there."""
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    subprocess.run(BUILD, shell=True, cwd=folder, check=True, capture_output=True)
    return folder
#: The benchmark command (decode 128 tokens) and the metric it prints.
BENCH = f"{PY} build/engine.py --bench 128"
BENCH_METRIC = r"decode_seconds=([0-9.eE+-]+)"

BUILD_PY = '''"""Build: byte-compile the engine and install it into build/."""
import py_compile
import shutil
from pathlib import Path

Path("build").mkdir(exist_ok=True)
py_compile.compile("engine.py", doraise=True)
shutil.copy("engine.py", "build/engine.py")
print("built build/engine.py")
'''


def git(repo: Path, *args: str, date: str | None = None, check: bool = True) -> str:
    """``git -C repo ARGS`` with a fixed author (and ``date``); its stdout, stripped."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
           "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.com"}
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=check, capture_output=True,
                          text=True).stdout.strip()


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + line + "\n")


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def _changes(repo: Path) -> list[tuple[str, object]]:
    engine, build, readme = repo / "engine.py", repo / "build.py", repo / "README.md"
    return [
        ("engine: toy recurrent LM, cmd protocol and --bench", None),
        ("README: usage", lambda: _append(readme, "Run: python build/engine.py --bench 128")),
        ("engine: comment the model", lambda: _append(engine, "# the model: a toy recurrent LM")),
        ("build: say what was built", lambda: _replace(build, 'print("built build/engine.py")',
                                                         'print("built build/engine.py (engine v1)")')),
        ("README: benchmark mode", lambda: _append(readme, "The benchmark prints decode_seconds.")),
        ("norm: accumulate the mean of squares in float64",
         lambda: _replace(engine, "NORM_FLOAT64 = False", "NORM_FLOAT64 = True")),
        ("engine: comment the decode loop", lambda: _append(engine, "# decode: one token per call (M=1)")),
        ("build: check the tree first", lambda: _replace(build, "import shutil\n", "import shutil\nimprot os\n")),
        ("build: fix the typo", lambda: _replace(build, "improt os\n", "import os\n")),
        ("README: numerics note", lambda: _append(readme, "Logits are float32.")),
        ("engine: comment the prefill", lambda: _append(engine, "# prefill: one matrix product")),
        ("decode: check the output weights for NaN/Inf at every step",
         lambda: _replace(engine, "CHECK_FINITE = False", "CHECK_FINITE = True")),
        ("README: changelog", lambda: _append(readme, "v1.1: float64 norm, finite checks")),
        ("build: quieter", lambda: _replace(build, " (engine v1)", "")),
        ("engine: comment the weights", lambda: _append(engine, "# weights: seed 0")),
        ("README: version 1.1", lambda: _append(readme, "Version 1.1")),
    ]


def make_engine_repo(repo: Path) -> list[str]:
    """Create the repository in ``repo`` (a new folder); return the 16 commit hashes, oldest first."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "engine.py").write_text(ENGINE.read_text())
    (repo / "build.py").write_text(BUILD_PY)
    (repo / "README.md").write_text("# toy engine\n")
    (repo / ".gitignore").write_text("build/\n__pycache__/\n")
    shas = []
    for i, (subject, change) in enumerate(_changes(repo)):
        if change is not None:
            change()
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject, date=f"2026-01-{i + 1:02d}T12:00:00+00:00")
        shas.append(git(repo, "rev-parse", "HEAD"))
    git(repo, "tag", "v1.0", shas[0])
    git(repo, "tag", "v1.1", shas[-1])
    return shas


if __name__ == "__main__":  # python tests/engine_repo.py DIR: the repository of the tests, for a demo
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/engine_repo.py NEW_FOLDER")
    for i, sha in enumerate(make_engine_repo(Path(sys.argv[1]))):
        print(i, sha[:10], git(Path(sys.argv[1]), "show", "-s", "--format=%s", sha))
