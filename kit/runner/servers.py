"""The OpenAI-compatible servers a recipe needs, declared in the recipe and started and stopped by `kit run`.

What: a GPU recipe samples its models through servers (`vllm serve`), never through a vLLM engine in the
kit's process. Some of those servers serve a model that exists only once a stage of the same run has
trained it (the fine-tuned user simulator, GRPO's policy). Declaring them in the recipe makes the whole
chain one `kit run`:

    servers:
      - {id: user, engine: vllm, model: "${KIT_USER_MODEL}", port: 8001, gpus: [8, 9],
         args: [--tensor-parallel-size, "2"]}
      - {id: sft_user_srv, engine: vllm, model: "@sft_user", port: 8002}   # the stage's model/ folder
    stages:
      - stage: evaluate
        params: {user_model: "server:user"}          # -> openai:http://127.0.0.1:8001/v1
      - stage: grpo
        params: {user_model: "server:sft_user_srv", rollout_server: "server:policy"}  # rollout_server: the bare URL

Why the runner and not the user: the fine-tuned user's server can only start after `sft_user` ran, and a
server left running holds its GPUs; the runner knows when each is first and last needed.

How (`plan_servers`, a pure function of the recipe's plan; `kit run --validate` prints it):
  - a server whose model is a path (or 'embedded') starts before the first stage that uses it;
  - a server whose model is '@<stage id>' (or '@<id>/<folder>', kit/sources.py) is launched as soon as
    that stage completes, and waited for before the first stage that uses it;
  - it stops after the last stage that uses it, and on any exit of `kit run` (failure, Ctrl-C, SIGTERM);
  - a stage that is already complete (skipped on a rerun) starts nothing: a server starts only when a
    stage that uses it executes.
`Servers` does it at run time: the command (`vllm serve MODEL --host H --port P ARGS...`, the vllm of
.venv-vllm/ when there is one (`make vllm-env`); `transformers serve MODEL --host H --port P ARGS...`),
CUDA_VISIBLE_DEVICES from `gpus`, its output in runs/<run id>/servers/<server id>.log, ready when GET
/v1/models answers 200 (a clear error naming the server, with its log's tail, when it exits or does not
answer within `start_timeout_s`). A server already answering on the port with the same model (a rerun,
or one started by hand) is reused and left running; another model on the port is an error. The servers
a stage needs are started side by side, then waited for.

`pinned: false` (transformers only) starts `transformers serve` without a model: it loads the folder
each request names. GRPO's `weight_sync: folder` needs that (it requests each step's weights folder);
the runner names the server's model to the stages that use it (`name_models`: 'openai:URL#<folder>',
GRPO's rollout_server_model), and the recipe loader refuses a GRPO rollout server that could not take
its weights (a pinned transformers server, or LoRA adapters to one).

Where it listens: `host` is 127.0.0.1 unless the recipe says otherwise, and a server listening on any
other address (0.0.0.0, a LAN address) must have an API key, or anyone who reaches the port could use
it (`exposure_problems`; the recipe loader reports it with the fix). `api_key: generate`: the runner makes
one (secrets.token_urlsafe) and keeps it in runs/<run id>/servers/<id>.key (mode 0600; a rerun of the
run takes the same one, so a server it left running keeps answering); `api_key: env:VAR`: the key is
$VAR at run time. vLLM gets it as VLLM_API_KEY (not `--api-key`: a command line is visible to `ps` and
recorded in the manifest); the kit's own clients get it from $KIT_ENDPOINT_KEYS (base URL -> key), which
the runner sets while the server runs and the stage processes inherit (kit/llm/openai_backend.py:
OpenAIBackend, `served_models`, tau2's litellm calls, GRPO's adapter pushes), never in a stage's
parameters. `transformers serve` has no API key option (transformers 5.24), so a transformers server
must listen on loopback. `kit run --validate` shows each server's address and where its key comes from.

A stage parameter names a server as 'server:<id>' where it takes a model spec (its contract's model
references: model, user_model, agent_model) and in GRPO's `rollout_server`; the recipe loader replaces it
by the server's URL (kit/runner/recipe.py) and records which server it was (PlannedStage.servers).
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kit.errors import Unavailable
from kit.llm.openai_backend import served_models, share_endpoint_key
from kit.sources import StageRef, parse_source

PREFIX = "server:"
URL_PARAMS = frozenset({"rollout_server"})  # parameters that take the bare URL, not an 'openai:' model spec
REPO_ROOT = Path(__file__).resolve().parents[2]

_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")
_OWN_FLAGS = ("--host", "--port", "--api-key")  # from the server's fields, not from `args`
_KEY = re.compile(r"^(generate|env:[A-Za-z_][A-Za-z0-9_]*)$")
LOOPBACK_HOSTS = ("localhost",)  # and every address ipaddress calls loopback: 127.0.0.0/8, ::1


class ServerSpec(BaseModel):
    """One entry of a recipe's `servers:`."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Its name; stage parameters use it as 'server:<id>'.")
    model: str = Field(description="An HF model folder, 'embedded', or '@<stage id>' (that stage's model/ "
                       "folder; '@<id>/<folder>' another of its model folders).")
    engine: Literal["vllm", "transformers"] = Field(description="`vllm serve` (GPU) or `transformers serve`.")
    port: int = Field(ge=1, le=65535)
    host: str = Field(default="127.0.0.1", description="The address it listens on; any but loopback "
                      "(127.0.0.0/8, ::1, localhost) needs an api_key.")
    api_key: Optional[str] = Field(default=None, description="The key its clients must send (Bearer): 'generate' "
                                   "(the runner makes one per run, in runs/<run id>/servers/<id>.key, and gives it to "
                                   "the kit's own clients) or 'env:VARNAME' (read from the environment at run time). "
                                   "Required when host is not loopback; engine vllm only.")
    gpus: Optional[list[int]] = Field(default=None, description="Its CUDA_VISIBLE_DEVICES (default: inherited).")
    args: list[str] = Field(default_factory=list, description="More command-line arguments, as given.")
    start_timeout_s: float = Field(default=1200, gt=0, description="How long it may take to answer GET /v1/models.")
    pinned: bool = Field(default=True, description="Started with its model (it answers for that model alone). "
                         "false (engine transformers only): `transformers serve` without a model, loading the folder "
                         "each request names; the stages that use it are given `model`'s folder by name. That is what "
                         "GRPO's `weight_sync: folder` needs: after each step it requests the new weights' folder.")

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError(f"server id '{v}' must start with a letter and hold only letters, digits, _ and -")
        return v

    @field_validator("api_key")
    @classmethod
    def _key_source(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _KEY.match(v):
            raise ValueError("api_key must be 'generate' or 'env:VARNAME' (a key written into the recipe would be "
                             "in its file, its run's manifest and version control)")
        return v

    @field_validator("args")
    @classmethod
    def _not_ours(cls, v: list[str]) -> list[str]:
        for a in v:
            if a.split("=", 1)[0] in _OWN_FLAGS:
                raise ValueError(f"'{a}' is set from the server's host / port / api_key fields, not through args")
        return [str(a) for a in v]

    @model_validator(mode="after")
    def _pinned_vllm(self) -> "ServerSpec":
        if not self.pinned and self.engine == "vllm":
            raise ValueError("pinned: false is for engine transformers; `vllm serve` serves the model it was started "
                             "with (GRPO gives it new weights as LoRA adapters: weight_sync lora_adapter)")
        return self

    @property
    def loopback(self) -> bool:
        """It listens on this machine's loopback alone: nothing beyond the machine reaches it."""
        if self.host in LOOPBACK_HOSTS:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: it may resolve to any address
            return False

    @property
    def key_var(self) -> Optional[str]:
        """The environment variable its key is read from ('env:VAR'), if any."""
        return self.api_key[4:] if self.api_key and self.api_key.startswith("env:") else None

    @property
    def key_source(self) -> str:
        """Where its key comes from, in words: none / generated / from $VAR."""
        return "generated" if self.api_key == "generate" else f"from ${self.key_var}" if self.key_var else "none"

    @property
    def url(self) -> str:
        """Where clients reach it (a server listening on every address is reached on loopback)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def source(self) -> Optional[StageRef]:
        """The stage whose model folder it serves, if its model is a reference."""
        src = parse_source(self.model)
        return src if isinstance(src, StageRef) else None


def exposure_problems(servers: list[ServerSpec]) -> list[tuple[int, str, str]]:
    """Servers reachable beyond this machine without a key: (index in `servers`, field, message with the fix)."""
    problems = []
    for i, s in enumerate(servers):
        if s.engine == "transformers" and not s.loopback:
            problems.append((i, "host", f"server '{s.id}' listens on {s.host}, beyond this machine, but `transformers "
                                        "serve` has no API key option: anyone who reaches the port could use it. Bind "
                                        "host 127.0.0.1, or serve it with engine vllm and an api_key"))
        elif s.engine == "transformers" and s.api_key is not None:
            problems.append((i, "api_key", f"server '{s.id}': `transformers serve` has no API key option, so it cannot "
                                           "check one: drop api_key (a loopback server needs none) or use engine vllm"))
        elif not s.loopback and s.api_key is None:
            problems.append((i, "api_key", f"server '{s.id}' listens on {s.host}, beyond this machine, without an API "
                                           "key: add `api_key: generate` (the kit makes one and gives it to its own "
                                           "clients) or `api_key: env:MY_KEY`; or bind host 127.0.0.1"))
    return problems


def server_id(value: Any) -> Optional[str]:
    """'server:<id>' -> '<id>'; anything else -> None."""
    return value[len(PREFIX):] if isinstance(value, str) and value.startswith(PREFIX) else None


def resolve(param: str, spec: ServerSpec) -> str:
    """What a stage parameter naming the server becomes: the bare URL for URL_PARAMS, else a model spec."""
    return spec.url if param in URL_PARAMS else f"openai:{spec.url}"


# GRPO's parameter that names the model on its rollout_server (kit/train/grpo_config.py)
URL_MODEL_PARAMS = {"rollout_server": "rollout_server_model"}


def name_models(params: dict, used: dict[str, str], specs: dict[str, ServerSpec], model_of: Callable) -> dict:
    """A stage's resolved parameters with the model named on each unpinned server it uses (`used`:
    param -> server id; `model_of(spec)` -> the folder the server stands for): a model spec gets
    '#<folder>', GRPO's rollout_server URL its rollout_server_model (unless the recipe set one). A pinned
    server answers for its one model: its clients need no name."""
    out = dict(params)
    for name, sid in used.items():
        spec = specs[sid]
        if spec.pinned:
            continue
        model = str(model_of(spec))
        if name in URL_MODEL_PARAMS:
            out[URL_MODEL_PARAMS[name]] = out.get(URL_MODEL_PARAMS[name]) or model
        else:
            out[name] = f"{resolve(name, spec)}#{model}"
    return out


# ----- the plan: when each server starts and stops (pure) ----------------------------------------


@dataclass
class ServerPlan:
    """One server's part in a run. `source`: the key of the stage whose model folder it serves (it can
    start only once that stage completed); `users`: the keys of the stages that use it, in run order."""

    spec: ServerSpec
    source: Optional[str] = None
    users: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def start(self) -> str:
        if not self.users:
            return "never (no stage uses it)"
        if self.source:
            return f"after {self.source} completes (ready before {self.users[0]})"
        return f"before {self.users[0]}"

    @property
    def stop(self) -> str:
        return f"after {self.users[-1]}" if self.users else "-"

    def describe(self) -> list[str]:
        """Its lines in `kit run --validate`'s server plan."""
        s = self.spec
        gpus = f"  gpus {','.join(map(str, s.gpus))}" if s.gpus is not None else ""
        return [f"{s.id:<28} {s.engine:<12} {s.url}  model {s.model}{gpus}",
                f"{'':<28} listens on {s.host}:{s.port}, key: {s.key_source}"
                + (" (not set in this shell)" if s.key_var and not os.environ.get(s.key_var) else ""),
                f"{'':<28} starts {self.start}; used by {', '.join(self.users) or 'none'}; stops {self.stop}"]


