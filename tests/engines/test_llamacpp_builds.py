"""Two builds of llama.cpp itself (issue #34): a library folder built from real llama.cpp sources (the ones a
llama-cpp-python release vendors), loaded with ``lib=DIR``, compared with the installed build.

The builds are real and cached (:mod:`logitlab.engines.llamacpp_build`: about 1.5-2.5 min each on 2 cores,
once; later runs are cache hits; under ``make test``, ``tests/warm_caches.py`` starts them in the background at
idle priority when collection ends): the installed release's llama.cpp and the previous release's (whose C API
differs from the installed bindings), both with generic flags (``GGML_NATIVE=OFF``: AVX2, no AVX-512) at ``-O1``
(``warm_caches.GENERIC``).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from logitlab.engines.llamacpp_build import (build_key, build_library, find_source, normalize_flags, release_source,
                                             source_digest)
from logitlab.engines.supervised import load_supervised
from logitlab.engines.variant import Variant
from logitlab.engines.workload import run_workload
from logitlab.errors import EngineError, InputError
from logitlab.tools import llama_cpp_python_version

from conftest import SHORT_PROMPT
from warm_caches import GENERIC, PREVIOUS

pytestmark = pytest.mark.engine


def logitlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "logitlab", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def generic():
    """The installed release's llama.cpp built with generic flags, with that release's bindings."""
    result = build_library(release_source(llama_cpp_python_version()), GENERIC)
    return result.folder


@pytest.fixture(scope="module")
def previous():
    """The previous release's llama.cpp, generic flags, with its own bindings."""
    return build_library(release_source(PREVIOUS), GENERIC).folder


def _cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return set(text.split())


def test_a_second_build_is_a_cache_hit_and_the_key_follows_sources_and_flags(generic, tmp_path):
    tree = release_source(llama_cpp_python_version())
    again = build_library(tree, [flag[2:] for flag in GENERIC])  # the same flags, spelled without -D
    assert again.cached and again.folder == generic and again.seconds == 0.0
    meta = json.loads((generic / "logitlab.json").read_text())
    assert meta["source_sha256"] == source_digest(tree) and "-DGGML_NATIVE=OFF" in meta["flags"]
    assert (generic / "python" / "llama_cpp" / "llama_cpp.py").is_file()  # the release's own bindings
    assert build_key(meta["source_sha256"], ["-DGGML_NATIVE=ON"], meta["compiler"]) != meta["key"]
    # a copy of the tree with one byte changed has another digest; a build folder inside it does not count
    copy = tmp_path / "llama.cpp"
    subprocess.run(["cp", "-r", str(tree.llama_cpp), str(copy)], check=True)
    plain = find_source(copy)
    assert plain.bindings is None and source_digest(plain) != source_digest(tree)  # no bindings in the digest
    before = source_digest(plain)
    (copy / "build").mkdir()
    (copy / "build" / "junk.o").write_bytes(b"x")
    assert source_digest(plain) == before
    with open(copy / "src" / "llama.cpp", "ab") as handle:
        handle.write(b"\n")
    assert source_digest(plain) != before


