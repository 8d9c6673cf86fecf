"""τ²-native evaluation: episodes run by tau2's own code, so numbers compare with τ²-bench.

    res = evaluate_tau2_native("mock", tasks, "openai:http://127.0.0.1:8000/v1#agent-model",
                               "openai:http://127.0.0.1:8001/v1#user-model", trials=4, out_dir="runs/t2")
    res["passk"], res["episodes"]          # rows: task_id, trial, reward, termination_reason, ...
    evaluate(EvalConfig(..., protocol="tau2"))   # the same through kit.eval.runner -> EvalResult

What it does: for every (task, trial) it calls `tau2.run.run_task` with tau2's `llm_agent`
(LLMAgent, tau2's system prompt and policy) and `user_simulator` (UserSimulator, tau2's user
guidelines); tau2's Orchestrator runs the episode and tau2's `evaluate_simulation`
(EvaluationType.ALL, as `tau2 run` uses) scores it. Models are reached through litellm as
`openai/<model>` with `api_base` = the spec's URL (an OpenAI-compatible server: vLLM, SGLang,
`transformers serve`). Trial seeds are drawn exactly as tau2's `run_tasks` draws them
(`random.seed(seed)`, one `randint(0, 10**6)` per trial). Each finished SimulationRun (with its
reward_info) is appended as one JSON line to `<out_dir>/tau2_simulations.jsonl`; a rerun skips the
(task_id, trial) pairs already there (keyed like the kit runner, not by seed: change the seed, change
out_dir) and needs no server when nothing is left. Episodes run concurrently in a thread pool.

Simplifications vs `tau2 run`: no LLM repetition check, no console display, a JSONL file instead
of tau2's single Results JSON, and an episode that raises stops the evaluation (tau2's default;
its `skip_failed_samples` is not offered) -- except two server faults. An unreachable endpoint (checked
up front, and again after any model call that raises) stops it in one line naming the URL. A model
call that raises while both servers still answer (an HTTP 5xx or a garbled body for one episode, after
litellm's retries) is an infrastructure failure of that episode, as in the kit protocol: it is counted
(`infra_failures`, which ones in `infra_failed_episodes`, each naming the servers), left out of every
number (never scored 0 against the agent), not written to the simulations file, and run again by a rerun. `max_tokens` is sent only when given (tau2 sends
none; the runner dispatch gives none, EvalConfig.max_new_tokens is a kit-protocol knob). The runner's
training-data leak check and user-deviation columns are kit-protocol only.

How it differs from the kit protocol (kit.rollout.loop + kit.verify): there the kit renders the
prompts, parses tool calls itself (prompt or native mode), batches turns across episodes and
scores with its own verifier. Here everything between the two endpoints is tau2's: its prompts,
its native `tools=` requests (tool calls must come back as OpenAI `tool_calls`; a server whose
chat template ignores tools -- e.g. SmolLM2's under `transformers serve` -- only ever talks,
which tau2 handles as plain messages), its stop tokens, step/error limits and evaluator.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from kit._tau2 import TAU2_VERSION, registry
from kit.eval.passk import pass_k_table
from kit.llm import EndpointError, ModelSpec
from kit.llm.openai_backend import bearer, endpoint_key, served_models
from kit.metrics import INFRA_FAILURES

SIM_FILE = "tau2_simulations.jsonl"


def litellm_model(spec: str, check: bool = True) -> tuple[str, dict]:
    """'openai:URL#MODEL' -> ('openai/MODEL', {api_base, api_key}); checks the endpoint answers. The key is
    the one `kit run` gave for URL (kit.llm.openai_backend.endpoint_key), else a placeholder (litellm
    wants one; a loopback server checks none)."""
    import httpx

    parsed = ModelSpec.parse(spec)
    if parsed.kind != "openai":
        raise ValueError(f"the tau2 protocol talks to OpenAI-compatible endpoints through litellm: "
                         f"use 'openai:http://host:port/v1#model', got {spec!r}")
    url, model = parsed.url.rstrip("/"), parsed.model
    key = endpoint_key(url)
    if model and not check:
        return f"openai/{model}", {"api_base": url, "api_key": key or "dummy"}
    try:
        r = httpx.get(f"{url}/models", timeout=10, headers=bearer(key))
    except httpx.TransportError as e:
        raise EndpointError(f"endpoint {url} unreachable ({type(e).__name__}): is the server running?") from None
    if not model:  # no '#MODEL': the first model the server lists
        try:
            model = r.json()["data"][0]["id"]
        except Exception:
            raise EndpointError(f"endpoint {url}: no '#MODEL' in the spec and GET /models lists none") from None
    return f"openai/{model}", {"api_base": url, "api_key": key or "dummy"}


def _model_call_failed(e: BaseException) -> bool:
    """A model call's failure (litellm's exceptions, a body that was not JSON), not a bug in tau2 or here."""
    import json

    return type(e).__module__.split(".")[0] in ("litellm", "openai", "httpx") or isinstance(e, json.JSONDecodeError)


def _load_done(path: Path) -> dict:
    from tau2.data_model.simulation import SimulationRun

    from kit.eval.results import done_pairs

    return done_pairs(path, SimulationRun)


def evaluate_tau2_native(domain: str, tasks: list, agent_endpoint: str, user_endpoint: str,
                         trials: int = 1, max_messages: int = 100, temperature: float = 0.0,
                         user_temperature: float = 0.0, seed: int = 300, out_dir=None,
                         max_errors: int = 10, concurrency: int = 4,
                         max_tokens: Optional[int] = None) -> dict:
    """Run trials x tasks through tau2's orchestrator; return rows, pass^k and provenance."""
    from tau2.run import run_task

    if domain not in registry.get_domains():
        raise ValueError(f"domain '{domain}' is not registered with tau2 (known: {registry.get_domains()})")
    if not tasks:
        raise ValueError(f"no tasks to evaluate in domain '{domain}'")
    rng = random.Random(seed)  # == random.seed(seed) in tau2's run_tasks, without global state
    seeds = [rng.randint(0, 1000000) for _ in range(trials)]

    path = Path(out_dir) / SIM_FILE if out_dir else None
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
    sims = _load_done(path) if path else {}
    todo = [(t, k) for k in range(trials) for t in tasks if (t.id, k) not in sims]
    agent_llm, agent_args = litellm_model(agent_endpoint, check=bool(todo))  # all done: no server needed
    user_llm, user_args = litellm_model(user_endpoint, check=bool(todo))
    agent_args["temperature"], user_args["temperature"] = temperature, user_temperature
    if max_tokens:
        agent_args["max_tokens"] = user_args["max_tokens"] = max_tokens
    lock = threading.Lock()
    infra: list[dict] = []

    def one(task, k):
        try:
            sim = run_task(domain=domain, task=task, agent="llm_agent", user="user_simulator",
                           llm_agent=agent_llm, llm_args_agent=agent_args, llm_user=user_llm,
                           llm_args_user=user_args, max_steps=max_messages, max_errors=max_errors,
                           seed=seeds[k])
        except Exception as e:
            name = type(e).__name__
            bases = [agent_args["api_base"], user_args["api_base"]]
            down = [b for b in bases if served_models(b, timeout=10) is None]
            if down or "Timeout" in name:
                raise EndpointError(f"task {task.id} trial {k}: endpoint {' / '.join(down or bases)} failed: "
                                    f"{name}: {str(e)[:300]}") from None
            if not _model_call_failed(e):
                raise RuntimeError(f"task {task.id} trial {k} failed in tau2: {name}: {e}") from e
            with lock:  # both servers answer: this episode's call failed, not the run
                infra.append({"task_id": task.id, "trial": k, "termination": "infra_error",
                              "error": f"agent {bases[0]} / user {bases[1]}: {name}: {str(e)[:240]}"})
            return
        sim.trial = k
        with lock:
            sims[(task.id, k)] = sim
            if path:  # one complete line per finished episode
                with open(path, "a", encoding="utf-8") as f:
                    f.write(sim.model_dump_json() + "\n")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for fut in [pool.submit(one, t, k) for t, k in todo]:
            fut.result()  # the first failure propagates (queued episodes are cancelled)
    wall = time.perf_counter() - t0

    rows, by_task = [], {t.id: [] for t in tasks}
    for t in tasks:
        for k in range(trials):
            sim = sims.get((t.id, k))
            if sim is None:  # an infrastructure failure: counted in infra_failures, never scored
                continue
            reward = float(sim.reward_info.reward) if sim.reward_info else 0.0
            rows.append({"task_id": t.id, "trial": k, "reward": reward,
                         "termination_reason": getattr(sim.termination_reason, "value", sim.termination_reason),
                         "num_messages": len(sim.messages), "duration_s": sim.duration, "seed": sim.seed})
            by_task[t.id].append(reward)
    if infra and not rows:
        raise EndpointError(f"every one of the {len(infra)} episodes failed on a server, none was scored; the "
                            f"first: {infra[0]['error']}")
    return {"protocol": "tau2-native", "tau2_version": TAU2_VERSION, "domain": domain,
            "agent_model": agent_endpoint, "user_model": user_endpoint, "litellm_agent": agent_llm,
            "litellm_user": user_llm, "trials": trials, "tasks": len(tasks), "max_messages": max_messages,
            "temperature": temperature, "user_temperature": user_temperature, "seed": seed,
            "episodes_run": len(todo), "wall_s": round(wall, 1), "episodes": rows,
            INFRA_FAILURES: len(infra), "infra_failed_episodes": infra,
            "passk": pass_k_table({t: v for t, v in by_task.items() if v}, max_k=min(4, trials)),
            "simulations_file": str(path) if path else None}