def plan_servers(servers: list[ServerSpec], plan: list) -> list[ServerPlan]:
    """Each server's source stage and users, from the planned stages (kit.runner.recipe.PlannedStage:
    `key`, `id`, and `servers`, its parameters that name a server). A source named by several keys (an
    ablation's arms) is the first; the recipe loader refuses what this cannot plan (plan_problems)."""
    out = []
    for s in servers:
        src = s.source
        keys = [ps.key for ps in plan if src is not None and ps.id == src.id]
        users = [ps.key for ps in plan if s.id in ps.servers.values()]
        out.append(ServerPlan(s, keys[0] if keys else None, users))
    return out


def plan_problems(plans: list[ServerPlan], plan: list) -> list[tuple[int, str, str]]:
    """What cannot run: (index in `servers`, field, message). A server's source stage must be in the
    plan, once, and come before the first stage that uses it."""
    order = {ps.key: n for n, ps in enumerate(plan)}
    problems = []
    for i, sp in enumerate(plans):
        src = sp.spec.source
        if src is None:
            continue
        keys = [ps.key for ps in plan if ps.id == src.id]
        if not keys:
            problems.append((i, "model", f"'{sp.spec.model}' names no stage of this recipe (stage ids: "
                                         f"{', '.join(dict.fromkeys(ps.id for ps in plan))})"))
        elif len(keys) > 1:
            problems.append((i, "model", f"'{sp.spec.model}' names a stage that runs once per arm "
                                         f"({', '.join(keys)}): a server serves one model"))
        elif sp.users and order[keys[0]] > order[sp.users[0]]:
            problems.append((i, "model", f"server '{sp.id}' serves '{sp.spec.model}', which runs after "
                                         f"'{sp.users[0]}', the first stage that uses the server"))
    return problems


