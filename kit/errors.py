"""Errors a user can fix, told apart from bugs.

Every expected user error (unknown domain, stage, split or task; a missing model folder, task file
or run; an unreachable endpoint; a malformed input file; a recipe problem; a GPU-only backend on a
machine without a GPU) is a `UserError`: its message names what is wrong, its `hint` says how to
fix it. The `kit` command prints both, without a traceback, and exits with status 2 (`--debug`
shows the traceback). Anything else is a bug: it keeps its traceback and exits with status 1.

Each class also derives from the builtin a caller would catch (KeyError, FileNotFoundError,
ValueError, RuntimeError), so code that catches those keeps working.
"""

from __future__ import annotations

USAGE_STATUS = 2  # what `kit` exits with on a UserError (argparse's status for a bad flag too)


class UserError(Exception):
    """An error the user can act on: `str(e)` is the message, `e.hint` how to fix it."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:  # KeyError's own __str__ would quote the message
        return str(self.args[0])


class UnknownName(UserError, KeyError):
    """A domain, stage, split, task or model name that does not exist."""


class NotFound(UserError, FileNotFoundError):
    """A file or folder the user named is not there (model folder, task file, run, training data)."""


class BadInput(UserError, ValueError):
    """A file or value the user gave cannot be read (malformed JSONL line, recipe problem, bad flag value)."""


class Unavailable(UserError, RuntimeError):
    """Something the command needs is not on this machine or not answering (GPU, package, endpoint)."""


def describe(e: BaseException) -> tuple[str, str]:
    """(message, hint) of a user error for printing: a UserError's own, or pydantic's per-field
    errors of a config (one line per bad field)."""
    if isinstance(e, UserError):
        return str(e), e.hint
    if _config_error(e):
        lines = []
        for err in e.errors():
            field = ".".join(str(x) for x in err.get("loc", ())) or "(value)"
            lines.append(f"{field}: {err.get('msg')} (got {err.get('input')!r})")
        return f"invalid {e.title}:\n  " + "\n  ".join(lines), "the names are the command's --flags (kit <cmd> --help)"
    return str(e), ""


def _config_error(e: BaseException) -> bool:
    """A pydantic error of a settings model (a stage Config, a mechanism config): bad user values."""
    from pydantic import ValidationError

    return isinstance(e, ValidationError) and str(e.title).endswith(("Config", "Knobs"))


def is_user_error(e: BaseException) -> bool:
    return isinstance(e, UserError) or _config_error(e)


def user_error_names() -> set[str]:
    """Class names of every user error loaded so far (for telling a failed notebook's user error,
    known only by its exception's name, from a bug). The caller imports the modules that declare
    the ones it may meet (kit.runner.execute does: this module imports nothing of the kit)."""
    names, todo = set(), [UserError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo += cls.__subclasses__()
    return names
