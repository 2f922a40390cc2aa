"""The bisection on small real git repositories: midpoints and skips, suspects, the bar, restoring the checkout.

The engine is ``examples/numpy_cmd_engine.py`` committed as ``engine.py`` and
run in place (no build step), its ``NORM_FLOAT64`` switch the numerics change.
The end-to-end test on 16 commits with a build is ``tests/cli/test_history_cli.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine_repo import ENGINE, git  # noqa: E402

from logitlab.engines.variant import parse_variant  # noqa: E402
from logitlab.errors import InputError, LogitlabError  # noqa: E402
from logitlab.experiments.bisect.run import next_commit, parse_range, run_bisect  # noqa: E402
from logitlab.experiments.bisect.probes import NumericsProbe, SpeedProbe  # noqa: E402
from logitlab.experiments.gitrepo import first_parent_range  # noqa: E402

PY = sys.executable
SPEC = (f"cmd:{PY} engine.py --tokens {{tokens}} --logits {{logits}} --n-prompt {{n_prompt}} "
        f"--n-decode {{n_decode}}?vocab=4096")
PROMPT = "The history of the printing press begins in the fifteenth century, when"


def probe(**kw) -> NumericsProbe:
    return NumericsProbe(parse_variant(SPEC, "candidate", default_engine="cmd"), prompt=PROMPT, n_decode=8, **kw)


def commit(repo: Path, message: str, *, day: int) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, date=f"2026-02-{day:02d}T12:00:00+00:00")
    return git(repo, "rev-parse", "HEAD")


def engine_repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """A repository whose first commit (day 1) is the engine as ``engine.py``: the folder and [its sha]."""
    repo = tmp_path / "engine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "engine.py").write_text(ENGINE.read_text())
    return repo, [commit(repo, "engine", day=1)]


@pytest.fixture
def skip_repo(tmp_path):
    """c0 good; c1 breaks the build; c2 changes the numerics (build still broken); c3 fixes the build."""
    repo, shas = engine_repo(tmp_path)
    (repo / "BROKEN").write_text("")
    shas.append(commit(repo, "break the build", day=2))
    (repo / "engine.py").write_text(ENGINE.read_text().replace("NORM_FLOAT64 = False", "NORM_FLOAT64 = True"))
    shas.append(commit(repo, "float64 norm", day=3))
    (repo / "BROKEN").unlink()
    shas.append(commit(repo, "fix the build", day=4))
    return repo, shas


def test_next_commit_is_the_midpoint_or_its_nearest_untested_neighbour():
    assert next_commit(-1, 14, set()) == 6
    assert next_commit(-1, 14, {6}) == 5 and next_commit(-1, 14, {6, 5}) == 7
    assert next_commit(4, 6, set()) == 5 and next_commit(4, 6, {5}) is None
    assert next_commit(4, 5, set()) is None  # adjacent: nothing left between good and bad


def test_range_parsing():
    assert parse_range("v1.2..HEAD") == ("v1.2", "HEAD") and parse_range("abc..") == ("abc", "HEAD")
    for bad in ("HEAD", "..HEAD", "a...b"):
        with pytest.raises(InputError, match="is not GOOD..BAD"):
            parse_range(bad)


@pytest.mark.engine
def test_skips_between_good_and_bad_leave_every_suspect(skip_repo):
    repo, shas = skip_repo
    result = run_bisect(repo, shas[0], "main", probe(), build="test ! -f BROKEN")
    assert result.first_bad is None and result.suspects == shas[1:]
    outcomes = [(s.commit, s.outcome) for s in result.steps]
    assert outcomes == [(shas[0], "reference"), (shas[3], "bad"), (shas[1], "skip"), (shas[2], "skip")]
    assert result.steps[2].build.error == "exit status 1" and result.restored
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"


@pytest.mark.engine
def test_the_bar_decides_what_is_bad(skip_repo):
    repo, shas = skip_repo
    strict = run_bisect(repo, shas[0], shas[2], probe())  # no build: engine.py runs as committed
    assert strict.first_bad == shas[2]
    assert strict.step_of(shas[2]).probe.verdict.word == "ulp-noise"  # a float64 norm: rounding, no flips
    with pytest.raises(InputError, match="is not bad: ulp-noise") as info:
        run_bisect(repo, shas[0], shas[2], probe(require="ulp-noise"))
    assert info.value.partial.restored and info.value.partial.steps[-1].outcome == "good"


def test_first_parent_line_leaves_out_merged_branches(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "f").write_text("0")
    base = commit(repo, "base", day=1)
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "g").write_text("side")
    side = commit(repo, "side work", day=2)
    git(repo, "checkout", "-q", "main")
    (repo / "f").write_text("1")
    main1 = commit(repo, "main work", day=3)
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = git(repo, "rev-parse", "HEAD")
    line = [c.sha for c in first_parent_range(repo, base, "main")]
    assert line == [main1, merge] and side not in line
    with pytest.raises(InputError, match="is not on the first-parent history"):
        first_parent_range(repo, side, "main")


@pytest.mark.engine
def test_an_engine_failing_at_good_stops_and_restores_a_detached_checkout(skip_repo):
    repo, shas = skip_repo
    git(repo, "checkout", "-q", "--detach", shas[1])
    broken = NumericsProbe(parse_variant(f"cmd:{PY} missing.py --tokens {{tokens}} --logits {{logits}}?vocab=4096",
                                         "candidate", default_engine="cmd"), prompt=PROMPT, n_decode=4)
    with pytest.raises(LogitlabError, match="missing.py") as info:
        run_bisect(repo, shas[0], "main", broken)
    assert info.value.partial.restored and git(repo, "rev-parse", "HEAD") == shas[1]
    assert git(repo, "symbolic-ref", "-q", "HEAD", check=False) == ""


def test_probe_settings_are_checked_before_any_checkout():
    with pytest.raises(InputError, match="--require 'crashed' is not a bar"):  # the worst word (divergent is one now)
        probe(require="crashed")
    with pytest.raises(InputError, match="--metric"):
        SpeedProbe("true", metric_regex="no group")
    with pytest.raises(InputError, match="--margin must be a fraction"):
        SpeedProbe("true", margin=5.0)
    with pytest.raises(InputError, match="--max-repeats must be an integer from 3"):
        SpeedProbe("true", max_blocks=2)


@pytest.mark.engine
def test_a_build_whose_engine_crashes_is_bad_as_git_bisect_run_treats_a_crash(tmp_path):
    """c0 good; c1 a comment; c2 plants a segfault (a read of address 0) in the engine; c3 a comment."""
    repo, shas = engine_repo(tmp_path)
    (repo / "NOTES").write_text("notes\n")
    shas.append(commit(repo, "notes", day=2))
    source = ENGINE.read_text()
    assert source.count('if __name__ == "__main__":\n') == 1
    (repo / "engine.py").write_text(source.replace('if __name__ == "__main__":\n',
                                                   'if __name__ == "__main__":\n    import ctypes\n'
                                                   '    ctypes.string_at(0)\n'))
    shas.append(commit(repo, "a kernel that reads out of bounds", day=3))
    (repo / "NOTES").write_text("more notes\n")
    shas.append(commit(repo, "more notes", day=4))
    result = run_bisect(repo, shas[0], shas[3], probe())
    assert result.first_bad == shas[2]
    step = result.step_of(shas[2])
    assert step.outcome == "bad" and step.probe.verdict.word == "crashed"
    assert step.probe.reason == "crashed: the engine crashed in run (killed by SIGSEGV (signal 11))"
    assert step.probe.numerics["crash"]["signal"] == 11
