"""Recipes: YAML files naming the stages of a run and their parameters, validated whole first.

    name: quickstart-cpu
    domain: mock                  # shared by every stage that has a `domain` (or a module of one's
                                  # own by its dotted path: kit.envs.library)
    base_model: embedded          # what unset model parameters fall back to
    seed: 0
    defaults: {threads: 2}        # any stage parameter, for every stage that has it
    stages:
      - stage: synthesize
        params: {rounds: 1, num_plans: 2}
      - stage: sft_agent          # data: the synthesize stage above (auto-wired)
      - {stage: evaluate, id: eval_sft, params: {model: "@sft_agent", trials: 1}}
      - stage: report

An ablation adds `arms`: the chain (every stage but the report) runs once per arm with the arm's
`set` overrides ("<stage id>.<param>": value) and `skip` list; stages whose resolved inputs are
identical across arms run once and are shared. The report stage then compares the arms.

    arms:
      - {name: full, paper: 56.0}
      - {name: no_validation, set: {synthesize.validation: false}, paper: 50.0}
    comparison: {metric: "pass^1", paper_metric: "airline pass^1, Qwen3-30B-A3B SFT", ...}

A GPU recipe declares the OpenAI-compatible servers it samples through under `servers:` and its stages
name them as 'server:<id>' where they take a model; `kit run` starts and stops them (kit/runner/servers.py).

Strings may use ${VAR} or ${VAR:-default} (environment variables), e.g. a GPU recipe's model
folder. `load_recipe` raises one RecipeError listing every problem it finds, each on its own
line naming the file, line and field, before anything runs.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kit.errors import BadInput
from kit.llm.spec import ModelSpec
from kit.runner.memory import Hardware
from kit.runner.servers import (
    URL_PARAMS,
    ServerPlan,
    ServerSpec,
    exposure_problems,
    plan_problems,
    plan_servers,
    resolve,
    server_id,
)
from kit.runner.stages import RUNNER_FIELDS, STAGES, all_param_names
from kit.sources import StageRef, parse_source
from kit.stages import contract, contracts, summarizes_run
from kit.stages.contract import BASE_MODEL, Produces


class RecipeError(BadInput):
    """Recipe problems, every one found: `str(e)` has one line per problem naming the file, line
    and field; the first problem's parts are `path`, `where`, `message`, `line`; all of them are
    `problems`, (line, where, message) in file order."""

    def __init__(self, path: str, where: str, message: str, line: Optional[int] = None,
                 problems: Optional[list[tuple[Optional[int], str, str]]] = None, hint: str = ""):
        self.path, self.where, self.message, self.line = str(path), where, message, line
        self.problems = problems or [(line, where, message)]

        def one(ln: Optional[int], wh: str, msg: str) -> str:
            loc = f"{self.path}:{ln}" if ln else self.path
            return f"{loc}: {wh}: {msg}" if wh else f"{loc}: {msg}"

        n = len(self.problems)
        head = [] if n == 1 else [f"{self.path}: {n} problems"]
        super().__init__("\n".join(head + [one(*p) for p in self.problems]),
                         hint or f"fix {'them' if n > 1 else 'it'} and rerun; `kit run RECIPE --validate` checks a "
                         "recipe without running anything")


# ----- the YAML schema ---------------------------------------------------------------------------

_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")

# what kit/runner/execute.py passes to `accelerate launch` itself: not in `extra_args`
_LAUNCH_OWN_FLAGS = ("--num_processes", "--config_file", "--cpu", "-m", "--module", "--multi_gpu", "--num_machines",
                     "--machine_rank", "--main_process_ip", "--main_process_port", "--same_network")


class LaunchSpec(BaseModel):
    """A stage run by `accelerate launch` (kit/runner/launch.py) instead of its notebook."""

    model_config = ConfigDict(extra="forbid")

    num_processes: int = Field(ge=1, description="Processes in all (accelerate's --num_processes).")
    config_file: Optional[str] = Field(default=None, description="accelerate config YAML (accelerate's "
                                       "--config_file); a path relative to the working directory of `kit run`.")
    cpu: bool = Field(default=False, description="Run every process on the CPU (gloo), CUDA hidden.")
    extra_args: list[str] = Field(default_factory=list, description="More `accelerate launch` flags, as given.")
    num_machines: int = Field(default=1, ge=1, description="Machines the processes are spread over (accelerate's "
                              "--num_machines; num_processes in all, the same number on each). `kit run` writes "
                              "every machine's command (<id>.nodes.sh) and a Slurm script (<id>.sbatch); with "
                              "main_process_ip on this host (loopback) it starts every machine rank itself.")
    main_process_ip: Optional[str] = Field(default=None, description="Where the machines meet (machine rank 0's "
                                           "address); default 127.0.0.1: every rank on this host.")
    main_process_port: Optional[int] = Field(default=None, ge=1, le=65535, description="The rendezvous port "
                                             "(default: a free one on loopback, else 29500).")

    @model_validator(mode="after")
    def _even_split(self) -> "LaunchSpec":
        if self.num_processes % self.num_machines:
            raise ValueError(f"num_processes ({self.num_processes}) must be a multiple of num_machines "
                             f"({self.num_machines}): every machine runs the same number of processes")
        return self

    @field_validator("extra_args")
    @classmethod
    def _not_ours(cls, v: list[str]) -> list[str]:
        for a in v:
            if a.split("=", 1)[0] in _LAUNCH_OWN_FLAGS:
                raise ValueError(f"'{a}' is set from num_processes / config_file / cpu (or by kit itself), "
                                 "not through extra_args")
        return v


class StageSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stage: str = Field(description="One of: " + ", ".join(STAGES))
    id: Optional[str] = Field(default=None, description="Unique name (default: the stage name).")
    params: dict[str, Any] = Field(default_factory=dict)
    launch: Optional[LaunchSpec] = Field(default=None, description="Run this training stage under `accelerate "
                                         "launch` with these settings instead of executing its notebook.")

    @field_validator("stage")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in STAGES:
            raise ValueError(f"unknown stage '{v}'; known stages: {', '.join(STAGES)}")
        return v

    @field_validator("id")
    @classmethod
    def _id(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _ID.match(v):
            raise ValueError(f"stage id '{v}' must start with a letter and hold only letters, digits, _ and -")
        return v


class ArmSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    label: Optional[str] = None
    set: dict[str, Any] = Field(default_factory=dict, description="'<stage id>.<param>': value")
    skip: list[str] = Field(default_factory=list, description="stage ids this arm leaves out")
    paper: Optional[float] = Field(default=None, description="The paper's number for this arm (%).")
    paper_label: Optional[str] = Field(default=None, description="The paper's name for this arm.")
    pool: Optional[str] = Field(default=None, description="Replicates: arms with the same pool name (one GRPO at "
                                "several seeds, say) get one more row on the ablation page, their episodes pooled per "
                                "task (a task's pass rate over every replicate's trials) and paired against the "
                                "reference: one GRPO run is one draw of a noisy process, their mean is the arm.")

    @field_validator("name", "pool")
    @classmethod
    def _name(cls, v: Optional[str], info) -> Optional[str]:
        if v is not None and not _ID.match(v):
            raise ValueError(f"arm {info.field_name} '{v}' must start with a letter and hold only letters, digits, "
                             "_ and -")
        return v


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str = "pass^1"
    paper_metric: Optional[str] = None
    paper_source: str = "PAPER.md, 'Ablations' (arXiv 2601.22607)"
    note: Optional[str] = None
    reference: Optional[str] = Field(default=None, description="The arm every other arm is paired against on the "
                                     "ablation page (`kit ablations`); None: the first arm with a paper number "
                                     "that is not a base arm, else the first arm.")


class Rehearsal(BaseModel):
    """A CPU recipe that rehearses GPU recipes' shape (recipes/rehearsal-cpu.yaml): which, and what they
    declare that it cannot run here (`kit run --validate` prints the list)."""

    model_config = ConfigDict(extra="forbid")

    of: list[str] = Field(min_length=1, description="The recipes it rehearses, relative to this recipe's folder.")
    not_exercised: list[str] = Field(min_length=1, description="What those declare that this recipe does not run "
                                     "(vLLM-only flags, DeepSpeed, CUDA, ...), one line each.")


class RecipeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    domain: Optional[str] = None
    base_model: str = "embedded"
    seed: int = 0
    defaults: dict[str, Any] = Field(default_factory=dict)
    stages: list[StageSpec] = Field(min_length=1)
    arms: list[ArmSpec] = Field(default_factory=list)
    comparison: Optional[Comparison] = None
    hardware: str | Hardware = Field(default="cpu", description="'cpu', or a GPU recipe's mapping {kind: gpu, gpus, "
                                     "gpu_memory_gib, zero_stage, rollout, ...} (kit.runner.memory.Hardware): "
                                     "`kit run --validate` estimates each training stage's memory against it.")
    budget_minutes: Optional[float] = Field(default=None, description="Expected wall time (documentation).")
    servers: list[ServerSpec] = Field(default_factory=list, description="OpenAI-compatible servers `kit run` "
                                      "starts and stops (kit/runner/servers.py); a stage names one as "
                                      "'server:<id>' where it takes a model.")
    check_budgets: bool = Field(default=True, description="Refuse episode budgets that cannot fit a dialogue that "
                                "scores (kit.rollout.loop.step_budget_warning). false only for plumbing tests "
                                "whose rewards mean nothing.")
    rehearsal: Optional[Rehearsal] = Field(default=None, description="This recipe rehearses others (GPU recipes) "
                                           "on this machine: which, and what of theirs it cannot exercise.")

    @model_validator(mode="after")
    def _reference_is_an_arm(self) -> "RecipeSpec":
        ref = self.comparison.reference if self.comparison else None
        if ref is not None and ref not in [a.name for a in self.arms]:
            raise ValueError(f"comparison.reference '{ref}' is not an arm of this recipe "
                             f"(arms: {', '.join(a.name for a in self.arms) or 'none'})")
        return self


# ----- the validated, expanded plan --------------------------------------------------------------


@dataclass
class PlannedStage:
    """One stage execution: where it goes, its parameters with references still symbolic."""

    stage: str
    id: str
    arm: Optional[str]
    params: dict[str, Any]          # validated, defaults applied; references as "@<key>"
    index: int                      # position in the recipe's `stages`
    key: str = ""                   # unique within the run: "<arm>/<id>" or "<id>"
    refs: dict[str, str] = field(default_factory=dict)  # param -> key of the referenced stage
    launch: Optional[dict] = None   # LaunchSpec as a dict, config_file absolute: run under accelerate launch
    servers: dict[str, str] = field(default_factory=dict)  # param -> id of the server it names ('server:<id>')

    def __post_init__(self) -> None:
        self.key = f"{self.arm}/{self.id}" if self.arm else self.id


@dataclass
class Recipe:
    path: Path
    text: str
    spec: RecipeSpec
    raw: dict
    plan: list[PlannedStage]
    overrides: dict[str, Any] = field(default_factory=dict)
    memory: list = field(default_factory=list)  # kit.runner.memory.Estimate per training stage (GPU recipes)
    servers: list[ServerPlan] = field(default_factory=list)  # when each declared server starts and stops

    @property
    def name(self) -> str:
        return self.spec.name


# ----- loading -----------------------------------------------------------------------------------

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _line_of(node: Any, loc: tuple) -> Optional[int]:
    """1-based line of the YAML node at `loc` (keys / list indices), or of its nearest parent."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        nxt = None
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == str(part):
                    nxt = v
                    line = k.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            nxt = node.value[part]
            line = nxt.start_mark.line + 1
        if nxt is None:
            break
        node = nxt
    return line