def name_servers(message: str, used: dict[str, str], plans: list[ServerPlan], log_dir: Path) -> str:
    """A failed stage's message with each recipe server it mentions (by URL) named: its id, the stage
    parameter that uses it and its log, so that "http://127.0.0.1:8002/v1 ... failed" says which server
    died. `used`: the stage's parameters that name a server (PlannedStage.servers: param -> id)."""
    by_id = {sp.id: sp for sp in plans}
    named = [f"recipe server '{sid}' ({param}: {by_id[sid].spec.url}, log {log_dir / f'{sid}.log'})"
             for param, sid in sorted(used.items()) if sid in by_id and by_id[sid].spec.url in message]
    return f"{message} [{'; '.join(named)}]" if named else message


# ----- at run time -------------------------------------------------------------------------------


class ServerFailed(Unavailable):
    """A server did not come up (or its port is held by another model)."""


def server_key(spec: ServerSpec, key_dir: Path) -> Optional[str]:
    """Its API key for this run: None without one; 'generate': the one in key_dir/<id>.key, made (mode 0600)
    when there is none yet; 'env:VAR': $VAR (ServerFailed naming VAR when it is not set)."""
    if spec.api_key is None:
        return None
    if spec.key_var is not None:
        key = os.environ.get(spec.key_var)
        if not key:
            raise ServerFailed(f"server '{spec.id}' takes its API key from ${spec.key_var} (api_key: {spec.api_key}), "
                               "which is not set", f"export {spec.key_var}=<key> and run the same command again, or "
                               "set the server's api_key: generate")
        return key
    path = key_dir / f"{spec.id}.key"
    if path.exists():  # a rerun of this run: a server it left running still wants this one
        key = path.read_text(encoding="utf-8").strip()
        if key:
            return key
        path.unlink()  # an empty file (a run killed while writing it) would start the server without a key
    key_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(32)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as f:
        f.write(key + "\n")
    return key


