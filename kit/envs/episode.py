"""One episode's environment: a fork of a domain, tool calls, state hash and state diff.

Two ways to call a tool:
- `call_tool` is what rollouts use: it checks the call first (malformed JSON arguments,
  unknown tool, unknown or missing argument names, wrong types) and answers a structured
  error observation without touching the state when the call is bad;
- `execute` is tau2's own semantics (`Environment.get_response`): run the tool, turn any
  exception into "Error: ...". Verification replays recorded trajectories with it, so a
  replay gives exactly the observations tau2 would give.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional

from pydantic import BaseModel, ValidationError

from kit.envs.cow import WriteGuard, canonical, db_changes

if TYPE_CHECKING:  # pragma: no cover
    from kit.envs.domain import Domain

Requestor = Literal["assistant", "user"]
Side = Literal["agent", "user"]


@dataclass
class Observation:
    """What a tool call returns to the caller (the content of a tool message)."""

    content: str
    error: bool = False
    error_kind: Optional[str] = None  # malformed_arguments | unknown_tool | bad_arguments | tool_error
    # For a call the kit refused: what tau2 itself returns when it replays the recorded call
    # (None when tau2 would have executed it). Trajectories keep it so tau2 can replay them.
    tau2_content: Optional[str] = None
    refused_by_kit: Optional[str] = None  # the kit's type check refused the call, tau2 ran it (so it ran)
    # The arguments to record for this call (malformed JSON is kept under one marker key).
    recorded_arguments: Optional[dict] = None


@dataclass
class RecordChange:
    """One record that differs between two states: which side, table, key, old → new."""

    side: Literal["agent", "user"]
    table: str
    key: Any
    old: Any
    new: Any

    @property
    def op(self) -> str:
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        return "changed"

    def fields_changed(self) -> dict[str, tuple[Any, Any]]:
        """Field-level old → new (top-level fields; every field of an added or removed record)."""
        if self.old is None and isinstance(self.new, dict):
            return {k: (None, v) for k, v in sorted(self.new.items())}
        if self.new is None and isinstance(self.old, dict):
            return {k: (v, None) for k, v in sorted(self.old.items())}
        if not (isinstance(self.old, dict) and isinstance(self.new, dict)):
            return {"": (self.old, self.new)}
        keys = set(self.old) | set(self.new)
        return {
            k: (self.old.get(k), self.new.get(k))
            for k in sorted(keys)
            if canonical(self.old.get(k)) != canonical(self.new.get(k))
        }


class ReplayError(ValueError):
    """A recorded tool result does not match what the environment returns on replay."""


@dataclass
class EpisodeEnv:
    """One episode's state and tools (made by `Domain.fork`).

    Its databases are `agent_db` and `user_db` (or `dbs()`, both with their side): read them there,
    not through the tau2 environment inside (`env`), and change them through tool calls.
    """

    domain: "Domain"
    env: Any  # a tau2 Environment whose databases are forks of the domain's pristine ones
    guard: WriteGuard
    errors: list[Observation] = field(default_factory=list)

    # -- databases ----------------------------------------------------------------------
    @property
    def agent_db(self) -> BaseModel:
        """The database the assistant's tools read and write in this episode: the domain's pydantic
        DB, forked (its tables copy-on-write, kit/envs/cow.py). Every domain has one."""
        return self.env.tools.db

    @property
    def user_db(self) -> Optional[BaseModel]:
        """The database the user's tools read and write (telecom's phone, say); None where the
        domain's user has no tools or they keep no database."""
        user_tools = self.env.user_tools
        return user_tools.db if user_tools is not None else None

    def dbs(self) -> list[tuple[Side, BaseModel]]:
        """Each database of the episode with its side: ("agent", agent_db), then ("user", user_db)
        where there is one."""
        user = self.user_db
        return [("agent", self.agent_db)] + ([("user", user)] if user is not None else [])

    # -- tools --------------------------------------------------------------------------
    def execute(self, name: str, arguments: dict, requestor: Requestor = "assistant", sync: bool = True) -> Observation:
        """tau2's `get_response`: run the tool, sync, serialize; exceptions become 'Error: ...'.
        `sync=False`: tau2's bare `make_tool_call`, as its evaluator plays the gold actions (telecom's
        phone then does not learn of a change to its line, e.g. roaming enabled, until the next sync)."""
        try:
            resp = self.env.make_tool_call(name, requestor=requestor, **arguments)
            if sync:
                self.env.sync_tools()
            error = False
        except Exception as e:  # tau2 turns every tool exception into an observation
            resp, error = f"Error: {e}", True
        return Observation(self.env.to_json_str(resp), error, "tool_error" if error else None)

    def call_tool(
        self,
        name: str,
        arguments: dict | str | None,
        requestor: Requestor = "assistant",
        scratch: Optional[Callable[[], "EpisodeEnv"]] = None,
    ) -> Observation:
        """Validated tool call for rollouts: a bad call never changes the state.

        A refused call also learns what tau2 would answer when it replays the call, so the
        trajectory stays scorable by tau2's evaluator: binding errors (unknown tool, unknown
        or missing argument, malformed JSON recorded under MALFORMED_KEY) fail before any
        tool body runs, so they are asked of this env directly; a wrong-type call is tried
        in `scratch()` (a copy of this state) when given, and where tau2 would run it (its
        tools do not check types, e.g. a status outside the tool's Literal) it runs here too,
        with `refused_by_kit` saying what the kit's check found: a trajectory tau2 cannot
        replay would stop its evaluator (and GRPO's verifier).
        """
        obs = self._check_call(name, arguments, requestor)
        if obs is None:
            args = arguments if isinstance(arguments, dict) else json.loads(arguments or "{}")
            obs = self.execute(name, args, requestor)
            obs.recorded_arguments = args
        else:
            obs.recorded_arguments = _recorded(arguments)
            if obs.error_kind == "bad_arguments" and obs.content.startswith("Error: bad arguments"):
                if scratch is not None:
                    other = scratch()
                    before = other.fingerprint()
                    ref = other.execute(name, obs.recorded_arguments, requestor)
                    if ref.error and other.fingerprint() == before:
                        obs.tau2_content = ref.content
                    else:  # tau2's tools do not check argument types (a status outside its Literal, say): tau2
                        # runs this call, so the episode does too, or tau2 could not replay the trajectory
                        refused = obs.content
                        obs = self.execute(name, obs.recorded_arguments, requestor)
                        obs.recorded_arguments = _recorded(arguments)
                        obs.refused_by_kit = refused
            else:  # fails at argument binding in tau2 too: no tool body runs
                obs.tau2_content = self.execute(name, obs.recorded_arguments, requestor).content
        if obs.error:
            self.errors.append(obs)
        return obs

    def _check_call(self, name: str, arguments: Any, requestor: Requestor) -> Optional[Observation]:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                return Observation(
                    f"Error: arguments of '{name}' are not valid JSON ({e.msg} at char {e.pos})",
                    True,
                    "malformed_arguments",
                )
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return Observation(
                f"Error: arguments of '{name}' must be a JSON object, got {type(arguments).__name__}",
                True,
                "malformed_arguments",
            )
        tool = self.domain.tool(name, requestor)
        if tool is None:
            known = ", ".join(sorted(self.domain.tool_names(requestor)))
            return Observation(
                f"Error: unknown tool '{name}' for the {requestor}. Known tools: {known}",
                True,
                "unknown_tool",
            )
        params: type[BaseModel] = tool.params
        unknown = sorted(set(arguments) - set(params.model_fields))
        if unknown:
            return Observation(
                f"Error: tool '{name}' has no argument(s) {unknown}; "
                f"its arguments are {sorted(params.model_fields)}",
                True,
                "bad_arguments",
            )
        try:
            params.model_validate(arguments)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
            )
            return Observation(f"Error: bad arguments for '{name}': {problems}", True, "bad_arguments")
        return None

    def run_assertion(self, assertion) -> bool:
        """Run a tau2 EnvAssertion on this state (never raises on a failed assertion)."""
        return bool(self.env.run_env_assertion(assertion, raise_assertion_error=False))

    # -- replay -------------------------------------------------------------------------
    def replay(self, messages: list, check: bool = True) -> None:
        """Re-run the tool calls of `messages` (kit Messages) as tau2's `set_state` does.

        With `check`, a recorded result that differs from the replayed one raises
        ReplayError, exactly where tau2 raises its ValueError.
        """
        i, n = 0, len(messages)
        while i < n:
            msg = messages[i]
            i += 1
            if msg.role == "tool":
                raise ReplayError("Tool message not expected. Tool messages should always follow a tool call.")
            if msg.role in ("assistant", "user") and msg.tool_calls:
                for tc in msg.tool_calls:
                    if i >= n:
                        raise ReplayError("Tool message expected. Got None.")
                    tm = messages[i]
                    i += 1
                    if tm.role != "tool":
                        raise ReplayError(f"Tool message expected. Got {tm.role}")
                    if tc.id != tm.tool_call_id:
                        raise ReplayError(f"Tool call id mismatch. Got {tc.id} and {tm.tool_call_id}")
                    obs = self.execute(tc.name, tc.arguments, tc.requestor)
                    expected = tm.meta.get("tau2_content", tm.content) if tm.meta else tm.content
                    if check and _loads(obs.content) != _loads(expected or ""):
                        raise ReplayError(
                            f"Tool call {tc.name}({tc.arguments}) returned {obs.content[:200]!r}, "
                            f"trajectory recorded {str(tm.content)[:200]!r}"
                        )
        self.env.sync_tools()

    # -- state --------------------------------------------------------------------------
    def diff(self, other: Optional["EpisodeEnv"] = None) -> list[RecordChange]:
        """Records that differ from the pristine domain state (or from `other`'s state)."""
        if other is None:
            return [
                RecordChange(side, table, key, old, new)
                for side, db in self.dbs()
                for table, key, old, new in db_changes(self.domain.pristine_db(side), db)
            ]
        mine = {(c.side, c.table, _key(c.key)): c.new for c in self.diff()}
        theirs = {(c.side, c.table, _key(c.key)): c.new for c in other.diff()}
        out = []
        for k in sorted(set(mine) | set(theirs), key=str):
            a, b = theirs.get(k, _PRISTINE), mine.get(k, _PRISTINE)
            if a is _PRISTINE or b is _PRISTINE or canonical(a) != canonical(b):
                side, table, key = k
                old = a if a is not _PRISTINE else self.domain.pristine_record(side, table, key)
                new = b if b is not _PRISTINE else self.domain.pristine_record(side, table, key)
                if canonical(old) != canonical(new):
                    out.append(RecordChange(side, table, key, old, new))
        return out

    def same_state(self, other: "EpisodeEnv") -> bool:
        """Both databases equal (what tau2's DB check decides), comparing touched records only."""
        return self.fingerprint() == other.fingerprint()

    def fingerprint(self) -> str:
        """A hash of the state that costs O(changed records): equal states, equal prints.

        It hashes the changes from the domain's pristine state, so it compares states of
        one loaded domain; `state_hash` is the portable (tau2-compatible, slower) one.
        """
        h = hashlib.sha256(self.domain.name.encode())
        for c in self.diff():
            h.update(canonical([c.side, c.table, str(c.key), c.new]).encode())
        return h.hexdigest()

    def agent_db_hash(self) -> Optional[str]:
        """tau2's own `get_db_hash` (a full dump: exact, but slow on big databases)."""
        return self.env.get_db_hash()

    def user_db_hash(self) -> Optional[str]:
        return self.env.get_user_db_hash()

    def state_hash(self) -> str:
        """tau2-compatible hash of both databases (sha256 of the two tau2 hashes)."""
        return hashlib.sha256(f"{self.agent_db_hash()}|{self.user_db_hash()}".encode()).hexdigest()


_PRISTINE = object()
MALFORMED_KEY = "__malformed_arguments__"


def _recorded(arguments: Any) -> dict:
    """Arguments as a trajectory records them: a dict, or the raw text under MALFORMED_KEY."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return {MALFORMED_KEY: arguments}
        return value if isinstance(value, dict) else {MALFORMED_KEY: arguments}
    return {} if arguments is None else {MALFORMED_KEY: json.dumps(arguments, default=str)}


def _key(key: Any) -> Any:
    return key if key is not None else ""


def _loads(content: str) -> Any:
    try:
        return json.loads(content)
    except (json.JSONDecodeError, TypeError):
        return content
