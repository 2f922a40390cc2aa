"""One exception root for logitlab.

``LogitlabError`` and its subclasses are the errors a user can cause and fix
(bad input, a missing model, an engine that crashed). The command line catches
them at the boundary and prints one ``error:`` line with exit code 2.
``InternalError`` is a bug in logitlab itself and is never caught quietly.

An experiment that stops on an error keeps what it measured: the error's
``partial`` holds the result so far (a typed result object), and the command
line writes it before it reports the error.
"""

from __future__ import annotations

from typing import Any, Sequence


class LogitlabError(Exception):
    """Base of every error a user can act on.

    Attributes:
        partial: the result measured before the error (e.g. an ``AbResult``
            whose ``error`` says what stopped it), or None.
    """

    def __init__(self, *args: Any, partial: Any = None):
        super().__init__(*args)
        self.partial = partial


class InputError(LogitlabError):
    """Bad input: an option, a file, a prompt, a shape or a value."""


class EngineError(LogitlabError):
    """An engine failed to load, crashed or returned unusable output."""


class EngineCrashed(EngineError):
    """The engine's process died (a signal, an abort, a non-zero exit, an out-of-memory kill) or hung past its
    timeout: an outcome of the run, not a mistake of the user.

    Attributes:
        evidence: what is known of the crash (:class:`logitlab.engines.supervised.CrashEvidence`).
    """

    def __init__(self, *args: Any, evidence: Any = None, partial: Any = None):
        super().__init__(*args, partial=partial)
        self.evidence = evidence


class Interrupted(LogitlabError):
    """The run was interrupted (Ctrl-C); ``partial`` holds what was measured. Exit code 130."""


class InternalError(Exception):
    """A bug in logitlab itself (not a LogitlabError: it is never swallowed)."""


def check_at_least(name: str, value: int, minimum: int, why: str = "") -> int:
    """``value`` when it is at least ``minimum`` (a count an option gives: ``--tokens``, ``--top-k``, ...).

    Raises:
        InputError: ``"{name} must be at least {minimum} ({why}), got {value}"`` (without the parenthesis when
            ``why`` is empty).
    """
    if value < minimum:
        raise InputError(f"{name} must be at least {minimum}{f' ({why})' if why else ''}, got {value}")
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> Any:
    """``value`` when it is one of ``choices``.

    Raises:
        InputError: ``"{name} {value!r} is not valid: use one of {choices, comma-separated}"``.
    """
    if value not in choices:
        raise InputError(f"{name} {value!r} is not valid: use one of {', '.join(choices)}")
    return value