def _fmt(loc: tuple) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _describe(value: Any) -> str:
    text = repr(value)
    return (text if len(text) <= 60 else text[:57] + "...") + f" ({type(value).__name__})"


class _Errors:
    """Collects problems; `raise_all` raises every one found so far as one RecipeError."""

    def __init__(self, path: Path, node: Any):
        self.path, self.node, self.items = path, node, []

    def add(self, loc: tuple, message: str, line_loc: Optional[tuple] = None) -> None:
        self.items.append((loc, message, line_loc if line_loc is not None else loc))

    def raise_all(self) -> None:
        if self.items:
            first: dict[tuple, tuple] = {}  # one problem per field: the first check that saw it
            for loc, msg, line_loc in self.items:
                first.setdefault(loc, (_line_of(self.node, line_loc), _fmt(loc), msg))
            found = sorted(first.values(), key=lambda p: p[0] or 0)  # file order
            raise RecipeError(str(self.path), found[0][1], found[0][2], found[0][0], found)


def _pydantic_message(err: dict) -> str:
    kind, msg = err.get("type", ""), err.get("msg", "")
    if kind == "value_error" and msg.startswith("Value error, "):
        return msg[len("Value error, "):]
    if kind == "missing":
        return "required field missing"
    if kind == "extra_forbidden":
        return "unknown field"
    got = err.get("input")
    if kind.endswith(("_type", "_parsing")) or "valid" in msg:
        return f"{msg}; got {_describe(got)}"
    return msg