def command(spec: ServerSpec, model: str, key: Optional[str] = None) -> tuple[list[str], dict[str, str]]:
    """The server's command line and the environment it adds to the runner's (models are never downloaded).
    `key`: its API key (vLLM's VLLM_API_KEY, set empty without one so that one in the runner's environment
    does not lock out the kit's own clients)."""
    if key and spec.engine != "vllm":
        raise ServerFailed(f"server '{spec.id}': `{spec.engine} serve` takes no API key", "bind it to 127.0.0.1 "
                           "without api_key, or use engine vllm")
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if spec.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.gpus))
    if spec.engine == "vllm":
        exe = next((str(p) for p in (Path.cwd() / ".venv-vllm/bin/vllm", REPO_ROOT / ".venv-vllm/bin/vllm")
                    if p.exists()), None) or shutil.which("vllm")
        if exe is None:
            raise ServerFailed(f"server '{spec.id}': no vllm command (neither .venv-vllm/bin/vllm nor vllm on PATH)",
                               "make vllm-env installs vLLM in its own venv (.venv-vllm)")
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"  # GRPO loads its adapters into the policy's server
        env["VLLM_API_KEY"] = key or ""  # vllm/entrypoints/serve/middleware/register.py: '' is no key
        cmd = [exe, "serve", model]
    else:
        exe = Path(sys.executable).with_name("transformers")
        found = str(exe) if exe.exists() else shutil.which("transformers")
        if found is None:
            raise ServerFailed(f"server '{spec.id}': no `transformers` command",
                               "pip install 'transformers[serving]' in the kit's environment")
        env.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))  # spinning threads slow a CPU 10x
        cmd = [found, "serve"] + ([model] if spec.pinned else [])  # unpinned: it loads what a request names
    return cmd + ["--host", spec.host, "--port", str(spec.port), *spec.args], env


