"""One exception root for logitlab.

``LogitlabError`` and its subclasses are the errors a user can cause and fix
(bad input, a missing model, an engine that crashed). The command line catches
them at the boundary and prints one ``error:`` line with exit code 2.
``InternalError`` is a bug in logitlab itself and is never caught quietly.
"""


class LogitlabError(Exception):
    """Base of every error a user can act on."""


class InputError(LogitlabError):
    """Bad input: an option, a file, a prompt, a shape or a value."""


class EngineError(LogitlabError):
    """An engine failed to load, crashed or returned unusable output."""


class InternalError(Exception):
    """A bug in logitlab itself (not a LogitlabError: it is never swallowed)."""
