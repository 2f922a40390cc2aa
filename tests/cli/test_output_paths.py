"""Outputs are checked against inputs and each other before any work: nothing is overwritten."""

import subprocess
import sys

import pytest

from logitlab.cli.outputs import check_output_paths
from logitlab.errors import InputError

sys.path.insert(0, __file__.rsplit("/cli/", 1)[0] + "/dumps")
from rawdumps import base_tensors, write_folder  # noqa: E402


def logitlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "logitlab", *args], capture_output=True, text=True, cwd=cwd)


def one_error_line(proc, message):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr


def test_two_outputs_on_one_file_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"^--json and --markdown are the same file \(.*x\); give each its own path$"):
        check_output_paths(json=str(tmp_path / "x"), markdown=str(tmp_path / "sub" / ".." / "x"))
    assert not (tmp_path / "sub").exists()


def test_an_output_that_is_an_input_or_inside_an_input_folder_is_refused(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    dump = tmp_path / "dump"
    dump.mkdir()
    with pytest.raises(InputError, match=r"^--json .*m.gguf is the input .*m.gguf: it would be overwritten"):
        check_output_paths(json=str(model), inputs=[None, str(model)])
    with pytest.raises(InputError, match=r"^--markdown .*manifest.json lies inside the input .*dump: it would be"):
        check_output_paths(markdown=str(dump / "manifest.json"), inputs=[str(dump)])
    with pytest.raises(InputError, match=r"^--json .*out/summary.json lies inside the --out folder .*out; choose"):
        check_output_paths(json=str(tmp_path / "out" / "summary.json"), folders={"out": str(tmp_path / "out")})
    assert model.read_bytes() == b"GGUF" and not (tmp_path / "out").exists()
    check_output_paths(json=str(tmp_path / "elsewhere.json"), inputs=[str(model), str(dump)])  # fine


def test_a_parent_that_is_a_file_is_named(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(InputError, match=r"^--json .*f/x.json cannot be written: .*f is a file, not a folder$"):
        check_output_paths(json=str(tmp_path / "f" / "x.json"))


@pytest.mark.engine
def test_cli_commands_refuse_to_overwrite_their_inputs(tmp_path):
    a = write_folder(tmp_path / "a", base_tensors(), "p")
    one_error_line(logitlab("dump-diff", str(a), str(a), "--json", str(a / "x.json"), "-q"),
                   f"--json {a / 'x.json'} lies inside the input {a}")
    one_error_line(logitlab("dump", "--out", str(tmp_path / "d"), "--json", str(tmp_path / "d" / "manifest.json")),
                   "lies inside the --out folder")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"not a model, but an input all the same")
    one_error_line(logitlab("ab", "--model", str(model), "--json", str(model)), "it would be overwritten")
    one_error_line(logitlab("ab", "--json", str(tmp_path / "r"), "--log", str(tmp_path / "r")),
                   "--json and --log are the same file")
    assert model.read_bytes() == b"not a model, but an input all the same"
    assert not (tmp_path / "r").exists() and not (tmp_path / "d").exists()


def test_probing_leaves_no_folder_behind_and_the_writers_create_it(tmp_path):
    from logitlab.cli.outputs import write_reports

    target = tmp_path / "new" / "deeper" / "r.json"
    check_output_paths(json=str(target), markdown=str(tmp_path / "new" / "r.md"))
    assert not (tmp_path / "new").exists()

    import json

    from logitlab import report
    from logitlab.dumps import diff_dumps, open_dump

    a = write_folder(tmp_path / "a", base_tensors(), "p")
    result = diff_dumps(open_dump(a), open_dump(a))  # a real result: the writers render its report
    write_reports(result, {"json_path": str(target), "markdown_path": str(tmp_path / "new" / "r.md")})
    assert json.loads(target.read_text()) == result.to_dict()
    assert (tmp_path / "new" / "r.md").read_text() == report.markdown(result)


@pytest.mark.engine
def test_a_command_failing_on_bad_input_leaves_no_output_folder(tmp_path):
    one_error_line(logitlab("ab", "--candidate", "flash_attn=banana", "--json", str(tmp_path / "o" / "r.json")),
                   "bad value 'banana'")
    assert list(tmp_path.iterdir()) == []


def test_stdout_and_a_file_for_a_folder_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"^--markdown -: this command writes --markdown to a file, not to stdout; "):
        check_output_paths(markdown="-")
    check_output_paths(json="-")  # --json -: stdout, for every command (tests/cli/test_option_spelling.py)
    (tmp_path / "prompts.txt").write_text("hi")
    with pytest.raises(InputError, match=r"^--out .*prompts.txt exists and is not a folder; give a folder path$"):
        check_output_paths(folders={"out": str(tmp_path / "prompts.txt")})
    with pytest.raises(InputError, match=r"^--out .*prompts.txt/sub cannot be written: .*prompts.txt is a file"):
        check_output_paths(folders={"out": str(tmp_path / "prompts.txt" / "sub")})


@pytest.mark.engine  # the commands run models when their outputs pass (here they never do)
@pytest.mark.parametrize("command", [
    ["ab"], ["verify"], ["explain"], ["invariance", "batch"], ["bench", "run", "--control", "true", "--candidate", "true"],
    ["golden", "record", "--prompt", "hi", "-o", "g"], ["golden", "check", "g"], ["golden", "update", "g", "--reason", "x"],
    ["golden", "check", "--llamacpp-kld", "k.kld"], ["report", "ab.json"], ["dump-diff", "a", "b"],
])
def test_every_report_output_is_checked_before_any_work(command, tmp_path):
    """--html too: explain and golden once let it overwrite their inputs (a model, a prompt file, a golden)."""
    one_error_line(logitlab(*command, "--markdown", "same.md", "--html", "same.md", cwd=tmp_path),
                   "--markdown and --html are the same file (same.md)")
    one_error_line(logitlab(*command, "--html", "-", cwd=tmp_path), "--html -: this command writes --html to a file")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.engine
def test_explain_and_golden_refuse_an_html_page_over_their_inputs(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The capital of France is\n")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF stand-in")
    one_error_line(logitlab("explain", "--k", "2", "--tokens", "4", "--model", str(model), "--html", str(model),
                            cwd=tmp_path), "it would be overwritten")
    one_error_line(logitlab("golden", "record", "--prompts", str(prompts), "--tokens", "2", "-o", "g", "--html",
                            str(prompts), cwd=tmp_path), "it would be overwritten")
    one_error_line(logitlab("golden", "record", "--prompts", str(prompts), "--tokens", "2", "-o", str(prompts),
                            cwd=tmp_path), "exists and is not a folder")
    assert prompts.read_text() == "The capital of France is\n" and model.read_bytes() == b"GGUF stand-in"


@pytest.mark.engine  # the commands run models when the log passes (here it never does)
@pytest.mark.parametrize("command", [["ab"], ["verify"], ["bench", "run", "--control", "true", "--candidate", "true"]])
def test_a_log_file_that_holds_something_else_is_refused_and_kept(command, tmp_path):
    """Runs are appended to ``--log``: a file that is not a run log (notes, another JSON) is refused before any
    work and left as it was (a new user's notes file once got run lines appended)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    one_error_line(logitlab(*command, "--log", str(notes), cwd=tmp_path),
                   f"--log {notes} exists and is not a logitlab run log: runs are appended to it")
    assert notes.read_text() == "hello\n" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
