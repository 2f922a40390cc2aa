"""Locating llama.cpp's tools (``logitlab.tools``) and the script that builds them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from logitlab.errors import InputError
from logitlab.tools import (ENV_VAR, TOOLS, installed_library_sums, llama_cpp_python_version, llama_tool,
                            llama_tools_cache, llama_tools_dir)

from peers import tool

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "build-llama-tools.sh"


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "logitlab" / "llama-tools"


def test_version_is_the_installed_distribution():
    llama_cpp = pytest.importorskip("llama_cpp")
    assert llama_cpp_python_version() == llama_cpp.__version__


def test_env_var_folder_overrides_the_cache(tmp_path, monkeypatch):
    bench = executable(tmp_path / "bin" / "llama-bench")
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "bin"))
    assert llama_tools_dir() == tmp_path / "bin"
    assert llama_tool("llama-bench") == bench
    with pytest.raises(InputError, match=r"no llama.cpp tool 'llama-server' in .*bin .*run scripts/build-llama-tools"
                                         r"\.sh \(or: make tools\)"):
        llama_tool("llama-server")


def test_env_var_that_is_not_a_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(InputError, match=rf"\${ENV_VAR}=.*nowhere is not a folder"):
        llama_tools_dir()


def test_non_executable_file_is_not_a_tool(tmp_path, monkeypatch):
    (tmp_path / "llama-bench").write_text("not a program")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(InputError, match="no llama.cpp tool 'llama-bench'"):
        llama_tool("llama-bench")


INSTALLED = frozenset({("a" * 64, "libllama.so.0.0.1"), ("b" * 64, "libggml.so.0.25.3")})


def built_against(folder: Path, sums) -> None:
    """The build script's flags.txt: its settings, then sha256sum's lines of the libraries it built against."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "flags.txt").write_text("llama-cpp-python=0.3.36\nflags=-DCMAKE_BUILD_TYPE=Release\n"
                                      + "".join(f"{sha}  {name}\n" for sha, name in sorted(sums)))


def test_cache_lookup_takes_the_newest_completed_build_of_this_version(empty_cache, monkeypatch):
    monkeypatch.setattr("logitlab.tools.installed_library_sums", lambda: INSTALLED)
    version = llama_cpp_python_version()
    with pytest.raises(InputError, match=rf"llama.cpp tools for llama-cpp-python {version} are not built "
                                         r"\(none in .*\): run scripts/build-llama-tools.sh"):
        llama_tools_dir()
    old, new, unfinished, other = (empty_cache / f"{version}-aaaa", empty_cache / f"{version}-bbbb",
                                   empty_cache / f"{version}-cccc", empty_cache / "0.0.1-dddd")
    for folder in (old, new, unfinished, other):
        executable(folder / "bin" / "llama-bench")
        built_against(folder, INSTALLED | {("e" * 64, "libllama-common.so.0.5.0")})  # one the engine does not load
    for folder, mtime in ((old, 1_000_000), (new, 2_000_000), (other, 3_000_000)):
        (folder / ".stamp").touch()
        os.utime(folder / ".stamp", (mtime, mtime))
    assert llama_tools_cache() == empty_cache
    assert llama_tools_dir() == new / "bin"  # not the unstamped one, nor another version's
    assert llama_tool("llama-bench") == new / "bin" / "llama-bench"


def test_cache_lookup_skips_a_newer_build_against_libraries_no_longer_installed(empty_cache, monkeypatch):
    """llama-cpp-python rebuilt after the tools were: a newer stamped build of the old bytes is not taken, and
    when no build has the installed bytes the error says to build them again (not the old tools silently)."""
    version = llama_cpp_python_version()
    matching, stale = empty_cache / f"{version}-aaaa", empty_cache / f"{version}-bbbb"
    rebuilt = {("c" * 64, "libllama.so.0.0.1"), ("b" * 64, "libggml.so.0.25.3")}
    for folder, sums, mtime in ((matching, INSTALLED, 1_000_000), (stale, rebuilt, 2_000_000)):
        executable(folder / "bin" / "llama-bench")
        built_against(folder, sums)
        (folder / ".stamp").touch()
        os.utime(folder / ".stamp", (mtime, mtime))
    monkeypatch.setattr("logitlab.tools.installed_library_sums", lambda: INSTALLED)
    assert llama_tools_dir() == matching / "bin"
    monkeypatch.setattr("logitlab.tools.installed_library_sums", lambda: frozenset({("d" * 64, "libllama.so.0.0.1")}))
    with pytest.raises(InputError, match=rf"the llama.cpp tools in .* were built against other libraries than the "
                                         rf"llama-cpp-python {version} installed now \(it was rebuilt since\): run "
                                         r"scripts/build-llama-tools.sh"):
        llama_tools_dir()


