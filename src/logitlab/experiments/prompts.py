"""Prompts: the one prompt of ``ab`` / ``invariance`` / ``dump`` and prompt sets for ``verify``.

The built-in set lives in ``logitlab/data/prompts.jsonl``, one JSON object per
line: ``name``, ``kind`` (prose, code, list, numbers, dialogue, ...), ``set``
(``default`` or ``calibration``) and ``text``. The ``calibration`` prompts are
held out: ``--guard auto`` calibrates its margin τ on them, never on the
prompts it is then measured on.

A user's ``--prompts FILE`` is either JSONL (every non-empty line a JSON object
with ``text`` or ``prompt`` and optionally ``name``, or a JSON string) or plain
text with one prompt per non-empty line (write a newline inside a prompt as
``\\n``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from logitlab.errors import InputError

DEFAULT_PROMPT = (
    "The lighthouse keeper had kept a journal for thirty years. Every evening he wrote down "
    "the colour of the sea, the ships that passed, and the birds that rested on the rail. "
    "One winter night, a small boat appeared out of the fog with no one aboard. He rowed out"
)


def load_prompt(prompt: str | None, prompt_file: str | None) -> str:
    """The prompt text: ``--prompt``, ``--prompt-file`` or the built-in prose prompt.

    Raises:
        InputError: both given, the file is missing or unreadable, or the prompt is empty.
    """
    if prompt is not None and prompt_file is not None:
        raise InputError("give --prompt or --prompt-file, not both")
    if prompt_file is not None:
        try:
            prompt = Path(prompt_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read --prompt-file {prompt_file}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"--prompt-file {prompt_file} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    text = DEFAULT_PROMPT if prompt is None else prompt
    if not text.strip():
        raise InputError("the prompt is empty")
    return text


#: the built-in prompt file, next to the package's code
BUILTIN_FILE = Path(__file__).resolve().parent.parent / "data" / "prompts.jsonl"
PROMPT_SETS = ("default", "calibration")


@dataclass(frozen=True)
class Prompt:
    """One named prompt.

    Attributes:
        name: short label used in reports (unique within a set).
        text: the prompt text, fed to the engine's tokenizer as is.
        kind: what sort of text it is (prose, code, list, ...); "" when unknown.
    """

    name: str
    text: str
    kind: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "kind": self.kind, "text": self.text}


def builtin_prompts(which: str = "default") -> list[Prompt]:
    """The built-in ``default`` (9 varied prompts) or held-out ``calibration`` set (3).

    Raises:
        InputError: unknown set name, or the data file is missing (broken install).
    """
    if which not in PROMPT_SETS:
        raise InputError(f"unknown prompt set {which!r}; valid: {', '.join(PROMPT_SETS)}")
    try:
        lines = BUILTIN_FILE.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"built-in prompt file {BUILTIN_FILE} is unreadable ({exc.strerror}); reinstall logitlab")
    out = []
    for line in lines:
        if line.strip():
            item = json.loads(line)
            if item.get("set", "default") == which:
                out.append(Prompt(item["name"], item["text"], item.get("kind", "")))
    return out


def load_prompts(path: str | Path, option: str = "--prompts") -> list[Prompt]:
    """Read prompts from a JSONL or text-lines file (see the module docstring).

    Names default to ``<file stem>-<line number>``; ``option`` names the file's option in messages.

    Raises:
        InputError: unreadable file, no prompts, a malformed JSONL line
            (the message names the line), an empty prompt, or duplicate names.
    """
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {option} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{option} {path} is not UTF-8 text") from None
    lines = [(number, line) for number, line in enumerate(raw.splitlines(), 1) if line.strip()]
    if not lines:
        raise InputError(f"{option} {path} holds no prompts (it is empty)")
    jsonl = path.suffix.lower() in (".jsonl", ".json") or all(
        line.lstrip().startswith(("{", '"')) for _, line in lines)
    prompts = []
    for number, line in lines:
        default_name = f"{path.stem}-{number}"
        if jsonl:
            prompts.append(_from_json(line, number, path, default_name))
        else:
            prompts.append(Prompt(default_name, line.replace("\\n", "\n")))
    check_unique(prompts)
    return prompts


def _from_json(line: str, number: int, path: Path, default_name: str) -> Prompt:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"--prompts {path} line {number} is not valid JSON ({exc.msg}); "
                         "write one JSON object per line, or use a .txt file with one prompt per line") from None
    if isinstance(item, str):
        item = {"text": item}
    if not isinstance(item, dict):
        raise InputError(f"--prompts {path} line {number}: expected an object or a string, got "
                         f"{type(item).__name__}")
    text = item.get("text", item.get("prompt"))
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"--prompts {path} line {number}: needs a non-empty \"text\" (or \"prompt\") string")
    return Prompt(str(item.get("name") or default_name), text, str(item.get("kind", "")))


def prompts_from_texts(texts: Sequence[str]) -> list[Prompt]:
    """Prompts from ``--prompt TEXT`` options, named ``prompt-1``, ``prompt-2``, ...

    Raises:
        InputError: an empty prompt.
    """
    prompts = [Prompt(f"prompt-{i}", text) for i, text in enumerate(texts, 1)]
    for prompt in prompts:
        if not prompt.text.strip():
            raise InputError(f"--prompt {prompt.name[7:]} is empty")
    return prompts


def check_unique(prompts: Sequence[Prompt]) -> None:
    """Raise InputError when two prompts share a name."""
    seen: set[str] = set()
    for prompt in prompts:
        if prompt.name in seen:
            raise InputError(f"two prompts are named {prompt.name!r}; prompt names must be unique")
        seen.add(prompt.name)