def evaluate_config(cfg, agent=None, user=None):
    """kit.eval.runner.evaluate for cfg.protocol == 'tau2': the same EvalResult shape."""
    import json

    import pandas as pd

    from kit.data import task_labels
    from kit.envs import load_domain
    from kit.eval.results import EvalResult, load_tasks_file
    from kit.eval.runner import breakdown

    if agent is not None or user is not None:
        raise ValueError("protocol='tau2' drives tau2's own LLMAgent/UserSimulator through litellm: "
                         "pass endpoints as cfg.model / cfg.user_model ('openai:URL#MODEL'), not backends")
    dom = load_domain(cfg.domain)
    tasks = load_tasks_file(cfg.tasks_file) if cfg.tasks_file else dom.tasks(cfg.split)
    tasks = tasks[: cfg.limit] if cfg.limit else tasks
    labels = task_labels(dom, tasks)
    out = evaluate_tau2_native(cfg.domain, tasks, cfg.model, cfg.user_model, cfg.trials, cfg.max_messages,
                               cfg.temperature, cfg.user_temperature, cfg.seed, cfg.out_dir,
                               max_errors=cfg.max_errors, concurrency=cfg.batch_size)
    df = pd.DataFrame(out.pop("episodes"))
    df["termination"] = df["termination_reason"]
    df.insert(2, "shape", df["task_id"].map(lambda t: labels[t][0]))
    df.insert(3, "phrasing", df["task_id"].map(lambda t: labels[t][1]))
    by_task = {t: list(g["reward"]) for t, g in df.groupby("task_id", sort=False)}
    meta = {**{k: v for k, v in out.items() if k != "passk"}, "protocol": "tau2",
            "model": cfg.model, "user_model": cfg.user_model, "split": cfg.split, "tasks_file": cfg.tasks_file,
            **breakdown(labels, by_task)}
    res = EvalResult(cfg, df, out["passk"], meta)
    if cfg.out_dir:
        Path(cfg.out_dir, "eval.json").write_text(json.dumps(res.to_json(), indent=2, default=str), encoding="utf-8")
        df.to_csv(Path(cfg.out_dir, "episodes.csv"), index=False)
    return res
