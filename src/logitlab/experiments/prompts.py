"""Prompts: the one prompt of ``ab`` / ``invariance`` / ``explain`` / ``dump`` / ``bisect`` and prompt sets for
``verify`` and ``golden record``.

Every command that takes a prompt takes it the same three ways (:func:`select_prompts`; the options are
:func:`logitlab.cli.options.prompt_options`): ``--prompt TEXT`` (repeatable where the command runs several),
``--prompt-file FILE`` (the whole file's text is one prompt) or ``--prompts FILE`` (a prompts file, below);
one of them at most. A command that runs one prompt refuses several (:func:`one_prompt`) rather than use the
first. A missing, unreadable, non-UTF-8 or empty file is one :class:`~logitlab.errors.InputError` naming the
option and the file.

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


#: The options that name a command's prompts, in the order ``--help`` lists them (:func:`select_prompts`).
PROMPT_OPTIONS = ("--prompt", "--prompt-file", "--prompts")


def read_text_file(path: str | Path, option: str) -> str:
    """The whole text of ``path``, UTF-8, for the option ``option`` (named in every message).

    Raises:
        InputError: missing or unreadable (``cannot read OPTION PATH: REASON``), or not UTF-8 text.
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {option} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{option} {path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def empty_file(option: str, path: str | Path) -> InputError:
    """The one error of an option's file that holds no prompt (empty, or only white space)."""
    return InputError(f"{option} {path} holds no prompts (it is empty)")


def read_prompt_file(path: str | Path, option: str = "--prompt-file") -> Prompt:
    """``--prompt-file FILE``: the whole file's text is one prompt, named after the file (its stem).

    Raises:
        InputError: the file is missing, unreadable, not UTF-8, or holds only white space.
    """
    text = read_text_file(path, option)
    if not text.strip():
        raise empty_file(option, path)
    return Prompt(Path(path).stem or "prompt", text)


def select_prompts(texts: Sequence[str] = (), prompt_file: str | None = None,
                   prompts_file: str | None = None) -> list[Prompt] | None:
    """The prompts given by ``--prompt TEXT`` (repeatable), ``--prompt-file FILE`` or ``--prompts FILE``.

    One of the three options at most (``--prompt`` may repeat); None when none is given (the command's
    default applies). ``--prompt`` texts are named ``prompt-1``, ``prompt-2``, ...; the ``--prompt-file``
    prompt after its file; ``--prompts`` as :func:`load_prompts`.

    Raises:
        InputError: two of the options given, or any error of :func:`read_prompt_file`,
            :func:`load_prompts` or :func:`prompts_from_texts`.
    """
    given = [name for name, value in zip(PROMPT_OPTIONS, (texts, prompt_file, prompts_file)) if value]
    if len(given) > 1:
        raise InputError(f"give one of --prompt, --prompt-file and --prompts, not {' and '.join(given)}")
    if texts:
        return prompts_from_texts(texts)
    if prompt_file:
        return [read_prompt_file(prompt_file)]
    if prompts_file:
        return load_prompts(prompts_file)
    return None


def one_prompt(texts: Sequence[str] = (), prompt_file: str | None = None, prompts_file: str | None = None, *,
               command: str, default: str | None = None) -> str:
    """The text of the one prompt ``command`` runs, from the options of :func:`select_prompts`; without any,
    ``default`` (None: the built-in prose prompt, :data:`DEFAULT_PROMPT`).

    Raises:
        InputError: as :func:`select_prompts`, or more than one prompt (``--prompt`` twice, a ``--prompts``
            file of several): ``command`` runs one, and the message says how to give it.
    """
    fix = "give one --prompt, a --prompts file of one prompt, or --prompt-file FILE (the whole file is one prompt)"
    if len(texts) > 1:
        raise InputError(f"{command} runs one prompt, but --prompt is given {len(texts)} times: {fix}")
    prompts = select_prompts(texts, prompt_file, prompts_file)
    if prompts is None:
        return DEFAULT_PROMPT if default is None else default
    if len(prompts) > 1:
        raise InputError(f"{command} runs one prompt, but --prompts {prompts_file} holds {len(prompts)}: {fix}")
    return prompts[0].text


def load_prompt(prompt: str | None, prompt_file: str | None) -> str:
    """The prompt text: ``--prompt``, ``--prompt-file`` or the built-in prose prompt (:func:`one_prompt`).

    Raises:
        InputError: both given, the file is missing, unreadable or empty, or the prompt is empty.
    """
    return one_prompt(() if prompt is None else (prompt,), prompt_file, command="this command")


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
    raw = read_text_file(path, option)
    lines = [(number, line) for number, line in enumerate(raw.splitlines(), 1) if line.strip()]
    if not lines:
        raise empty_file(option, path)
    jsonl = path.suffix.lower() in (".jsonl", ".json") or all(
        line.lstrip().startswith(("{", '"')) for _, line in lines)
    prompts = []
    for number, line in lines:
        default_name = f"{path.stem}-{number}"
        if jsonl:
            prompts.append(_from_json(line, number, path, default_name, option))
        else:
            prompts.append(Prompt(default_name, line.replace("\\n", "\n")))
    check_unique(prompts)
    return prompts


def _from_json(line: str, number: int, path: Path, default_name: str, option: str) -> Prompt:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{option} {path} line {number} is not valid JSON ({exc.msg}); "
                         "write one JSON object per line, or use a .txt file with one prompt per line") from None
    if isinstance(item, str):
        item = {"text": item}
    if not isinstance(item, dict):
        raise InputError(f"{option} {path} line {number}: expected an object or a string, got "
                         f"{type(item).__name__}")
    text = item.get("text", item.get("prompt"))
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{option} {path} line {number}: needs a non-empty \"text\" (or \"prompt\") string")
    return Prompt(str(item.get("name") or default_name), text, str(item.get("kind", "")))


def prompts_from_texts(texts: Sequence[str]) -> list[Prompt]:
    """Prompts from ``--prompt TEXT`` options, named ``prompt-1``, ``prompt-2``, ...

    Raises:
        InputError: an empty prompt.
    """
    prompts = [Prompt(f"prompt-{i}", text) for i, text in enumerate(texts, 1)]
    for prompt in prompts:
        if not prompt.text.strip():
            raise InputError("--prompt is empty" if len(prompts) == 1 else f"--prompt {prompt.name[7:]} is empty")
    return prompts


def check_unique(prompts: Sequence[Prompt]) -> None:
    """Raise InputError when two prompts share a name."""
    seen: set[str] = set()
    for prompt in prompts:
        if prompt.name in seen:
            raise InputError(f"two prompts are named {prompt.name!r}; prompt names must be unique")
        seen.add(prompt.name)
