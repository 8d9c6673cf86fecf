"""Copy-on-write forks of a τ² database.

Why: tau2 rebuilds an environment from its JSON file for every evaluation (the airline
database is 7 MB: ~1 s per evaluation here). A kit domain keeps one pristine, validated
database in memory and forks it per episode. A fork copies only what it needs:

- every top-level field that is a table (a dict of records) becomes a `CowTable`: a dict
  that shares its records with the pristine table and deep-copies a record the first
  time a *write* tool reaches it (tau2 marks every tool READ, WRITE, THINK or GENERIC);
- every other field (lists, nested models, scalars; telecom's whole database) is
  deep-copied at fork time: such fields are small in every τ² domain.

Read tools see the pristine records directly (no copy), so a search over all airline
flights costs nothing extra. Writes land on private copies, and the table remembers which
keys it touched, so comparing two forks (or a fork and the pristine state) only looks at
touched records. Set `KIT_COW_PARANOID=1` to copy on every access, reads included.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Iterator

from pydantic import BaseModel

_MISSING = object()
PARANOID = os.environ.get("KIT_COW_PARANOID", "") not in ("", "0")


class WriteGuard:
    """Shared flag: are we inside a tool that may write? (read tools run with it off)."""

    __slots__ = ("writing",)

    def __init__(self) -> None:
        self.writing = True


class CowTable(dict):
    """A dict of records, shared with `base` until a write reaches a record."""

    __slots__ = ("base", "touched", "guard")

    def __init__(self, base: dict, guard: WriteGuard):
        dict.__init__(self, base)
        self.base = base
        self.touched: set = set()
        self.guard = guard

    # -- copy on access ------------------------------------------------------------
    def _own(self, key: Any) -> None:
        if key in self.touched or not dict.__contains__(self, key):
            return
        if not (self.guard.writing or PARANOID):
            return
        dict.__setitem__(self, key, copy.deepcopy(dict.__getitem__(self, key)))
        self.touched.add(key)

    def __getitem__(self, key: Any) -> Any:
        self._own(key)
        return dict.__getitem__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self[key]
        return default

    def values(self):  # type: ignore[override]
        if self.guard.writing or PARANOID:
            return [self[k] for k in list(dict.keys(self))]
        return dict.values(self)

    def items(self):  # type: ignore[override]
        if self.guard.writing or PARANOID:
            return [(k, self[k]) for k in list(dict.keys(self))]
        return dict.items(self)

    def __iter__(self) -> Iterator:
        return iter(list(dict.keys(self)))

    # -- writes ----------------------------------------------------------------------
    def __setitem__(self, key: Any, value: Any) -> None:
        self.touched.add(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        self.touched.add(key)
        dict.__delitem__(self, key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        if dict.__contains__(self, key):
            self._own(key)
            self.touched.add(key)
            return dict.pop(self, key)
        if default is _MISSING:
            raise KeyError(key)
        return default

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if not dict.__contains__(self, key):
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def popitem(self):  # pragma: no cover - no τ² tool uses it
        key = next(reversed(list(dict.keys(self))))
        return key, self.pop(key)

    def clear(self) -> None:
        self.touched.update(dict.keys(self))
        dict.clear(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return {k: copy.deepcopy(v, memo) for k, v in dict.items(self)}

    def __reduce__(self):  # pickles as a plain dict
        return (dict, (dict(dict.items(self)),))


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(
        isinstance(v, BaseModel) for v in value.values()
    )


def table_fields(db: BaseModel) -> list[str]:
    """Names of the fields of `db` that are tables (dicts of pydantic records)."""
    return [name for name, value in db.__dict__.items() if _is_table(value)]


def fork_db(pristine: BaseModel, tables: list[str], guard: WriteGuard) -> BaseModel:
    """A fork of `pristine`: tables become CowTables, everything else is deep-copied."""
    fork = pristine.model_copy()  # shallow: a new model whose __dict__ we replace
    for name, value in pristine.__dict__.items():
        if name in tables:
            fork.__dict__[name] = CowTable(value, guard)
        else:
            fork.__dict__[name] = copy.deepcopy(value)
    return fork


def dump_record(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, dict):
        return {k: dump_record(v) for k, v in dict.items(value)}
    if isinstance(value, list):
        return [dump_record(v) for v in value]
    return value


def canonical(value: Any) -> str:
    """The JSON tau2 hashes (sort_keys, default=str), for one record or field."""
    return json.dumps(dump_record(value), sort_keys=True, default=str)


def db_changes(base: BaseModel, fork: BaseModel) -> list[tuple[str, Any, Any, Any]]:
    """Records that differ between `base` and `fork`: (field, key or None, old, new).

    `key` is the record id for table fields and None for a whole non-table field. Only
    touched records are compared when `fork` holds CowTables over `base`'s tables; any
    other field is compared whole (small in every τ² domain).
    """
    changes: list[tuple[str, Any, Any, Any]] = []
    for name, new_value in fork.__dict__.items():
        old_value = base.__dict__.get(name, _MISSING)
        if isinstance(new_value, CowTable) and new_value.base is old_value:
            keys = sorted(new_value.touched, key=str)
            for key in keys:
                old = dict.get(old_value, key, None)
                new = dict.get(new_value, key, None)
                if old is None and new is None:
                    continue
                if old is None or new is None or canonical(old) != canonical(new):
                    changes.append((name, key, dump_record(old), dump_record(new)))
        elif isinstance(new_value, dict) and isinstance(old_value, dict):
            for key in sorted(set(new_value) | set(old_value), key=str):
                old = dict.get(old_value, key, None)
                new = dict.get(new_value, key, None)
                if old is None or new is None or canonical(old) != canonical(new):
                    changes.append((name, key, dump_record(old), dump_record(new)))
        elif old_value is _MISSING or canonical(old_value) != canonical(new_value):
            changes.append((name, None, dump_record(old_value if old_value is not _MISSING else None), dump_record(new_value)))
    return changes