def test_the_installed_libraries_are_those_in_llama_cpp_lib():
    llama_cpp = pytest.importorskip("llama_cpp")
    import hashlib

    lib = Path(llama_cpp.__file__).parent / "lib"
    expected = {(hashlib.sha256(f.read_bytes()).hexdigest(), f.name) for f in lib.glob("lib*.so.*.*")}
    assert expected and set(installed_library_sums()) == expected


def test_build_script_without_llama_cpp_python_is_one_line_exit_2(tmp_path):
    fake = executable(tmp_path / "python")
    fake.write_text("#!/bin/sh\nexit 1\n")
    proc = subprocess.run(["bash", str(SCRIPT), str(fake)], capture_output=True, text=True,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"build-llama-tools: llama-cpp-python is not installed for {fake} (run: make setup)"
    assert proc.stdout == ""


# -- with the tools built (make tools) ----------------------------------------------------------
@pytest.mark.peers
def test_build_script_is_a_silent_no_op_once_built():
    for name in TOOLS:  # fails with the build hint when they are missing
        tool(name)
    if os.environ.get(ENV_VAR):
        pytest.fail(f"unset ${ENV_VAR}: this test checks the script's own cache", pytrace=False)
    proc = subprocess.run(["bash", str(SCRIPT), sys.executable], capture_output=True, text=True, cwd=ROOT)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


@pytest.mark.peers
def test_build_script_fails_loudly_when_cmake_fails(tmp_path):
    version = llama_cpp_python_version()
    sdist = llama_tools_cache() / "sdist" / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.is_file():
        pytest.fail(f"no {sdist}: run scripts/build-llama-tools.sh first", pytrace=False)
    cache = tmp_path / "logitlab" / "llama-tools" / "sdist"
    cache.mkdir(parents=True)
    (cache / sdist.name).symlink_to(sdist)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "CMAKE_ARGS": "-DCMAKE_C_COMPILER=/nonexistent/cc"}
    proc = subprocess.run(["bash", str(SCRIPT), sys.executable], capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert proc.stdout.startswith("build-llama-tools: building llama-server llama-perplexity llama-bench "
                                  f"llama-quantize from llama-cpp-python {version} into {tmp_path}")
    assert "build-llama-tools: cmake configure failed (last lines of" in proc.stderr
    assert "/nonexistent/cc" in proc.stderr  # the log's tail names the cause
    assert not list((tmp_path / "logitlab" / "llama-tools").glob("*/.stamp"))


@pytest.mark.peers
def test_tools_run_the_libraries_llama_cpp_python_loads():
    """Each tool links libllama and libggml*, and those resolve to files byte-identical to the ones in
    site-packages/llama_cpp/lib (the static build of old linked its own second copy of ggml: no such lines)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    engine_lib = Path(llama_cpp.__file__).parent / "lib"
    for name in TOOLS:
        out = subprocess.run(["ldd", str(tool(name))], capture_output=True, text=True, check=True).stdout
        linked = dict(line.split(" => ") for line in (ln.strip() for ln in out.splitlines()) if " => " in line)
        assert "not found" not in out
        for soname in ("libllama.so.0", "libggml.so.0", "libggml-base.so.0", "libggml-cpu.so.0"):
            assert soname in linked, f"{name} does not link {soname}:\n{out}"
            path = Path(linked[soname].split(" (")[0]).resolve()
            ours = (engine_lib / soname).resolve()
            assert path != ours  # a copy beside the tool, so a deleted venv leaves the cache working
            assert path.read_bytes() == ours.read_bytes(), f"{name}: {path} is not {ours}"
