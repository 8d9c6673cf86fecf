"""Code checkers written from a task's gold final state (by the kit, not a model).

`state_checker_source(domain, task)` emits a `check(state, trajectory)` that passes only
when exactly the records (and fields) the gold actions change have changed, each to its
gold value,
and every required gold action (any non-READ tool: writes, transfers) was called with
the arguments the task compares.
It closes the gap the τ² criteria leave open where a task's reward basis has no DB check
(telecom's ENV_ASSERTION-only tasks): a stray write that leaves the assertions true. It
runs in the sandbox like any model-written checker, and shows the form a synthesizer's
checker takes.
"""

from __future__ import annotations

import json

from kit.checkers.checker import state_view
from kit.envs.domain import Domain

TEMPLATE = '''EXPECTED = json_expected
REQUIRED = json_required

def called(name, args, trajectory):
    for m in trajectory:
        for c in m.get("tool_calls") or []:
            if c.get("name") == name and all(c.get("arguments", {}).get(k) == v for k, v in args.items()):
                return True
    return False

def check(state, trajectory):
    for name, args in REQUIRED:
        if not called(name, args, trajectory):
            return {"passed": False, "missing_action": name}
    changed = sorted([str(c[0]), str(c[1]), str(c[2]), sorted(c[3])] for c in state["changed"])
    want = sorted([e[0], e[1], e[2], sorted(e[3])] for e in EXPECTED)
    if changed != want:
        extra = [c for c in changed if c not in want]
        missing = [w for w in want if w not in changed]
        return {"passed": False, "unexpected": extra[:5], "missing": missing[:5]}
    for side, table, key, fields in EXPECTED:
        records = state[side][table]
        got = records.get(key) if key != "None" else records
        for name, value in fields.items():
            current = got if name == "" else (got.get(name) if isinstance(got, dict) else None)
            if current != value:
                return {"passed": False, "wrong_value": [side, table, key, name]}
    return True
'''


def _lit(v) -> str:
    """A compact Python literal (no spaces): sandboxed sources have a size limit."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{_lit(k)}:{_lit(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_lit(x) for x in v) + "]"
    return repr(v)


def state_checker_source(domain: Domain, task) -> str:
    gold = domain.gold_state(task)
    view = json.loads(json.dumps(state_view(gold), default=str))
    expected = []  # only the fields the gold changed, with their gold values: compact
    for side, table, key, fields in view["changed"]:
        record = view[side][table].get(str(key)) if key is not None else view[side][table]
        values = {f: record if f == "" else (record.get(f) if isinstance(record, dict) else None) for f in fields}
        expected.append([str(side), str(table), str(key), values])
    required = []
    for a in (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []:
        if domain.is_write_tool(a.name, a.requestor):
            keys = a.arguments.keys() if a.compare_args is None else a.compare_args
            required.append([a.name, {k: a.arguments[k] for k in keys if k in a.arguments}])
    required = json.loads(json.dumps(required, default=str))
    return TEMPLATE.replace("json_expected", _lit(expected)).replace("json_required", _lit(required))
