"""The result history store: files per machine and commit, the derived index, series in git order.

Git order is checked against a real repository made with the git command line
in a temporary folder (commits with fixed dates, a side branch).
"""

import json
import math
import os
import shutil
import subprocess

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.experiments.history.store import (
    INDEX_NAME,
    HistoryRecord,
    HistoryStore,
    Metric,
    commit_info,
    commit_order,
    machine_key,
    new_record,
    series_change_points,
)
from logitlab.experiments.history.store import _entry_digest

MACHINE = "ci-runner-1"


def record(commit, tps, *, machine=MACHINE, at="2026-11-01T00:00:00+00:00", fp="aaaa", date=None):
    return new_record(
        machine=machine,
        commit=commit,
        commit_date=date,
        manifest={"logitlab_version": "0.1.0", "engine": {"name": "llama-cpp-python"}},
        metrics={
            "control": {
                "decode": Metric("higher-is-better", tps, "tokens/s", samples=(tps * 0.99, tps * 1.01)),
                "greedy": Metric("fingerprint", fp),
            }
        },
        recorded_at=at,
    )


def at(i):
    return f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00"


# --- records and files ----------------------------------------------------------------


def test_add_writes_one_plain_json_file_per_record(tmp_path):
    store = HistoryStore(tmp_path / "h")
    r = record("0123456789abcdef", 91.5)
    path = store.add(r)
    assert path.parent == tmp_path / "h" / MACHINE
    assert path.name.startswith("0123456789ab-20261101T000000-") and path.suffix == ".json"
    data = json.loads(path.read_text())
    assert data["commit"] == "0123456789abcdef"
    assert data["metrics"]["control"]["decode"]["samples"] == [pytest.approx(90.585), pytest.approx(92.415)]
    assert HistoryRecord.from_dict(data) == r
    assert store.read(f"{MACHINE}/{path.name}") == r
    assert (tmp_path / "h" / ".gitignore").read_text().splitlines()[-1] == INDEX_NAME
    # a second run of the same commit is a second file
    assert store.add(record("0123456789abcdef", 92.0, at=at(5))) != path
    assert len(list((tmp_path / "h" / MACHINE).glob("*.json"))) == 2


def test_series_in_record_order_without_a_repository(tmp_path):
    store = HistoryStore(tmp_path)
    for i, tps in [(2, 80.0), (0, 100.0), (1, 90.0)]:
        store.add(record(f"c{i}", tps, at=at(i)))
    s = store.series(MACHINE, "control", "decode")
    assert (s.values, s.commits, s.ordered_by, s.unit, s.kind) == (
        (100.0, 90.0, 80.0), ("c0", "c1", "c2"), "record", "tokens/s", "higher-is-better")
    assert store.series(MACHINE, "control", "greedy").values == ("aaaa",) * 3
    assert store.machines() == [MACHINE]


def test_two_histories_merge_by_copying_folders(tmp_path):
    a, b = HistoryStore(tmp_path / "a"), HistoryStore(tmp_path / "b")
    a.add(record("c0", 100.0, at=at(0)))
    b.add(record("c1", 90.0, at=at(1)))
    b.add(record("c1", 50.0, machine="laptop", at=at(1)))
    a.index()                                               # a has a (now stale) index
    shutil.copytree(tmp_path / "b", tmp_path / "a", dirs_exist_ok=True)
    assert a.series(MACHINE, "control", "decode").values == (100.0, 90.0)
    assert a.machines() == sorted(["laptop", MACHINE])


def test_index_follows_added_changed_and_removed_files(tmp_path):
    store = HistoryStore(tmp_path)
    p0 = store.add(record("c0", 100.0, at=at(0)))
    store.add(record("c1", 90.0, at=at(1)))
    assert len(store.index()) == 2
    assert (tmp_path / INDEX_NAME).is_file()
    p0.unlink()
    assert store.series(MACHINE, "control", "decode").values == (90.0,)
    (tmp_path / INDEX_NAME).write_text("{not json")              # damaged: rebuilt
    assert len(store.index()) == 1
    # the index caches summaries: an unchanged file is not parsed again
    idx = json.loads((tmp_path / INDEX_NAME).read_text())
    (rel,) = idx["files"]
    idx["files"][rel]["metrics"]["control"]["decode"]["value"] = 12345.0
    (tmp_path / INDEX_NAME).write_text(json.dumps(idx))
    assert store.series(MACHINE, "control", "decode").values == (90.0,)  # an entry edited: its digest fails
    idx["files"][rel]["digest"] = _entry_digest(idx["files"][rel])
    (tmp_path / INDEX_NAME).write_text(json.dumps(idx))
    assert store.series(MACHINE, "control", "decode").values == (12345.0,)  # digest made to match: cached
    os.utime(tmp_path / rel, ns=(1, 1))                          # touched: parsed again
    assert store.series(MACHINE, "control", "decode").values == (90.0,)


# --- git order ------------------------------------------------------------------------------


def git(repo, *args, date=None):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "engine"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    for i in range(4):
        (r / "f").write_text(str(i))
        git(r, "add", "f")
        git(r, "commit", "-q", "-m", f"c{i}", date=f"2026-10-0{i + 1}T12:00:00+00:00")
    git(r, "checkout", "-q", "-b", "side", "HEAD~1")
    (r / "g").write_text("side")
    git(r, "add", "g")
    git(r, "commit", "-q", "-m", "side", date="2026-10-09T12:00:00+00:00")
    git(r, "checkout", "-q", "main")
    return r


