"""A domain loaded once: pristine databases, policy, tools, tasks; forks per episode.

    from kit.envs import load_domain
    dom = load_domain("airline")            # reads db.json once per process
    task = dom.task("5")
    env = dom.fork(task)                    # initial state, init data, init actions, history
    obs = env.call_tool("get_user_details", {"user_id": "mia_li_3668"})
    env.diff()                              # records changed so far, old -> new
    env.agent_db                            # the episode's database (user_db: the user side's)

Domains come from tau2's registry (mock, airline, retail, telecom), from `register_domain`,
or from a module named by its dotted path (your own; see docs/adding_a_domain.md):

    dom = load_domain("kit.envs.library")   # imports the module: get_environment(), get_tasks()

A dotted name works wherever a domain name does (a recipe's `domain:`, `kit synthesize --domain`),
in any process, with nothing to register first. Each domain carries its coded policy rules
(kit/envs/rules/), which the engine's validator applies.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import threading
from collections import OrderedDict
from typing import Any, Callable, Optional

from kit import _tau2  # noqa: F401  (sets the offline environment before tau2 loads)
from kit.data import HELDOUT_FILES, HELDOUT_SPLITS, SHIPPED_SPLITS, heldout_tasks
from kit.envs.cow import WriteGuard, fork_db, table_fields
from kit.envs.episode import EpisodeEnv
from kit.envs.rules import BUILTIN_RULES, PolicyRule

from tau2.data_model.tasks import Task  # noqa: E402
from tau2.environment.toolkit import ToolType  # noqa: E402

BUILTIN_DOMAINS = ("mock", "airline", "retail", "telecom")

# name -> (environment constructor, tasks loader(split) -> list[Task], default split, policy rules)
_CUSTOM: dict[str, tuple[Callable[[], Any], Callable[[Optional[str]], list[Task]], Optional[str],
                         tuple[PolicyRule, ...]]] = {}
_LOADED: dict[str, "Domain"] = {}
_LOCK = threading.Lock()


def register_domain(
    name: str,
    get_environment: Callable[..., Any],
    get_tasks: Optional[Callable[[Optional[str]], list[Task]]] = None,
    default_split: Optional[str] = None,
    policy_rules: tuple[PolicyRule, ...] | list[PolicyRule] = (),
) -> None:
    """Make a domain of your own loadable by name (see docs/adding_a_domain.md).

    `get_environment()` returns a tau2 `Environment` (tools = a `ToolKitBase` subclass over
    a pydantic `DB`); `get_tasks(split)` returns tau2 `Task`s (optional); `policy_rules` are
    the policy's coded rules (kit/envs/rules/__init__.py says what a rule is).
    """
    if name in BUILTIN_DOMAINS:
        raise ValueError(f"domain name '{name}' is taken by a built-in τ² domain")
    _CUSTOM[name] = (get_environment, get_tasks or (lambda split=None: []), default_split, tuple(policy_rules))
    _LOADED.pop(name, None)


def available_domains() -> list[str]:
    return list(BUILTIN_DOMAINS) + sorted(_CUSTOM)


def domain_problem(name: str) -> Optional[str]:
    """Why `name` names no domain `load_domain` can load (None when it names one): neither a
    built-in nor a registered name, nor the dotted path of an importable module with get_environment()."""
    if name in BUILTIN_DOMAINS or name in _CUSTOM:
        return None
    if "." not in name:
        return (f"unknown domain '{name}'; available: {', '.join(available_domains())}, or the dotted path of "
                "a module of your own with get_environment() (e.g. kit.envs.library)")
    try:
        module = importlib.import_module(name)
    except ImportError as e:
        return f"domain module '{name}' cannot be imported: {e}"
    if not callable(getattr(module, "get_environment", None)):
        return f"domain module '{name}' has no get_environment() (see docs/adding_a_domain.md)"
    return None


def _from_module(path: str) -> "Domain":
    """A domain of one's own named by its module: get_environment() (required), get_tasks(split)
    and POLICY_RULES (optional), as in a tau2 domain folder. Its name is the environment's own."""
    problem = domain_problem(path)
    if problem:
        from kit.errors import UnknownName

        raise UnknownName(problem, "`kit doctor` lists the domains; docs/adding_a_domain.md adds one")
    module = importlib.import_module(path)
    env = module.get_environment()
    get_tasks = getattr(module, "get_tasks", None) or (lambda split=None: [])
    return Domain(env.domain_name, env, get_tasks, getattr(module, "DEFAULT_SPLIT", None),
                  tuple(getattr(module, "POLICY_RULES", ())))


