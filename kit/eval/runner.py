"""Evaluate an agent on a τ² task set: episodes, verdicts, pass^k, user deviations.

    res = evaluate(EvalConfig(domain="mock", model="embedded", user_model="embedded", trials=4, temperature=0.6))
    res.passk            # {1: 0.11, 2: ..., 3: ..., 4: ...}
    res.episodes         # pandas DataFrame, one row per episode

Every episode is scored by the kit verifier; with `cross_check` also by tau2's official
evaluator, and the agreement is reported. Trajectories are appended, one complete JSON line
per finished episode, to `<out_dir>/trajectories.jsonl`; a rerun skips the (task, trial)
pairs already there, so a killed evaluation resumes. An episode a server failed (a 5xx or garbled
turn: `Trajectory.infra_failed`) is an infrastructure failure, not the agent's: it is counted (meta
`infra_failures`; which ones: `infra_failed_episodes`) and left out of every number, never scored 0;
a rerun runs it again. Next to every number the result
records the model, the user simulator, sampling, trials and the tau2 version, and pass^1 is broken
down by task shape and by phrasing (kit.data.task_labels; every episode row carries both).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Optional

import pandas as pd

from kit import metrics as M
from kit._tau2 import TAU2_VERSION
from kit.data import task_labels
from kit.envs import load_domain
from kit.eval.config import EvalConfig
from kit.eval.leak import gold_action_keys, leak_report, training_action_keys, training_files
from kit.eval.passk import pass1_by, pass1_interval, pass_k_table
from kit.sources import SplitRef, parse_source
from kit.eval.results import EvalResult, done_pairs, load_tasks_file
from kit.files import append_lines
from kit.llm.types import SamplingParams
from kit.rollout.fidelity import proper_end, request_stated, user_deviations
from kit.rollout.loop import RolloutConfig, run_episodes, step_budget_warning
from kit.verify import verify

log = logging.getLogger(__name__)


def _rate(col: pd.Series) -> Optional[float]:
    """Share of True among the rows that are not None (None: no row has a value)."""
    vals = [bool(x) for x in col if x is not None and not (isinstance(x, float) and x != x)]
    return sum(vals) / len(vals) if vals else None


def _check_leak(cfg: EvalConfig, dom, tasks) -> tuple[dict, Optional[str]]:
    """meta["leak"] and a warning; raises ValueError when the tasks overlap the training data and
    `allow_overlap` is off."""
    sources = [parse_source(p) for p in (cfg.training_data or [])]
    paths = [s.text() for s in sources if not isinstance(s, SplitRef)]
    splits = [s.name for s in sources if isinstance(s, SplitRef)]
    files = training_files(paths)
    keys = training_action_keys(files)
    for name in splits:
        for t in dom.tasks(None if name in ("all", "None") else name):
            keys |= gold_action_keys(t)
    rep = leak_report(tasks, keys)
    leak = {"n_overlap": rep["n_overlap"], "n_tasks": rep["n_tasks"],
            "checked_files": [str(f) for f in files] + [f"split:{n}" for n in splits],
            "overlapping_task_ids": rep["overlapping_task_ids"]}
    if not rep["n_overlap"]:
        return leak, None
    ids = rep["overlapping_task_ids"]
    msg = (f"evaluation tasks overlap the training data: {rep['n_overlap']} of {rep['n_tasks']} tasks have every "
           f"gold action in it (e.g. {', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}); training files: "
           f"{', '.join(leak['checked_files'][:6])}{', ...' if len(leak['checked_files']) > 6 else ''}")
    if not cfg.allow_overlap:
        raise ValueError(msg + " (set allow_overlap to evaluate anyway)")
    log.warning(msg)
    return leak, msg + " (allowed: allow_overlap)"


def breakdown(labels: dict[str, tuple[str, str]], by_task: dict[str, list[float]]) -> dict:
    """meta's pass^1 by task shape and by phrasing, from {task id: (shape, phrasing)} and the rewards."""
    results = {k: v for k, v in by_task.items() if v}
    return {M.PASS1_BY_SHAPE: pass1_by(results, {t: s for t, (s, _) in labels.items()}),
            M.PASS1_BY_PHRASING: pass1_by(results, {t: p for t, (_, p) in labels.items()})}