def _port_open(host: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def tail(path: Path, n: int = 25) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()[-n:])


@dataclass
class _Running:
    plan: ServerPlan
    model: str
    log: Path
    proc: Optional[subprocess.Popen] = None  # None: reused, someone else's
    ready: bool = False


class Servers:
    """The run's servers: `after(key, executed)` once a stage is done (launches the servers it is the source
    of, stops those it was the last user of), `ready(ps)` before a stage executes (its servers up and
    answering), `close()` on any exit (stops every server this run started). `folder(key, output)` is
    the model folder a stage key wrote; `record(id, fields)` what the manifest keeps of each server.
    Each server's API key is settled when the run starts (`server_key`: a missing $VAR fails it before any
    stage runs) and shared with the kit's clients while the server is running (`share_endpoint_key`)."""

    def __init__(self, plans: list[ServerPlan], run_dir: Path, say: Callable[[str], None],
                 folder: Callable[[str, Optional[str]], Path], record: Callable[[str, dict], None] = lambda i, f: None,
                 poll_s: float = 1.0):
        self.plans = {p.id: p for p in plans if p.users}
        self.log_dir = run_dir / "servers"
        self.say, self.folder, self.record, self.poll_s = say, folder, record, poll_s
        self.running: dict[str, _Running] = {}
        self.keys = {sid: server_key(sp.spec, self.log_dir) for sid, sp in self.plans.items()}

    def model(self, sid: str) -> str:
        """The model folder server `sid` stands for (a stage's: once that stage has run)."""
        return self._model(self.plans[sid])

    def _model(self, sp: ServerPlan) -> str:
        src = sp.spec.source
        if src is not None:
            return str(self.folder(sp.source, src.output))
        if sp.spec.model == "embedded":
            from kit.llm.embedded import ensure_embedded_model

            return str(ensure_embedded_model())
        return str(Path(sp.spec.model).expanduser())

    def _launch(self, sp: ServerPlan) -> _Running:
        """Start it (not waiting), or take the one already answering on its port with the same model."""
        if sp.id in self.running:
            return self.running[sp.id]
        spec, model, key = sp.spec, self._model(sp), self.keys[sp.id]
        log = self.log_dir / f"{spec.id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        served = served_models(spec.url, api_key=key)
        if served is not None:
            if model in served or spec.model in served or not spec.pinned:  # unpinned: it loads any folder
                self.say(f"[kit run] server {spec.id}: {spec.url} already serves {model}; reused (left running)")
                with log.open("a", encoding="utf-8") as f:
                    f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} reused the server already at {spec.url}\n")
                self.record(spec.id, {"url": spec.url, "model": model, "log": str(log), "reused": True,
                                      "listens": f"{spec.host}:{spec.port}", "key": spec.key_source})
                share_endpoint_key(spec.url, key)
                run = self.running[sp.id] = _Running(sp, model, log, None, True)
                return run
            raise ServerFailed(f"server '{spec.id}': {spec.url} already serves {', '.join(served)}, not {model}",
                               f"stop that server or give server '{spec.id}' another port")
        if _port_open(spec.url.split("//")[1].split(":")[0], spec.port):
            raise ServerFailed(f"server '{spec.id}': port {spec.port} is taken by something that does not answer "
                               f"GET {spec.url}/models" + (" with this run's API key" if key else ""),
                               f"free the port or give server '{spec.id}' another port")
        cmd, env = command(spec, model, key)
        with log.open("a", encoding="utf-8") as f:
            f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} $ {' '.join(cmd)}\n")
            f.flush()
            proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)  # its own group: stopped whole
        self.say(f"[kit run] server {spec.id}: starting {spec.engine} for {model} at {spec.url} (pid {proc.pid}, "
                 f"log {log})")
        self.record(spec.id, {"url": spec.url, "model": model, "engine": spec.engine, "command": cmd,
                              "listens": f"{spec.host}:{spec.port}", "key": spec.key_source,
                              "log": str(log), "pid": proc.pid, "started": time.strftime("%Y-%m-%dT%H:%M:%S")})
        share_endpoint_key(spec.url, key)
        run = self.running[sp.id] = _Running(sp, model, log, proc)
        return run

    def _wait(self, run: _Running) -> None:
        spec, t0 = run.plan.spec, time.monotonic()
        while not run.ready:
            if run.proc is not None and run.proc.poll() is not None:
                code = run.proc.returncode
                del self.running[spec.id]
                share_endpoint_key(spec.url, None)
                raise ServerFailed(f"server '{spec.id}' ({spec.engine}, {run.model}) exited with status {code} "
                                   f"before answering; the end of {run.log}:\n{tail(run.log)}",
                                   "fix the cause in its log and run the same command again: it resumes")
            if served_models(spec.url, api_key=self.keys[spec.id]) is not None:
                run.ready = True
                self.say(f"[kit run] server {spec.id}: ready at {spec.url} after {time.monotonic() - t0:.0f}s")
                return
            if time.monotonic() - t0 > spec.start_timeout_s:
                self._stop(run)
                raise ServerFailed(f"server '{spec.id}' ({spec.engine}, {run.model}) did not answer GET "
                                   f"{spec.url}/models within {spec.start_timeout_s:g}s; the end of {run.log}:\n"
                                   f"{tail(run.log)}", f"raise servers[{spec.id}].start_timeout_s or fix the "
                                   "cause in its log, and run the same command again")
            time.sleep(self.poll_s)

    def after(self, key: str, executed: bool) -> None:
        """Stage `key` is done: launch the servers serving its model (when it ran now), stop the ones it
        used last."""
        for sp in self.plans.values():
            if executed and sp.source == key and sp.id not in self.running:
                self._launch(sp)
        for sp in self.plans.values():
            if sp.users[-1] == key and sp.id in self.running:
                self._stop(self.running[sp.id])

    def ready(self, ps: Any) -> None:
        """Every server stage `ps` (a PlannedStage) uses is up and answering (all started before waiting
        for the first: they come up side by side)."""
        runs = [self._launch(self.plans[sid]) for sid in dict.fromkeys(ps.servers.values())]
        for run in runs:
            self._wait(run)

    def _stop(self, run: _Running) -> None:
        self.running.pop(run.plan.id, None)
        share_endpoint_key(run.plan.spec.url, None)
        if run.proc is None:
            return  # reused: not ours to stop
        if run.proc.poll() is None:
            try:
                os.killpg(run.proc.pid, signal.SIGTERM)
                run.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(run.proc.pid, signal.SIGKILL)
                run.proc.wait()
            except ProcessLookupError:
                pass
        try:  # what it left in its group (vLLM's workers)
            os.killpg(run.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.record(run.plan.id, {"stopped": time.strftime("%Y-%m-%dT%H:%M:%S"), "returncode": run.proc.returncode})
        self.say(f"[kit run] server {run.plan.id}: stopped")

    def close(self) -> None:
        for run in list(self.running.values()):
            try:
                self._stop(run)
            except Exception as e:  # noqa: BLE001  (stop the others still)
                self.say(f"[kit run] server {run.plan.id}: could not be stopped: {e}")