def test_series_in_git_order_leaves_out_other_branches(tmp_path, repo):
    order = commit_order(repo)
    assert len(order) == 4 and all(len(c) == 40 for c in order)
    full, date = commit_info(repo, order[1])
    assert full == order[1] and date.startswith("2026-10-02T12:00:00")
    side = git(repo, "rev-parse", "side")
    store = HistoryStore(tmp_path / "h")
    # recorded out of commit order, one by abbreviated hash, one on the side branch
    store.add(record(order[3], 70.0, at=at(0)))
    store.add(record(order[0][:10], 100.0, at=at(1)))
    store.add(record(side, 1.0, at=at(2)))
    store.add(record(order[1], 90.0, at=at(3)))
    store.add(record(order[1], 91.0, at=at(4)))
    s = store.series(MACHINE, "control", "decode", order=order)
    assert s.values == (100.0, 90.0, 91.0, 70.0)
    assert s.commits == (order[0][:10], order[1], order[1], order[3])
    assert (s.ordered_by, s.left_out) == ("git", 1)


def test_git_errors_are_input_errors(tmp_path, repo):
    with pytest.raises(InputError, match="rev-list"):
        commit_order(tmp_path)                                   # not a repository
    with pytest.raises(InputError, match="nosuchref"):
        commit_order(repo, "nosuchref")
    with pytest.raises(InputError, match="show"):
        commit_info(repo, "0" * 40)


# --- change points from the store ---------------------------------------------------------


def test_change_point_found_at_the_commit_that_made_it(tmp_path):
    rng = np.random.default_rng(0)
    store = HistoryStore(tmp_path)
    for i in range(30):
        tps = 100.0 * math.exp(rng.normal(0, 0.01)) * (0.9 if i >= 18 else 1.0)
        store.add(record(f"c{i:02d}", tps, at=at(i), fp="bbbb" if i >= 25 else "aaaa"))
    cps = series_change_points(store.series(MACHINE, "control", "decode"))
    assert [(c.previous_label, c.label, c.direction) for c in cps.change_points] == [("c17", "c18", "regression")]
    fps = series_change_points(store.series(MACHINE, "control", "greedy"))
    got = [(c.label, c.fingerprint_before, c.fingerprint_after) for c in fps.change_points]
    assert got == [("c25", "aaaa", "bbbb")]


def test_series_mixing_numbers_and_fingerprints_is_refused(tmp_path):
    store = HistoryStore(tmp_path)
    store.add(record("c0", 100.0, at=at(0)))
    store.add(new_record(machine=MACHINE, commit="c1", commit_date=None, manifest={},
                         metrics={"control": {"decode": Metric("fingerprint", "x")}}, recorded_at=at(1)))
    s = store.series(MACHINE, "control", "decode")
    assert s.kind == "fingerprint"
    with pytest.raises(InputError, match="mixes numbers and fingerprints"):
        series_change_points(s)


# --- machine key and bad input ------------------------------------------------------------------


def test_machine_key_is_a_stable_folder_name():
    host = {"cpu": "AMD EPYC 7B13 64-Core Processor", "cores": 2, "os": "Linux-6.1-x86_64-with-glibc2.36",
            "arch": "x86_64"}
    assert machine_key(host) == "amd-epyc-7b13-64-core-processor-2cores-linux-x86_64"
    assert machine_key() == machine_key()


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"machine": "../etc"}, "machine key '../etc' is not valid"),
        ({"machine": ""}, "machine key '' is not valid"),
        ({"commit": "a b"}, "commit 'a b' is not valid"),
        ({"commit_date": "yesterday"}, "commit_date 'yesterday' is not an ISO 8601 date"),
        ({"recorded_at": "2026-13-01"}, "recorded_at"),
        ({"metrics": {}}, "name at least one variant"),
        ({"schema_version": 2}, "schema_version 2"),
    ],
)
def test_bad_record_fields_are_input_errors(kw, match):
    base = dict(machine=MACHINE, commit="c0", commit_date=None, recorded_at=at(0), manifest={},
                metrics={"control": {"decode": Metric("higher-is-better", 1.0)}})
    with pytest.raises(InputError, match=match):
        HistoryRecord(**{**base, **kw})


@pytest.mark.parametrize(
    "args, match",
    [
        (("sideways", 1.0), "metric kind 'sideways'"),
        (("higher-is-better", math.nan), "not finite"),
        (("higher-is-better", "fast"), "is not a number"),
        (("fingerprint", 3), "non-empty string"),
        (("fingerprint", ""), "non-empty string"),
        (("lower-is-better", 1.0, "s", [1.0, math.inf]), "metric sample inf"),
        (("lower-is-better", 1.0, "s", "12"), "not a sequence"),
    ],
)
def test_bad_metrics_are_input_errors(args, match):
    with pytest.raises(InputError, match=match):
        Metric(*args)


def test_bad_files_and_queries_name_the_problem(tmp_path):
    store = HistoryStore(tmp_path)
    store.add(record("c0", 100.0, at=at(0)))
    with pytest.raises(InputError, match=r"no record of machine 'laptop' has metric control/decode: .*-1:control/"):
        store.series("laptop", "control", "decode")
    bad = tmp_path / MACHINE / "c1-broken.json"
    bad.write_text('{"machine": ')
    with pytest.raises(InputError, match="c1-broken.json is not valid JSON"):
        store.index()
    bad.write_text(json.dumps({**record("c1", 1.0).to_dict(), "extra": 1}))
    with pytest.raises(InputError, match="c1-broken.json is not valid: .*unknown keys"):
        store.index()
    bad.write_text(json.dumps(record("c1", 1.0, machine="other").to_dict()))
    with pytest.raises(InputError, match="names machine 'other' but lies in folder"):
        store.index()
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="is a file"):
        HistoryStore(tmp_path / "file")