def load_domain(name: str) -> "Domain":
    """The domain called `name`, loaded once per process."""
    with _LOCK:
        if name not in _LOADED:
            _LOADED[name] = Domain._load(name)
        return _LOADED[name]


class Domain:
    """Pristine state + tools of one domain. Never mutated after load: fork it."""

    GOLD_CACHE_SIZE = 4096

    def __init__(self, name: str, base_env: Any, get_tasks: Callable, default_split: Optional[str],
                 policy_rules: tuple[PolicyRule, ...] = ()):
        self.name = name
        self.policy_rules = policy_rules
        self.base_env = base_env
        self.policy: str = base_env.get_policy()
        self._get_tasks = get_tasks
        self.default_split = default_split
        self.pristine_agent_db = base_env.tools.db
        self.pristine_user_db = base_env.user_tools.db if base_env.user_tools is not None else None
        self._agent_tables = table_fields(self.pristine_agent_db)
        self._user_tables = table_fields(self.pristine_user_db) if self.pristine_user_db is not None else []
        self._tools = {
            "assistant": {t.name: t for t in base_env.get_tools()},
            "user": {t.name: t for t in base_env.get_user_tools()} if base_env.user_tools is not None else {},
        }
        self._gold: OrderedDict[str, EpisodeEnv] = OrderedDict()
        self._task_index: Optional[dict[str, Task]] = None
        self._task_cache: dict[Optional[str], list[Task]] = {}

    @classmethod
    def _load(cls, name: str) -> "Domain":
        if name in _CUSTOM:
            get_env, get_tasks, split, rules = _CUSTOM[name]
            return cls(name, get_env(), get_tasks, split, rules)
        if name not in BUILTIN_DOMAINS:
            return _from_module(name)
        base_env = _tau2.env_constructor(name)()
        loader = _tau2.tasks_loader(name)
        # tau2's default task set per domain: mock has one list; the others use "base".
        split = None if name == "mock" else "base"
        return cls(name, base_env, loader, split, BUILTIN_RULES.get(name, ()))

    # -- tasks --------------------------------------------------------------------------
    def tasks(self, split: Optional[str] = "default") -> list[Task]:
        """Tasks of a split ('default' = tau2's default task set; None = every task;
        'heldout' = the kit's held-out set, kit/data/, where it ships one for this domain; 'heldout_val' and
        'heldout_test' its fixed validation and test slices; 'heldout_confirm' a separate confirmation slice)."""
        if split == "default":
            split = self.default_split
        if split not in self._task_cache:  # tau2 re-reads (telecom: 14 MB) per call
            if split in HELDOUT_SPLITS and self.name in HELDOUT_FILES:
                self._task_cache[split] = heldout_tasks(self.name, split)
            else:
                try:
                    self._task_cache[split] = self._get_tasks(split)
                except ValueError as e:  # tau2: "Invalid task split name: x. Valid splits are: ..."
                    from kit.errors import UnknownName

                    raise UnknownName(f"domain '{self.name}' has no task split {split!r} ({e})",
                                      "use one of its splits, 'default' (tau2's default set) or "
                                      f"{', '.join(repr(s) for s in HELDOUT_SPLITS)}") from None
        return list(self._task_cache[split])

    def task(self, task_id: str) -> Task:
        if self._task_index is None:
            held = [t for s in SHIPPED_SPLITS for t in self.tasks(s)] if self.name in HELDOUT_FILES else []
            self._task_index = {t.id: t for t in self.tasks(None) + held}
        if task_id not in self._task_index:
            from kit.errors import UnknownName

            raise UnknownName(f"task '{task_id}' not found in domain '{self.name}'")
        return self._task_index[task_id]

    def policy_violations(self, task: Task) -> list[str]:
        """Why the task's gold actions break this domain's coded policy rules (none: [])."""
        return [why for rule in self.policy_rules if (why := rule(self, task))]

    # -- tools --------------------------------------------------------------------------
    def tool(self, name: str, requestor: str = "assistant"):
        return self._tools.get(requestor, {}).get(name)

    def tool_names(self, requestor: str = "assistant") -> list[str]:
        return list(self._tools.get(requestor, {}))

    def tool_schemas(self, requestor: str = "assistant") -> list[dict]:
        """OpenAI function-calling schemas of the assistant's (or the user's) tools."""
        return [t.openai_schema for t in self._tools.get(requestor, {}).values()]

    def tool_kind(self, name: str, requestor: str = "assistant") -> str:
        kit = self.base_env.user_tools if requestor == "user" else self.base_env.tools
        try:
            return ToolType(kit.tool_type(name)).value
        except Exception:
            return "unknown"

    def is_write_tool(self, name: str, requestor: str = "assistant") -> bool:
        return self.tool_kind(name, requestor) != ToolType.READ.value

    # -- state --------------------------------------------------------------------------
    def pristine_db(self, side: str) -> Any:
        """The loaded (never changed) database of `side`, "agent" or "user" (None: no user database)."""
        return self.pristine_agent_db if side == "agent" else self.pristine_user_db

    def pristine_record(self, side: str, table: str, key: Any) -> Any:
        db = self.pristine_db(side)
        value = db.__dict__.get(table)
        if key is None or key == "":
            return canonical_obj(value)
        return canonical_obj(dict.get(value, key)) if isinstance(value, dict) else None

    def fork(self, task: Optional[Task] = None, history: Optional[list] = None) -> EpisodeEnv:
        """A fresh episode environment: pristine state + the task's initial state.

        `history` (kit Messages) replaces the task's own message history, as tau2's
        evaluator does when it replays a whole trajectory.
        """
        guard = WriteGuard()
        env = copy.copy(self.base_env)
        env.tools = copy.copy(self.base_env.tools)
        env.tools.db = fork_db(self.pristine_agent_db, self._agent_tables, guard)
        if self.base_env.user_tools is not None:
            env.user_tools = copy.copy(self.base_env.user_tools)
            env.user_tools.db = fork_db(self.pristine_user_db, self._user_tables, guard)
        env.make_tool_call = _guarded(env, guard)
        episode = EpisodeEnv(self, env, guard)
        if task is not None:
            from kit.trajectory import messages_from_tau2

            state = task.initial_state
            if state is not None and state.initialization_data is not None:
                if state.initialization_data.agent_data is not None:
                    env.tools.update_db(state.initialization_data.agent_data)
                if state.initialization_data.user_data is not None:
                    env.user_tools.update_db(state.initialization_data.user_data)
            if state is not None and state.initialization_actions is not None:
                for action in state.initialization_actions:
                    env.run_env_function_call(action)
            if history is None and state is not None and state.message_history:
                history = messages_from_tau2(state.message_history)
        episode.replay(history or [])
        return episode

    def gold_state(self, task: Task, sync: bool = True) -> EpisodeEnv:
        """The state the task's gold actions reach (cached per task content). `sync=False`: as tau2's
        EnvironmentEvaluator plays them for its DB check (make_tool_call, no sync after each): telecom's
        phone then never learns of a gold write to its line (roaming enabled); the verifier compares with
        this one, the code checker (kit/checkers/codegen.py) with the state a gold episode really ends in."""
        key = hashlib.sha256(task.model_dump_json().encode()).hexdigest() + ("" if sync else ":nosync")
        with _LOCK:
            hit = self._gold.get(key)
            if hit is not None:
                self._gold.move_to_end(key)
                return hit
        env = self.fork(task)
        for action in (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []:
            env.execute(action.name, dict(action.arguments), action.requestor, sync=sync)
        with _LOCK:
            self._gold[key] = env
            while len(self._gold) > self.GOLD_CACHE_SIZE:
                self._gold.popitem(last=False)
        return env


def canonical_obj(value: Any) -> Any:
    from kit.envs.cow import dump_record

    return dump_record(value) if value is not None else None


def _guarded(env: Any, guard: WriteGuard) -> Callable:
    """env.make_tool_call with the write guard off for READ tools (no copies on reads)."""
    base_call = env.make_tool_call

    def make_tool_call(tool_name: str, requestor: str = "assistant", **kwargs: Any) -> Any:
        kit = env.user_tools if requestor == "user" else env.tools
        try:
            read = kit is not None and kit.has_tool(tool_name) and kit.tool_type(tool_name) == ToolType.READ
        except Exception:
            read = False
        guard.writing = not read
        try:
            return base_call(tool_name, requestor=requestor, **kwargs)
        finally:
            guard.writing = True

    return make_tool_call