def _expand_env(value: Any, loc: tuple, errors: _Errors) -> Any:
    if isinstance(value, dict):
        return {k: _expand_env(v, loc + (k,), errors) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, loc + (i,), errors) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def sub(m: re.Match) -> str:
        var, default = m.group(1), m.group(2)
        if var in os.environ and os.environ[var] != "":
            return os.environ[var]
        if default is not None:
            return default
        errors.add(loc, f"environment variable {var} is not set (the recipe says '{value}'); "
                        f"export {var}=... or pass --set")
        return m.group(0)

    out = _ENV.sub(sub, value)
    if out != value and _ENV.fullmatch(value):
        try:  # a whole-value substitution keeps YAML's types: ${N_STEPS:-4} -> 4
            return yaml.safe_load(out) if out.strip() else out
        except yaml.YAMLError:
            return out
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """'stages.grpo.train_steps=4' or 'domain=airline' -> (path, YAML-parsed value); a value YAML
    cannot read ('grpo.user_model=@sft_user') is the string as written."""
    if "=" not in text:
        raise ValueError(f"--set wants KEY=VALUE, got '{text}'")
    key, _, val = text.partition("=")
    try:
        return key.strip(), yaml.safe_load(val) if val.strip() else ""
    except yaml.YAMLError:
        return key.strip(), val.strip()