def test_bad_sources_and_flags_are_refused_in_one_line(tmp_path):
    with pytest.raises(InputError, match="not a llama.cpp tree"):
        find_source(tmp_path)
    with pytest.raises(InputError, match="bad CMake flag"):
        normalize_flags(["GGML_NATIVE"])
    proc = logitlab("build", "llamacpp", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error:") and len(proc.stderr.splitlines()) == 1
    proc = logitlab("ab", "--candidate", f"lib={tmp_path}", "--tokens", "2", "--repeats", "1")
    assert proc.returncode == 2 and "no libllama.so" in proc.stderr, proc.stderr
    for sources, said in (([], "or --llama-cpp-python VERSION\n"), ([str(tmp_path), "--llama-cpp-python", "0.3.35"],
                                                                     "VERSION, not both\n")):
        proc = logitlab("build", "llamacpp", *sources)  # neither, or both: the message says which
        assert proc.returncode == 2 and proc.stderr.startswith("error: give the sources: ") \
            and proc.stderr.endswith(said), proc.stderr


def test_build_cli_of_sources_built_before_exits_0_and_copies_the_cached_folder(generic, tmp_path):
    """``logitlab build`` of the sources and flags the ``generic`` fixture built: exit 0, a cache hit (nothing
    compiled), the folder copied to ``-o`` byte for byte, its path the one line on stdout without ``--json``."""
    out = tmp_path / "generic"
    release = ("--llama-cpp-python", llama_cpp_python_version(), *(w for flag in GENERIC for w in ("-D", flag[2:])))
    proc = logitlab("build", "llamacpp", *release, "-q", "-o", str(out), "--json", "-")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    data = json.loads(proc.stdout)
    assert data["cached"] is True and data["seconds"] == 0.0 and data["cache"] == str(generic)
    assert data["folder"] == str(out.resolve())
    assert data["key"] == json.loads((generic / "logitlab.json").read_text())["key"]
    copied = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert copied == {str(p.relative_to(generic)) for p in generic.rglob("*") if p.is_file()} and copied
    assert all((out / f).read_bytes() == (generic / f).read_bytes() for f in copied)
    again = logitlab("build", "llamacpp", *release)  # not quiet: what it did on stderr, the folder on stdout
    assert again.returncode == 0 and again.stdout == f"{generic}\n", again.stderr
    assert again.stderr.strip().endswith(": cached, built before"), again.stderr


def test_the_generic_build_runs_in_its_worker_with_its_identity(generic):
    installed = load_supervised(Variant("control", "llamacpp"))
    other = load_supervised(Variant("candidate", "llamacpp", options={"lib": str(generic)}))
    try:
        described = other.describe()
        library = described["library"]
        assert library["path"] == str(generic / "lib")
        assert library["bindings"] == str(generic / "python" / "llama_cpp")
        for name, digest in library["sha256"].items():
            assert hashlib.sha256((generic / "lib" / name).read_bytes()).hexdigest() == digest
        assert set(library["sha256"]) >= {n for n in ("libllama.so.0.5.0",) if (generic / "lib" / n).exists()}
        assert described["build_identity"]["library_sha256"] == library["digest"]
        assert library["built"]["flags"][-len(GENERIC):] == GENERIC
        assert installed.describe()["library"]["digest"] != library["digest"]
        assert "AVX512 = 1" not in described["system_info"]  # GGML_NATIVE=OFF: AVX2 at most
        if "avx512f" in _cpu_flags():
            assert "AVX512 = 1" in installed.describe()["system_info"]
        # the two builds' logits, compared here with numpy (not with logitlab's comparison)
        prompt = installed.tokenize(SHORT_PROMPT)
        a = installed.run_workload(prompt, 4, None)
        b = other.run_workload(prompt, 4, a.generated)
        assert a.logits.shape == b.logits.shape
        assert np.isfinite(b.logits).all()
        if "avx512f" in _cpu_flags():  # AVX-512 kernels against AVX2 ones: not bit for bit
            assert not np.array_equal(a.logits.view(np.uint32), b.logits.view(np.uint32))
    finally:
        installed.close(wait=True)
        other.close(wait=True)


def test_ab_between_builds_names_both_libraries_and_agrees_with_numpy(generic, tmp_path):
    out = tmp_path / "ab.json"
    proc = logitlab("ab", "--prompt", SHORT_PROMPT, "--tokens", "4", "--repeats", "1", "--warmup", "0", "--quiet",
                    "--candidate", f"lib={generic}", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    control = data["manifest"]["engine"]["library"]
    candidate = data["manifest"]["candidate_engine_changes"]["library"]
    assert candidate["path"] == str(generic / "lib") and control["path"] != candidate["path"]
    assert data["manifest"]["candidate_engine_changes"]["build_identity"]["library_sha256"] == candidate["digest"]
    word = data["verdict"]["word"]
    if "avx512f" in _cpu_flags():
        assert word != "bit-exact"
    assert word in ("bit-exact", "ulp-noise", "noise", "near-tie"), word  # a build flag is not a bug


def test_golden_recorded_on_the_installed_build_checked_on_the_generic_one(generic, tmp_path):
    golden = tmp_path / "golden"
    proc = logitlab("golden", "record", "-o", str(golden), "--prompt", SHORT_PROMPT, "--tokens", "4", "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "check.json"
    proc = logitlab("golden", "check", str(golden), "--candidate", f"lib={generic}", "--allow", "near-tie",
                    "--json", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    text = json.dumps(data)
    assert "build.library_sha256" in text and "options.lib" in text, "the provenance names the library change"
    # the same build against a golden it recorded itself: bit-exact is required, and met
    own = tmp_path / "own"
    proc = logitlab("golden", "record", "-o", str(own), "--variant", f"lib={generic}", "--prompt", SHORT_PROMPT,
                    "--tokens", "4", "--quiet")
    assert proc.returncode == 0, proc.stderr
    proc = logitlab("golden", "check", str(own), "--candidate", f"lib={generic}", "--quiet")
    assert proc.returncode == 0, proc.stderr


def test_a_library_of_another_c_api_is_refused_before_any_run(previous, tmp_path):
    """The previous release's library with the installed bindings (``lib=DIR/lib``: no bindings there)."""
    out = tmp_path / "ab.json"
    proc = logitlab("ab", "--prompt", SHORT_PROMPT, "--tokens", "2", "--repeats", "1", "--warmup", "0", "--quiet",
                    "--candidate", f"lib={previous / 'lib'}", "--json", str(out))
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "does not match the installed bindings" in errors[0], proc.stderr
    assert "undefined symbol" in errors[0]


def test_one_build_per_process_in_process(generic, model_path):
    import llama_cpp  # noqa: F401 - this process has llama-cpp-python's own library

    from logitlab.engines.llamacpp import LlamaCppEngine

    with pytest.raises(EngineError, match="needs a process of its own"):
        LlamaCppEngine(model=model_path, options={"lib": str(generic)})


def test_the_previous_release_with_its_own_bindings_runs(previous):
    engine = load_supervised(Variant("candidate", "llamacpp", options={"lib": str(previous)}))
    try:
        described = engine.describe()
        assert described["engine_version"] == f"llama-cpp-python {PREVIOUS}"
        assert described["library"]["built"]["llama-cpp-python"] == PREVIOUS
        out = engine.run_workload(engine.tokenize(SHORT_PROMPT), 2, None)
        assert np.isfinite(out.logits).all() and out.logits.shape[1] == engine.n_vocab
    finally:
        engine.close(wait=True)


def test_bisect_over_real_release_history_builds_each_step_with_logitlab_build(previous, generic, tmp_path):
    """A repository of two real releases' sources (scripts/llama_release_history.py); bisect's build step is
    ``logitlab build`` (both builds are the fixtures' cache hits: same source files, same flags). The two
    releases' llama.cpp give this workload the same bits (ab says so too, docs/commands/build.md), so BAD is not
    bad and there is nothing to bisect: exit 2, with GOOD's and BAD's builds and the probe's verdict."""
    repo = tmp_path / "history"
    script = Path(__file__).resolve().parents[2] / "scripts" / "llama_release_history.py"
    made = subprocess.run([sys.executable, str(script), str(repo), PREVIOUS, llama_cpp_python_version()],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    tags = subprocess.run(["git", "-C", str(repo), "tag"], capture_output=True, text=True).stdout.split()
    assert tags == [f"v{PREVIOUS}", f"v{llama_cpp_python_version()}"]
    build = " ".join([sys.executable, "-m", "logitlab", "build", "llamacpp", ".", "-q",
                      *(w for flag in GENERIC for w in ("-D", shlex.quote(flag[2:]))), "-o", ".logitlab-lib"])
    out = tmp_path / "bisect.json"
    proc = logitlab("bisect", f"v{PREVIOUS}..v{llama_cpp_python_version()}", "--repo", str(repo), "--build", build,
                    "--probe", "numerics", "--tokens", "4", "--quiet", "--json", str(out), "--", "lib=.logitlab-lib")
    assert proc.returncode == 2, proc.stderr
    assert "is not bad: bit-exact with GOOD" in proc.stderr, proc.stderr
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                          text=True).stdout == ""  # the build folder is ignored; the checkout restored
    meta = json.loads((repo / ".logitlab-lib" / "logitlab.json").read_text())
    assert meta["key"] in (previous.name, generic.name)  # a cache hit of a fixture's build


def test_history_series_per_build(previous, generic, tmp_path):
    """Each build recorded under its own tag: one series point per build, each record naming its library."""
    hist = tmp_path / "hist"
    for tag, folder in ((f"v{PREVIOUS}-generic", previous), (f"v{llama_cpp_python_version()}-generic", generic)):
        proc = logitlab("ab", "--prompt", SHORT_PROMPT, "--tokens", "2", "--repeats", "1", "--warmup", "0",
                        "--quiet", "--candidate", f"lib={folder}", "--record", str(hist), "--commit", tag)
        assert proc.returncode == 0, proc.stderr
    out = tmp_path / "show.json"
    proc = logitlab("history", "show", "--dir", str(hist), "--json", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(out.read_text())
    text = json.dumps(shown)
    assert f"v{PREVIOUS}-generic" in text and f"v{llama_cpp_python_version()}-generic" in text
    records = sorted(p for p in hist.rglob("*.json") if not p.name.startswith("."))  # not the index
    libraries = set()
    for path in records:
        data = json.loads(path.read_text())
        changes = data["manifest"]["manifest"].get("candidate_engine_changes") or {}  # the run's own manifest
        if "library" in changes:
            libraries.add(changes["library"]["path"])
    assert libraries == {str(previous / "lib"), str(generic / "lib")}
