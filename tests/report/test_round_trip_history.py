"""``history show`` and ``bisect`` results render again byte for byte and load back typed.

The history holds real ``bench run --record`` results (a command that gets
slower after the fifth build); the bisection runs the numerics probe on a
three-commit repository of the small numpy engine.
"""

from __future__ import annotations

import sys

import pytest

from roundtrip_tools import ROOT, assert_round_trip, logitlab

sys.path.insert(0, str(ROOT / "tests"))
from engine_repo import ENGINE, git  # noqa: E402

PY = sys.executable


def test_history_show_round_trip(tmp_path):
    from click.testing import CliRunner

    from logitlab.cli import main
    from logitlab.experiments.history.show import HistoryResult

    history = tmp_path / "h"
    # Five builds at 10 ms, five at 300 ms: the step stands far above what a loaded machine adds to a timed
    # sleep. (Four at 100 ms failed a CI run: two records drifted to ~130 ms, and a Welch test on 4 vs 4 has
    # 3 degrees of freedom.) Recorded in this process: imports cost seconds.
    for i, seconds in enumerate((0.01,) * 5 + (0.3,) * 5):
        run = CliRunner().invoke(main, ["bench", "run", "--control", f"sleep {seconds}", "--aa", "--blocks", "2",
                                        "--warmup", "0", "--record", str(history), "--commit", f"build{i}",
                                        "--machine", "box"])
        assert run.exit_code == 0, run.stderr
        assert f"recorded in {history}/box/build{i}-" in run.stderr
    js, md = tmp_path / "history.json", tmp_path / "history.md"
    proc = logitlab("history", "show", "--dir", history, "--metric", "control/wall", "--json", js, "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    result = assert_round_trip(js, md, proc.stdout, tmp_path, HistoryResult)
    (series,) = result.series
    assert series.values[0] < 0.1 < series.values[-1] and series.ordered_by == "record"
    assert len(series.change_points) == 1, [round(v, 6) for v in series.values]
    (change,) = series.change_points
    assert (change.previous_label, change.label, change.direction) == ("build4", "build5", "regression")
    assert change.change > 1.0 and "**1 regression**" in md.read_text()


@pytest.mark.engine
def test_bisect_round_trip(tmp_path):
    from logitlab.experiments.bisect.run import BisectResult

    repo = tmp_path / "engine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i, text in enumerate((ENGINE.read_text(), ENGINE.read_text() + "# comment\n",
                              ENGINE.read_text().replace("NORM_FLOAT64 = False", "NORM_FLOAT64 = True"))):
        (repo / "engine.py").write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"c{i}", date=f"2026-03-0{i + 1}T12:00:00+00:00")
    spec = f"cmd:{PY} engine.py --tokens {{tokens}} --logits {{logits}} --n-prompt {{n_prompt}}" \
           " --n-decode {n_decode}?vocab=4096"
    js, md = tmp_path / "bisect.json", tmp_path / "bisect.md"
    proc = logitlab("bisect", "HEAD~2..HEAD", "--repo", repo, "--probe", "numerics", "--tokens", "4", "--json", js,
                    "--markdown", md, "--", spec)
    assert proc.returncode == 0, proc.stderr
    result = assert_round_trip(js, md, proc.stdout, tmp_path, BisectResult)
    assert result.first_bad == git(repo, "rev-parse", "HEAD") and result.restored
    assert [s.outcome for s in result.steps] == ["reference", "bad", "good"]
    assert result.steps[1].probe.verdict.word == "ulp-noise"