def _apply_overrides(raw: dict, overrides: dict[str, Any], path: Path) -> None:
    """--set KEY=VALUE: top-level keys (domain, base_model, seed, defaults.X), '<stage id>.<param>', or
    '<stage id>.launch[.<field>]' (null: no launch, the notebook)."""
    stages = raw.get("stages") if isinstance(raw.get("stages"), list) else []
    ids = {}
    for s in stages:
        if isinstance(s, dict):
            ids.setdefault(s.get("id") or s.get("stage"), s)
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        if head == "servers" and rest:  # servers.<id>.<field>
            sid, _, field_ = rest.partition(".")
            match = [s for s in raw.get("servers") or [] if isinstance(s, dict) and s.get("id") == sid]
            if not match or not field_:
                raise RecipeError(str(path), f"--set {key}", "must be 'servers.<server id>.<field>' with a server "
                                  f"of this recipe ({', '.join(str(s.get('id')) for s in raw.get('servers') or [] if isinstance(s, dict))})")
            match[0][field_] = value
        elif head in RecipeSpec.model_fields and head not in ("stages", "arms", "servers"):
            if rest:
                if not isinstance(raw.get(head), dict):
                    raw[head] = {}
                raw[head][rest] = value
            else:
                raw[head] = value
        elif head in ids and (rest == "launch" or rest.startswith("launch.")):  # <id>.launch[.<field>]
            field_ = rest.partition(".")[2]
            if not field_:
                ids[head]["launch"] = value
            else:
                if not isinstance(ids[head].get("launch"), dict):
                    ids[head]["launch"] = {}
                ids[head]["launch"][field_] = value
        elif head in ids and rest:
            ids[head].setdefault("params", {})
            if not isinstance(ids[head]["params"], dict):
                ids[head]["params"] = {}
            ids[head]["params"][rest] = value
        else:
            raise RecipeError(str(path), f"--set {key}", f"names neither a recipe field "
                              f"({', '.join(k for k in RecipeSpec.model_fields if k not in ('stages', 'arms'))}) "
                              f"nor '<stage id>.<param>' (stage ids: {', '.join(ids)})")


def _is_ref(v: Any) -> bool:
    """'@<stage id>' or '@<stage id>/<model folder>' (kit/sources.py: a StageRef)."""
    return isinstance(v, str) and isinstance(parse_source(v), StageRef)


def folder_problem(path: str) -> Optional[str]:
    """What is wrong with a folder a recipe names, or None: it 'does not exist', or the OS cannot even look it up
    (a name longer than it allows, ...), which `Path.is_dir` raises as OSError instead of answering."""
    try:
        return None if Path(path).expanduser().is_dir() else "does not exist"
    except OSError as e:
        return f"cannot be looked up: {e.strerror or e} ({len(path)} characters)"


def _short(text: str, keep: int = 120) -> str:
    """A value as an error message quotes it: a 5,000-character path is shown by its ends."""
    return text if len(text) <= keep else f"{text[:keep // 2]}...{text[-keep // 2:]}"


