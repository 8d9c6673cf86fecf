"""`TextEnum`: a `str` Enum whose members are their values wherever text is made.

    class CheckStatus(TextEnum):
        OK = "ok"
    CheckStatus.OK == "ok"; f"{CheckStatus.OK}" == "ok"; json.dumps(CheckStatus.OK) == '"ok"'

A member compares and hashes equal to its value (readers that still hold plain strings keep
working), JSON writes the value, and str() / f-strings give the value too (a plain `(str, Enum)`
formats as "CheckStatus.OK" since Python 3.11).
"""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__  # type: ignore[assignment]
