"""`CheckStatus`: what one sandboxed run of checker code came to (kit/checkers/sandbox.py).

JSON (the worker's reply, `kit checker sandbox`, a verdict's `code_status`) carries the values.
"""

from __future__ import annotations

from kit.enums import TextEnum


class CheckStatus(TextEnum):
    OK = "ok"              # the check ran; `passed` is set
    REJECTED = "rejected"  # the static screen refused the source (nothing ran)
    TIMEOUT = "timeout"    # wall clock or CPU limit
    LIMIT = "limit"        # memory, recursion, output size
    ERROR = "error"        # an exception in the checker, a bad return value, a crash