def load_recipe(path: str | Path, overrides: Optional[dict[str, Any]] = None, check_paths: bool = True,
                check_gpu: bool = True) -> Recipe:
    """Read, validate and expand a recipe. Raises one RecipeError listing every problem found
    (a schema error stops the checks that need a valid schema; the rest run to the end).
    `check_gpu`: a recipe that asks for the vllm backend needs vllm and a CUDA GPU on this machine
    (off for `kit run --validate`, which checks a GPU recipe on a laptop)."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(str(path), "", "recipe file not found", hint="recipes/ holds the committed recipes "
                          "(recipes/README.md says what each is for)")
    text = path.read_text(encoding="utf-8")
    try:
        node = yaml.compose(text)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise RecipeError(str(path), "", f"not valid YAML: {getattr(e, 'problem', e)}",
                          mark.line + 1 if mark else None) from None
    if not isinstance(raw, dict):
        raise RecipeError(str(path), "", "a recipe is a YAML mapping with at least 'name' and 'stages'")
    raw_orig = copy.deepcopy(raw)
    overrides = dict(overrides or {})
    _apply_overrides(raw, overrides, path)
    errors = _Errors(path, node)
    raw = _expand_env(raw, (), errors)
    errors.raise_all()

    try:
        spec = RecipeSpec.model_validate(raw)
    except ValidationError as e:
        for err in e.errors():
            errors.add(tuple(err["loc"]), _pydantic_message(err))
        errors.raise_all()
        raise  # pragma: no cover

    # defaults: every key must belong to some stage
    known = all_param_names()
    for k in spec.defaults:
        if k in RUNNER_FIELDS:
            errors.add(("defaults", k), "is set by the runner, not by a recipe")
        elif k not in known:
            errors.add(("defaults", k), f"no stage has a parameter '{k}'")

    ids = [s.id or s.stage for s in spec.stages]
    for i, sid in enumerate(ids):
        if ids.index(sid) != i:
            errors.add(("stages", i, "id"), f"stage id '{sid}' is used twice; give each a distinct `id`",
                       ("stages", i))
    launches = _check_launch(spec, errors, check_paths, check_gpu)
    for i, other in enumerate(spec.rehearsal.of if spec.rehearsal else []):
        if check_paths and not (path.parent / other).is_file():
            errors.add(("rehearsal", "of", i), f"recipe '{other}' does not exist (paths are relative to "
                       f"{path.parent})")
    report_ix = [i for i, s in enumerate(spec.stages) if summarizes_run(s.stage)]
    if report_ix and report_ix != [len(spec.stages) - 1]:
        errors.add(("stages", report_ix[0], "stage"), "a recipe has at most one report stage, and it comes last")

    # arms: overrides name real stages and parameters
    arm_names = [a.name for a in spec.arms]
    for j, arm in enumerate(spec.arms):
        if arm_names.index(arm.name) != j:
            errors.add(("arms", j, "name"), f"arm name '{arm.name}' is used twice")
        for key in arm.set:
            sid, _, param = key.partition(".")
            if sid not in ids or not param:
                errors.add(("arms", j, "set", key), f"must be '<stage id>.<param>' with a stage id of this recipe "
                           f"({', '.join(ids)})")
            elif param not in STAGES[spec.stages[ids.index(sid)].stage].model_fields:
                errors.add(("arms", j, "set", key), f"stage '{sid}' ({spec.stages[ids.index(sid)].stage}) has no "
                           f"parameter '{param}'")
        for k, sid in enumerate(arm.skip):
            if sid not in ids:
                errors.add(("arms", j, "skip", k), f"no stage with id '{sid}' (stage ids: {', '.join(ids)})")
    pools: dict[str, list[str]] = {}
    for arm in spec.arms:
        if arm.pool is not None:
            pools.setdefault(arm.pool, []).append(arm.name)
    for j, arm in enumerate(spec.arms):
        if arm.pool is not None and len(pools[arm.pool]) < 2:
            errors.add(("arms", j, "pool"), f"pool '{arm.pool}' has one arm ({arm.name}): a pool pools replicates, "
                       "give it two or more arms or drop `pool`")
        elif arm.pool is not None and arm.pool in arm_names:
            errors.add(("arms", j, "pool"), f"pool '{arm.pool}' is also an arm's name: the page's rows would share it")

    plan: list[PlannedStage] = []
    invalid: list[PlannedStage] = []  # stages whose params failed validation: raw params
    for arm in (spec.arms or [None]):
        chain: list[PlannedStage] = []
        for i, s in enumerate(spec.stages):
            sid = ids[i]
            if summarizes_run(s.stage) and spec.arms:
                continue  # once, after every arm
            if arm is not None and sid in arm.skip:
                continue
            params, origin = _stage_params(spec, s, sid, i, arm)
            validated = _validate_params(s.stage, params, origin, i, errors)
            if validated is None:  # its other values are still checked below (domain, folders)
                invalid.append(PlannedStage(stage=s.stage, id=sid, arm=None, params=params, index=i))
                continue
            ps = PlannedStage(stage=s.stage, id=sid, arm=arm.name if arm else None, params=validated, index=i,
                              launch=copy.deepcopy(launches.get(i)))
            _wire(ps, chain, spec, origin, errors)
            _use_servers(ps, spec, origin, errors)
            chain.append(ps)
        plan += chain
    if spec.arms and report_ix:
        i = report_ix[0]
        s = spec.stages[i]
        params, origin = _stage_params(spec, s, ids[i], i, None)
        validated = _validate_params(s.stage, params, origin, i, errors)
        if validated is not None:
            plan.append(PlannedStage(stage=s.stage, id=ids[i], arm=None, params=validated, index=i))

    servers = _check_servers(spec, plan, errors, check_paths)
    if check_paths:
        _check_semantics(plan, spec, errors, invalid, check_gpu)
    memory = _check_memory(plan, spec, errors)
    errors.raise_all()
    return Recipe(path=path, text=text, spec=spec, raw=raw_orig, plan=plan, overrides=overrides, memory=memory,
                  servers=servers)


def _use_servers(ps: PlannedStage, spec: RecipeSpec, origin: dict, errors: _Errors) -> None:
    """'server:<id>' in a parameter that takes a model (or GRPO's rollout_server URL): the server's URL,
    the server recorded in `ps.servers`."""
    known = {s.id: s for s in spec.servers}
    for name, value in list(ps.params.items()):
        sid = server_id(value)
        if sid is None:
            continue
        where = origin.get(name, ("stages", ps.index, "params", name))
        ref = contract(ps.stage).references.get(name)
        if name not in URL_PARAMS and (ref is None or ref.kind != Produces.MODEL):
            errors.add(where, f"'{value}': '{name}' takes no server (a server stands for a model parameter or "
                       f"GRPO's rollout_server)")
        elif sid not in known:
            errors.add(where, f"'{value}' names no server of this recipe (servers: "
                       f"{', '.join(known) or 'none; declare them under `servers:`'})")
        else:
            ps.servers[name] = sid
            ps.params[name] = resolve(name, known[sid])


def _check_servers(spec: RecipeSpec, plan: list[PlannedStage], errors: _Errors, check_paths: bool) -> list[ServerPlan]:
    """Distinct ids and ports; a model that is a folder here or a model stage of the plan; the plan; a key
    for a server listening beyond loopback."""
    seen: dict[str, int] = {}
    ports: dict[int, str] = {}  # every server runs on this machine: one port each
    for i, s in enumerate(spec.servers):
        if s.id in seen:
            errors.add(("servers", i, "id"), f"server id '{s.id}' is used twice")
        seen.setdefault(s.id, i)
        if s.port in ports:
            errors.add(("servers", i, "port"), f"port {s.port} is server '{ports[s.port]}'s already")
        ports.setdefault(s.port, s.id)
        src = s.source
        if src is not None:
            match = [ps for ps in plan if ps.id == src.id]
            if match:
                c = contract(match[0].stage)
                if c.produces != Produces.MODEL:
                    errors.add(("servers", i, "model"), f"'{s.model}' is a {match[0].stage} stage, which produces "
                               f"{c.produces.value}, not a model to serve")
                elif src.output is not None and src.output not in c.models:
                    errors.add(("servers", i, "model"), f"'{s.model}': a {match[0].stage} stage writes no model "
                               f"folder '{src.output}' (its model folders: {', '.join(c.models)})")
        elif check_paths and s.model != "embedded" and (why := folder_problem(s.model)):
            errors.add(("servers", i, "model"), f"model folder '{_short(s.model)}' {why} (give an HF folder, "
                       "'embedded' or '@<stage id>')")
    plans = plan_servers(spec.servers, plan)
    for i, field_, message in plan_problems(plans, plan) + exposure_problems(spec.servers):
        errors.add(("servers", i, field_), message)
    _check_weight_sync(spec, plan, errors)
    return plans


def _check_weight_sync(spec: RecipeSpec, plan: list[PlannedStage], errors: _Errors) -> None:
    """GRPO's rollout server must take its weights the way weight_sync pushes them: `transformers serve`
    loads no LoRA adapter at run time (weight_sync: folder), and a pinned one refuses the step folders."""
    index = {s.id: i for i, s in enumerate(spec.servers)}
    for ps in plan:
        sid = ps.servers.get("rollout_server")
        if sid is None or spec.servers[index[sid]].engine != "transformers":
            continue
        p = ps.params
        mode = p.get("weight_sync") or "auto"
        if mode == "auto":
            mode = "lora_adapter" if p.get("lora") else "folder"
        if mode == "lora_adapter":
            errors.add(("stages", ps.index, "params", "weight_sync"), f"server '{sid}' is `transformers serve`, which "
                       "loads no LoRA adapter at run time: set weight_sync: folder (the merged weights, a folder per step)")
        elif spec.servers[index[sid]].pinned:
            errors.add(("servers", index[sid], "pinned"), f"stage '{ps.key}' pushes its weights to server '{sid}' as "
                       "a folder per step, which a pinned `transformers serve` refuses: set pinned: false")


def _check_launch(spec: RecipeSpec, errors: _Errors, check_paths: bool = True,
                  check_gpu: bool = True) -> dict[int, dict]:
    """Each stage's `launch:` (only training stages take one), its config_file made absolute and
    checked to exist; `check_gpu`: a GPU launch (no `cpu: true`, no config file) needs CUDA here.
    {stage index: launch dict}."""
    import importlib.util

    out = {}
    for i, s in enumerate(spec.stages):
        if s.launch is None:
            continue
        if not contract(s.stage).launchable:  # the training stages (their CONTRACT says so)
            launchable = [n for c in contracts() if c.launchable for n in c.names]
            errors.add(("stages", i, "launch"), f"stage '{s.stage}' runs only as a notebook; `launch` (accelerate "
                       f"launch) is for the training stages: {', '.join(launchable)}")
            continue
        launch = s.launch.model_dump()
        if launch["num_machines"] == 1:  # one machine: the launch (and its fingerprint) as before machines existed
            for k in ("num_machines", "main_process_ip", "main_process_port"):
                launch.pop(k)
        if importlib.util.find_spec("accelerate") is None:
            errors.add(("stages", i, "launch"), "`launch` needs the accelerate package (pip install accelerate)")
        if launch["config_file"] is not None:
            f = Path(launch["config_file"]).expanduser()
            if check_paths and not f.is_file():
                errors.add(("stages", i, "launch", "config_file"), f"accelerate config file '{f}' does not exist")
            launch["config_file"] = str(f.resolve())
        elif check_gpu and not launch["cpu"]:
            import torch

            if not torch.cuda.is_available():
                errors.add(("stages", i, "launch", "cpu"), f"launch: {launch['num_processes']} GPU process(es) "
                           "but this machine has no CUDA GPU; set `cpu: true` to run the processes on the CPU",
                           ("stages", i, "launch"))
        out[i] = launch
    return out


def _check_memory(plan: list[PlannedStage], spec: RecipeSpec, errors: _Errors) -> list:
    """A GPU recipe's training stages must fit its declared GPUs (kit.runner.memory); the estimates."""
    hw = spec.hardware
    if isinstance(hw, str):
        if hw == "gpu":
            errors.add(("hardware",), "a GPU recipe declares its hardware as a mapping, e.g. {kind: gpu, gpus: 8, "
                       "gpu_memory_gib: 140, zero_stage: 2, rollout: server, model_family: qwen3-30b-a3b}, so that "
                       "its memory can be checked (kit/runner/memory.py)")
        elif hw != "cpu":
            errors.add(("hardware",), f"'{hw}' is neither 'cpu' nor a GPU mapping {{kind: gpu, gpus, ...}}")
        return []
    if hw.kind != "gpu":
        return []
    from kit.runner.memory import KNOWN_MODELS, estimate_plan

    if hw.model_family is not None and hw.model_family not in KNOWN_MODELS:
        errors.add(("hardware", "model_family"), f"unknown model_family '{hw.model_family}'; known: "
                   f"{', '.join(KNOWN_MODELS)} (or give model_params_b)")
        return []
    estimates, unsized = estimate_plan(plan, hw)
    for i, why in unsized:
        errors.add(("stages", i, "params", "model"), why, ("stages", i))
    for e in estimates:
        if hw.rollout == "server" and e.user == "vllm":
            errors.add(("stages", e.index, "params", "user_model"),
                       f"the hardware says rollout: server, but stage '{e.key}' samples its user simulator "
                       "in-process on vLLM (a model folder with backend: vllm), whose engine would share the "
                       "training GPU; serve that model with `vllm serve` (make vllm-serve) and give user_model: "
                       "openai:http://HOST:PORT/v1#MODEL, or declare rollout: in_process", ("stages", e.index))
        if e.total > hw.gpu_memory_gib:
            errors.add(("stages", e.index, "params", e.field),
                       f"stage '{e.key}' needs about {e.total:.0f} GiB per process (weights {e.weights:.0f}, "
                       f"gradients {e.grads:.0f}, optimizer {e.optimizer:.0f}, activations {e.activations:.0f}, "
                       f"rollout engine {e.rollout:.0f}, overhead {e.overhead:.0f}) but the recipe's hardware has "
                       f"{hw.gpu_memory_gib:g} GiB per GPU ({hw.gpus} GPU(s), ZeRO-{hw.zero_stage}, rollout "
                       f"{hw.rollout}); use LoRA, a higher zero_stage, more GPUs, "
                       + ("a user simulator behind a server (user_model: openai:URL#MODEL) " if e.rollout else "")
                       + "or shorter sequences", ("stages", e.index))
    return estimates


def _stage_params(spec: RecipeSpec, s: StageSpec, sid: str, i: int, arm: Optional[ArmSpec]) -> tuple[dict, dict]:
    """Merged params and, per param, the YAML location it came from (for error lines)."""
    fields = STAGES[s.stage].model_fields
    params: dict[str, Any] = {}
    origin: dict[str, tuple] = {}
    if "domain" in fields and spec.domain is not None:
        params["domain"], origin["domain"] = spec.domain, ("domain",)
    if "seed" in fields:
        params["seed"], origin["seed"] = spec.seed, ("seed",)
    for k, v in spec.defaults.items():
        if k in fields:
            params[k], origin[k] = v, ("defaults", k)
    for k, v in s.params.items():
        params[k], origin[k] = v, ("stages", i, "params", k)
    if arm is not None:
        j = spec.arms.index(arm)
        for key, v in arm.set.items():
            target, _, k = key.partition(".")
            if target == sid:
                params[k], origin[k] = v, ("arms", j, "set", key)
    return params, origin


def _validate_params(stage: str, params: dict, origin: dict, i: int, errors: _Errors) -> Optional[dict]:
    runner_set = [k for k in params if k in RUNNER_FIELDS]
    for k in runner_set:
        errors.add(origin.get(k, ("stages", i, "params", k)), "is set by the runner, not by a recipe")
    if runner_set:
        return None
    try:
        return STAGES[stage].model_validate(params).model_dump()
    except ValidationError as e:
        for err in e.errors():
            loc = tuple(err["loc"])
            name = loc[0] if loc else ""
            base = origin.get(name)
            where = base + tuple(loc[1:]) if base else ("stages", i, "params") + loc
            msg = _pydantic_message(err)
            if err.get("type") == "missing":
                msg = (f"required field missing for stage '{stage}' (set it in the stage's params, "
                       f"in `defaults`{', or the recipe-level `' + name + '`' if name == 'domain' else ''})")
                where = ("stages", i, "params", name)
                errors.add(where, msg, ("stages", i))
            elif err.get("type") == "extra_forbidden":
                known = ", ".join(STAGES[stage].model_fields)
                errors.add(where, f"stage '{stage}' has no parameter '{name}' (it has: {known})")
            else:
                errors.add(where, msg)
        return None


def _wire(ps: PlannedStage, chain: list[PlannedStage], spec: RecipeSpec, origin: dict, errors: _Errors) -> None:
    """Resolve `@id` references and auto-wire unset reference fields (symbolically: '@<key>')."""
    for name, ref in contract(ps.stage).references.items():
        value = ps.params.get(name)
        where = origin.get(name, ("stages", ps.index, "params", name))
        if _is_ref(value):
            src = parse_source(value)
            target = src.id
            match = [c for c in chain if c.id == target]
            if not match:
                earlier = ", ".join(c.id for c in chain) or "none"
                skipped = f" (arm '{ps.arm}' skips it)" if ps.arm and target in [s.id or s.stage for s in spec.stages] \
                    else ""
                errors.add(where, f"'{value}' names no earlier stage{skipped}; earlier stages: {earlier}")
                continue
            tgt = match[-1]
            produces = contract(tgt.stage).produces
            if produces != ref.kind:
                errors.add(where, f"'{value}' is a {tgt.stage} stage, which produces "
                           f"{produces.value}, but '{name}' needs a {ref.kind.value}")
                continue
            folders = contract(tgt.stage).models
            if src.output is not None and (produces != Produces.MODEL or src.output not in folders):
                errors.add(where, f"'{value}': a {tgt.stage} stage writes no model folder '{src.output}'"
                           + (f" (its model folders: {', '.join(folders)})" if produces == Produces.MODEL else ""))
                continue
            ps.refs[name] = tgt.key
        elif value is None:
            match = [c for c in chain if c.stage in ref.wire_from]
            if match:
                ps.refs[name] = match[-1].key
                ps.params[name] = "@" + match[-1].id
            elif ref.fallback == BASE_MODEL:
                ps.params[name] = spec.base_model
            elif ref.fallback is not None:
                ps.params[name] = ref.fallback


def _gpu_user(plan: list[PlannedStage]) -> Optional[tuple[PlannedStage, str]]:
    """The first stage (and field) that asks for the GPU-only vllm backend, if any."""
    for ps in plan:
        if ps.params.get("backend") == "vllm":
            return ps, "backend"
        for name in contract(ps.stage).references:
            v = ps.params.get(name)
            if isinstance(v, str) and v.startswith("vllm:"):
                return ps, name
    return None


def _check_semantics(plan: list[PlannedStage], spec: RecipeSpec, errors: _Errors,
                     invalid: list[PlannedStage] = (), check_gpu: bool = True) -> None:
    """Things a type cannot say: known domains, model folders that exist, split names, episode
    budgets that can score. `invalid` stages (params that failed validation) get the checks that
    need no valid params: domain, folders, files."""
    from kit.envs import domain_problem

    seen_dirs: set[str] = set()
    seen_domains: set[str] = set()
    gpu = _gpu_user(plan) if check_gpu else None
    if gpu is not None:
        from kit.llm.vllm_backend import unavailable

        missing = unavailable()
        if missing:
            errors.add(("stages", gpu[0].index, "params", gpu[1]), f"{missing[0]} ({missing[1]})",
                       ("stages", gpu[0].index))
    for ps in [*plan, *invalid]:
        p = ps.params
        loc = ("stages", ps.index, "params")
        domain = p.get("domain")
        bad_domain = domain_problem(domain) if isinstance(domain, str) else None  # dotted: a module of one's own
        if bad_domain and domain not in seen_domains:  # said once, at the first stage that uses it
            errors.add(loc + ("domain",), bad_domain, ("stages", ps.index))
        seen_domains.add(domain if isinstance(domain, str) else "")
        for name, ref in contract(ps.stage).references.items():
            v = p.get(name)
            if not isinstance(v, str) or _is_ref(v) or server_id(v) is not None or ref.kind != Produces.MODEL:
                continue
            try:
                ms = ModelSpec.parse(v, folder_kind="hf")
            except ValueError as e:
                errors.add(loc + (name,), str(e), ("stages", ps.index))
                continue
            d = None if ms.embedded or not ms.local else ms.path
            if d is not None and d not in seen_dirs:
                if why := folder_problem(d):
                    errors.add(loc + (name,), f"model folder '{_short(d)}' {why} (give an HF folder, 'embedded', "
                               "'openai:URL#MODEL' or '@<stage id>')", ("stages", ps.index))
                seen_dirs.add(d)
        # the stage's own checks (its CONTRACT's `check`: inputs that exist, episode budgets that can score)
        check = contract(ps.stage).check
        budgets = spec.check_budgets and "domain" in p and not bad_domain and ps in plan
        for field_, message in (check(ps, plan, budgets) if check is not None else []):
            errors.add(loc + (field_,), message, ("stages", ps.index))
