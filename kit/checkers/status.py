"""`CheckStatus`: what one sandboxed run of checker code came to (kit/checkers/sandbox.py).

JSON (the worker's reply, `kit checker sandbox`, a verdict's `code_status`) carries the values.
Self-contained on purpose: kit/checkers runs in the sandbox's tree as an unprivileged user with the
system python and nothing else of the kit (tests/test_sandbox_walls.py copies kit/checkers only), so
it does not import kit.enums; it behaves as kit.enums.TextEnum does (str() and f-strings give the value).
"""

from __future__ import annotations

from enum import Enum


class CheckStatus(str, Enum):
    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__  # type: ignore[assignment]

    OK = "ok"              # the check ran; `passed` is set
    REJECTED = "rejected"  # the static screen refused the source (nothing ran)
    TIMEOUT = "timeout"    # wall clock or CPU limit
    LIMIT = "limit"        # memory, recursion, output size
    ERROR = "error"        # an exception in the checker, a bad return value, a crash