def _token_caps(cfg: EvalConfig, dom, tasks: list, agent, user) -> Optional[dict]:
    """kit.rollout.loop.token_caps_cut in the agent's tokenizer (the opening in the user's when it has one);
    None for an agent without a tokenizer (an endpoint). Logged when a cap cuts anything."""
    from kit.rollout.loop import token_caps_cut

    def tokenizer(backend):
        return backend.tokenizer if getattr(getattr(backend, "caps", None), "tokenizer", False) else None

    if tokenizer(agent) is None:
        return None
    caps = token_caps_cut(dom, tasks, cfg.max_new_tokens, cfg.user_max_new_tokens, tokenizer(agent), tokenizer(user))
    if caps["warning"]:
        log.warning(caps["warning"])
    return caps


def evaluate(cfg: EvalConfig, agent=None, user=None, progress: bool = True,
             memo_dir: Optional[str | Path] = None) -> EvalResult:
    """Run cfg.trials episodes per task and score them. Backends may be passed in directly. `memo_dir`: where
    finished evaluations are recorded by what they read (kit.eval.memo); an evaluation of the same weights under
    the same settings found there is copied (its trajectories) instead of sampled again."""
    from kit.llm import make_backend

    if cfg.protocol == "tau2":
        from kit.eval.tau2_native import evaluate_config

        return evaluate_config(cfg, agent, user)

    dom = load_domain(cfg.domain)
    tasks = load_tasks_file(cfg.tasks_file) if cfg.tasks_file else dom.tasks(cfg.split)
    available = len(tasks)  # before `limit`: the page says "test (10 of 40)", not "test"
    if cfg.limit:
        tasks = tasks[: cfg.limit]
    if not tasks:
        raise ValueError(f"no tasks to evaluate in domain '{cfg.domain}' (split={cfg.split}, file={cfg.tasks_file})")
    budget_warning = step_budget_warning(tasks, cfg.max_messages)
    if budget_warning:
        log.warning(budget_warning)
    leak, leak_warning = _check_leak(cfg, dom, tasks)  # before any backend: a leaking run loads no model
    given = agent is not None or user is not None  # backends passed in: their weights are not known here
    agent = agent or make_backend(cfg.model)
    user = user or (agent if cfg.user_model == cfg.model else make_backend(cfg.user_model))
    caps = _token_caps(cfg, dom, tasks, agent, user)
    rcfg = RolloutConfig(
        max_messages=cfg.max_messages, max_errors=cfg.max_errors, seed=cfg.seed,
        agent_params=SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens),
        user_params=SamplingParams(temperature=cfg.user_temperature, max_new_tokens=cfg.user_max_new_tokens),
    )
    out = Path(cfg.out_dir) if cfg.out_dir else None
    traj_path = out / "trajectories.jsonl" if out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    memo = reused_from = None
    if out and memo_dir and not given:
        from kit.eval.memo import EvalMemo

        memo = EvalMemo.open(memo_dir, cfg, tasks)
        src = memo.find(exclude=out) if memo else None
        if src is not None and not traj_path.exists():
            import shutil

            shutil.copyfile(src / "trajectories.jsonl", traj_path)
            reused_from = str(src)
            log.warning("the same agent and user weights under the same settings were evaluated in %s: its "
                        "episodes are reused, none is sampled (kit.eval.memo)", src)
    # an episode a server failed runs again (its line stays in the file; the rerun's, later, wins)
    done = {k: t for k, t in (done_pairs(traj_path) if traj_path else {}).items() if not t.infra_failed}
    todo = [(t, k) for t in tasks for k in range(cfg.trials) if (t.id, k) not in done]
    t0 = time.perf_counter()
    trajs = dict(done)
    for start in range(0, len(todo), cfg.batch_size):
        chunk = todo[start: start + cfg.batch_size]
        got = run_episodes(dom, [t for t, _ in chunk], agent, user, rcfg, progress=progress)
        lines = []
        for (task, k), traj in zip(chunk, got):
            traj.trial = k
            trajs[(task.id, k)] = traj
            lines.append(traj.model_dump_json())
        if traj_path:  # whole episodes only: written after the chunk has fully finished
            append_lines(traj_path, lines)  # whole lines or none (a full disk: DiskError)
    rows, by_task, infra = [], {t.id: [] for t in tasks}, []
    task_by_id = {t.id: t for t in tasks}
    labels = task_labels(dom, tasks)
    for (task_id, k), traj in sorted(trajs.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        task = task_by_id.get(task_id)
        if task is None:
            continue
        if traj.infra_failed:  # not the agent's failure: counted, never scored
            infra.append({"task_id": task_id, "trial": k, "termination": traj.termination_reason,
                          "error": (traj.infra_error or "")[:300]})
            continue
        v = verify(dom, task, traj)
        devs = user_deviations(task, traj, goal_reached=(v.reward == 1.0))
        stated = request_stated(task, traj, domain=dom)
        row = {"task_id": task_id, "trial": k, "shape": labels[task_id][0], "phrasing": labels[task_id][1],
               "reward": v.reward, "termination": traj.termination_reason,
               "steps": traj.meta.get("steps"), "tool_errors": traj.meta.get("errors"),
               "agent_tokens": traj.meta.get("agent_tokens"), "duration_s": traj.duration,
               "user_deviations": len(devs), "deviation_kinds": ",".join(sorted({d.kind for d in devs})),
               "request_stated": stated, "proper_end": proper_end(traj), "verify_error": v.error}
        if cfg.cross_check:
            from kit.verify.reference import same_verdict, tau2_verdict  # tau2's evaluator: only when asked

            ref = tau2_verdict(dom.name, task, traj)
            row["tau2_reward"] = ref["reward"]
            row["agree"] = same_verdict(v.summary(), ref)
        rows.append(row)
        by_task[task_id].append(v.reward)
    df = pd.DataFrame(rows)
    if not rows and infra:
        from kit.llm.openai_backend import EndpointError

        raise EndpointError(f"every one of the {len(infra)} episodes failed on a server, none was scored; the "
                            f"first: {infra[0]['error']}")
    if infra:
        log.warning("%d of %d episodes failed on a server and are left out of the scores (meta infra_failures)",
                    len(infra), len(infra) + len(rows))
    passk = pass_k_table({k: v for k, v in by_task.items() if v}, max_k=min(4, cfg.trials))
    meta = {
        "protocol": "kit", "model": cfg.model, "user_model": cfg.user_model, "temperature": cfg.temperature,
        "user_temperature": cfg.user_temperature, "trials": cfg.trials, "tasks": len(tasks),
        "tasks_available": available, "max_messages": cfg.max_messages, "max_new_tokens": cfg.max_new_tokens,
        "user_max_new_tokens": cfg.user_max_new_tokens,
        "tau2_version": TAU2_VERSION, "domain": cfg.domain, "split": cfg.split, "tasks_file": cfg.tasks_file,
        "wall_s": round(time.perf_counter() - t0, 1),
        M.INFRA_FAILURES: len(infra), "infra_failed_episodes": infra,
        M.USER_DEVIATION_RATE: float((df["user_deviations"] > 0).mean()) if len(df) else None,
        M.REQUEST_STATED_RATE: _rate(df["request_stated"]) if len(df) else None,
        M.PROPER_END_RATE: _rate(df["proper_end"]) if len(df) else None,
        M.PASS1_CI95: list(pass1_interval({k: v for k, v in by_task.items() if v})[1:]) if len(df) else None,
        **(breakdown(labels, by_task) if len(df) else {}),
        "leak": leak, "token_caps": caps,
        "warnings": [w for w in (budget_warning, leak_warning, (caps or {}).get("warning")) if w],
    }
    if cfg.cross_check and len(df):
        meta["tau2_agreement"] = float(df["agree"].mean())
    if reused_from:
        meta["reused_from"] = reused_from
    res = EvalResult(cfg, df, passk, meta)
    if out:
        res.write(out)
        if memo is not None and not infra and len(df) == len(tasks) * cfg.trials:
            memo.record(out)
    return res
