"""The episodes a report shows, as JSON-able dicts: every evaluation arm's and every engine
round's episodes, and the engine's proposals (kit/report/browser.py renders them).

    payload = browser_data(collect(run_dir))          # groups of episodes, engine proposals

What an episode shows: the dialogue (system prompt folded, user, agent, tool calls with their
arguments, tool results, errors), the verdict (reward, breakdown DB / ACTION / COMMUNICATE /
ENV_ASSERTION / CODE, which gold actions and facts were met, the reason), the termination reason, the
failure attribution with `decided_by`, and the user-fidelity flags (deviations with their turn,
request stated, proper end).

Where each comes from, read back with the kit's own readers and models:
  - an evaluation (kit/eval/runner.py writes eval.json and trajectories.jsonl, not the verdicts):
    trajectories through `kit.eval.results.done_pairs` (the pairs the evaluation scored), the tasks as
    the evaluation loaded them, and the verdict, deviations and attribution recomputed with the
    functions the evaluation and the engine use (kit.verify.verify, kit.rollout.fidelity,
    kit.checkers.attribution.attribute). The verifier is deterministic; a recomputed reward that
    differs from eval.json's is shown on the episode, never hidden.
  - an engine run (kit/engine/store.py): committed units (`RunStore.units`), each trajectory's meta
    (the checker's reward and breakdown, the user deviations), its failures.jsonl row (attribution),
    its task and checker (checked_tasks.jsonl as `CheckedTask`), and proposals.jsonl (every attempt, its
    rejection reasons; a rejected attempt's task when the engine recorded it).

Size: at most `cap` episodes per evaluation and per engine round (default 40), whole tasks in one
task order shared by every group (a stable hash of the task id), so the side-by-side view finds the
same tasks in every arm; the rest are counted (passed / failed / cut by max_steps). Long messages are
cut at MAX_CHARS; the system prompt is stored once per distinct text.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from kit.report.run_data import eval_label


CAP = 40  # episodes per evaluation and per engine round
PROPOSAL_CAP = 60  # engine proposals per round
MAX_CHARS = 2000  # per message text (a tool result can be a whole table)


# ----- episodes ----------------------------------------------------------------------------------


def _order_key(task_id: str) -> str:
    """A task order shared by every group (not alphabetical: a sample spreads over the task set)."""
    return hashlib.sha1(str(task_id).encode()).hexdigest()


def _cut(text: Optional[str], n: int = MAX_CHARS) -> Optional[str]:
    if text is None or len(text) <= n:
        return text
    return text[:n] + f" … ({len(text) - n} more characters)"


def episode_status(passed: bool, termination: str) -> str:
    return "passed" if passed else ("max_steps" if termination == "max_steps" else "failed")


def _counts(items: list[tuple[bool, str]]) -> dict:
    """{'episodes', 'passed', 'failed', 'max_steps'} of (passed, termination) pairs (max_steps: failed and cut)."""
    return {"episodes": len(items), "passed": sum(p for p, _ in items), "failed": sum(not p for p, _ in items),
            "max_steps": sum(t == "max_steps" for _, t in items)}


def messages_view(traj, texts: dict) -> list[dict]:
    """A trajectory's messages as compact dicts; a system prompt goes to `texts` once (by hash)."""
    names = {tc.id: tc.name for m in traj.messages for tc in (m.tool_calls or [])}
    out = []
    for i, m in enumerate(traj.messages):
        d: dict[str, Any] = {"i": i, "role": m.role}
        if m.role == "system":
            h = hashlib.sha1((m.content or "").encode()).hexdigest()[:12]
            texts.setdefault(h, m.content or "")
            d["ref"], d["chars"] = h, len(m.content or "")
        else:
            d["content"] = _cut(m.content)
        if m.tool_calls:
            d["calls"] = [{"name": tc.name, "arguments": tc.arguments, "requestor": tc.requestor}
                          for tc in m.tool_calls]
        if m.role == "tool":
            d["tool"] = names.get(m.tool_call_id or "", "?")
            d["requestor"] = m.requestor
            d["error"] = bool(m.error)
        if m.meta.get("parse_error"):
            d["parse_error"] = _cut(str(m.meta["parse_error"]), 300)
        out.append(d)
    return out


def verdict_view(v) -> dict:
    """A kit.verify Verdict (or the engine's checker verdict) as the browser shows it."""
    return {"reward": v.reward, "breakdown": v.breakdown or {}, "reason": v.reason, "db_match": v.db_match,
            "actions": [{"name": a["action"]["name"], "arguments": a["action"].get("arguments"), "met": bool(a["met"])}
                        for a in v.actions],
            "communicate": [{"info": c["info"], "met": bool(c["met"])} for c in v.communicate],
            "env_assertions": [{"assertion": _cut(json.dumps(a.get("assertion", a), default=str), 300),
                                "met": bool(a.get("met"))} for a in v.env_assertions],
            "code_status": v.code_status}


def _episode(traj, texts: dict, *, group: str, verdict: dict, attribution: Optional[dict], fidelity: dict,
             note: Optional[str] = None) -> dict:
    passed = verdict.get("reward") == 1.0
    return {"uid": f"{group}/{traj.task_id}/{traj.trial or 0}/{traj.id[:8]}", "group": group, "task_id": traj.task_id,
            "trial": traj.trial or 0, "passed": passed, "status": episode_status(passed, traj.termination_reason),
            "termination": traj.termination_reason, "steps": traj.meta.get("steps"), "verdict": verdict,
            "attribution": attribution, "fidelity": fidelity, "note": note, "messages": messages_view(traj, texts)}


def sample_keys(keys: list[tuple[str, int]], cap: Optional[int]) -> list[tuple[str, int]]:
    """(task, trial) pairs to show: whole tasks in the shared task order, up to `cap` episodes."""
    order = sorted(keys, key=lambda k: (_order_key(k[0]), k[1]))
    if cap is None or len(order) <= cap:
        return order
    return order[:cap]


# ----- evaluations -------------------------------------------------------------------------------


def _eval_inputs(stage_dir: Path):
    """(EvalConfig, eval.json episode rows by (task, trial), trajectories by (task, trial)) of an evaluate stage."""
    from kit.eval.config import EvalConfig
    from kit.eval.results import done_pairs
    from kit.files import read_json
    from kit.stages import outputs_class

    info = read_json(stage_dir / "stage.json") or {}
    ev = outputs_class(info.get("stage")).from_stage_json(info).eval_json()  # its stage's Outputs (kit/stages)
    cfg = EvalConfig.model_validate(ev.get("config") or {}, context={"recorded": True})  # as it ran
    rows = {(r["task_id"], int(r.get("trial") or 0)): r for r in ev.get("episodes") or []}
    trajs: dict = {}
    if (stage_dir / "trajectories.jsonl").exists():
        trajs = done_pairs(stage_dir / "trajectories.jsonl")
    else:
        from kit.eval.tau2_native import SIM_FILE

        if (stage_dir / SIM_FILE).exists():  # protocol tau2: tau2's SimulationRuns, in the kit's message model
            from tau2.data_model.simulation import SimulationRun

            from kit.trajectory import Trajectory

            trajs = {k: Trajectory.from_tau2(s, domain=cfg.domain) for k, s in
                     done_pairs(stage_dir / SIM_FILE, SimulationRun).items()}
    return cfg, rows, trajs


def _eval_tasks(cfg) -> tuple[Any, dict]:
    """The domain and {task id: Task} as kit.eval.runner.evaluate loads them."""
    from kit.envs import load_domain
    from kit.eval.results import load_tasks_file

    dom = load_domain(cfg.domain)
    tasks = load_tasks_file(cfg.tasks_file) if cfg.tasks_file else dom.tasks(cfg.split)
    return dom, {t.id: t for t in tasks}


def eval_episode(dom, task, traj, row: Optional[dict], texts: dict, group: str) -> dict:
    """One evaluation episode with its verdict, attribution and fidelity flags, recomputed by the kit's own
    verifier, attribution rules and fidelity checks."""
    from kit.checkers.attribution import attribute
    from kit.rollout.fidelity import proper_end, request_stated, user_deviations
    from kit.verify import verify

    if task is None:
        return _episode(traj, texts, group=group, verdict={"reward": (row or {}).get("reward"), "breakdown": {}},
                        attribution=None, fidelity={}, note="task not found in the evaluation's task set: no verdict")
    v = verify(dom, task, traj)
    devs = user_deviations(task, traj, goal_reached=(v.reward == 1.0))
    att = None
    if v.reward < 1.0:
        a = attribute(dom, task, traj, criteria=v)
        att = {"label": a.label, "rule": a.rule, "decided_by": a.decided_by, "turn": a.turn,
               "evidence": _cut(a.evidence, 300)}
    note = None
    if row is not None and row.get("reward") is not None and float(row["reward"]) != v.reward:
        note = f"eval.json records reward {row['reward']}; the verifier now gives {v.reward}"
    fid = {"deviations": [{"turn": d.turn, "kind": d.kind, "evidence": _cut(d.evidence, 200)} for d in devs],
           "request_stated": request_stated(task, traj, domain=dom), "proper_end": proper_end(traj)}
    return _episode(traj, texts, group=group, verdict={**verdict_view(v), "gold": _gold(task)}, attribution=att,
                    fidelity=fid, note=note)


def eval_group(ev: dict, texts: dict, cap: Optional[int] = CAP, pick=None) -> dict:
    """One evaluation (an entry of kit.report.run_data.collect's 'evals') as a browser group. `pick(keys, rows)`:
    the (task, trial) pairs to build, from those with a trajectory and eval.json's rows (default: the capped sample)."""
    d = Path(ev["dir"])
    gid = f"eval:{ev['key']}"
    label = eval_label(ev)
    group = {"id": gid, "kind": "eval", "key": ev["key"], "arm": ev.get("arm"), "label": label, "episodes": []}
    cfg, rows, trajs = _eval_inputs(d)
    keys = sorted(set(rows) | set(trajs))
    group["total"] = _counts([(float(rows[k]["reward"]) == 1.0 if k in rows else False,
                               (rows.get(k) or {}).get("termination") or getattr(trajs.get(k), "termination_reason", ""))
                              for k in keys])
    if not trajs:
        group["note"] = "no trajectories recorded for this evaluation (trajectories.jsonl missing)"
        group["shown"] = _counts([])
        return group
    have = [k for k in keys if k in trajs]
    chosen = pick(have, rows) if pick is not None else sample_keys(have, cap)
    dom, tasks = _eval_tasks(cfg)
    for k in chosen:
        if k in trajs:
            group["episodes"].append(eval_episode(dom, tasks.get(k[0]), trajs[k], rows.get(k), texts, gid))
    group["shown"] = _counts([(e["passed"], e["termination"]) for e in group["episodes"]])
    return group


# ----- engine runs -------------------------------------------------------------------------------


def _scenario(task) -> dict:
    instr = getattr(task.user_scenario, "instructions", None) if task.user_scenario else None
    if instr is None or isinstance(instr, str):
        return {"instructions": instr or ""}
    return {k: v for k, v in instr.model_dump().items() if v and k != "domain"}


def _gold(task) -> dict:
    crit = task.evaluation_criteria
    return {"actions": [{"name": a.name, "arguments": a.arguments, "requestor": a.requestor}
                        for a in ((crit.actions if crit else None) or [])],
            "communicate": list((crit.communicate_info if crit else None) or [])}


def engine_groups(en: dict, texts: dict, cap: Optional[int] = CAP,
                  proposal_cap: Optional[int] = PROPOSAL_CAP) -> tuple[list[dict], list[dict]]:
    """An engine run (an entry of collect's 'engine'): one browser group of episodes per round, and one
    group of proposals per round."""
    from kit.checkers.checker import CheckedTask
    from kit.engine.pools import POOL_FILES
    from kit.engine.store import RunStore
    from kit.files import read_json, read_jsonl
    from kit.trajectory import Trajectory

    d = Path(en["dir"])
    try:
        units = RunStore(d).units()
    except RuntimeError as e:  # a run folder from an older kit
        return [], [{"id": f"engine:{en['key']}", "label": en["key"], "note": str(e), "proposals": []}]
    checked = {}
    # every accepted task with its checker (an older run folder: its two pools)
    names = ["checked_tasks.jsonl"] if (d / "checked_tasks.jsonl").exists() else list(POOL_FILES.values())
    for name in names:
        for row in read_jsonl(d / name):
            rec = CheckedTask.model_validate(row)
            checked[rec.task.id] = rec
    ecfg = (read_json(d / "manifest.json") or {}).get("config") or {}
    rounds = sorted({u.round for u in units})
    groups, prop_groups = [], []
    for r in rounds:
        us = [u for u in units if u.round == r]
        gid = f"engine:{en['key']}:r{r}"
        fails = {f.get("trajectory_id"): f for u in us for f in u.failures}
        trajs = [Trajectory.model_validate(t) for u in us for t in u.trajectories]
        items = [(t.meta.get("reward") == 1.0, t.termination_reason) for t in trajs]
        keyed = {(t.task_id, int(t.meta.get("trial", t.trial or 0)), t.id): t for t in trajs}
        order = sorted(keyed, key=lambda k: (_order_key(k[0]), k[1], k[2]))
        shown = order if cap is None else order[:cap]
        eps = []
        for k in shown:
            t = keyed[k]
            t.trial = k[1]
            rec = checked.get(t.task_id)
            f = fails.get(t.id)
            verdict = {"reward": t.meta.get("reward"), "breakdown": t.meta.get("breakdown") or {},
                       "reason": (f or {}).get("reason"), "gold": _gold(rec.task) if rec else None}
            att = ({"label": f["label"], "rule": f["rule"], "decided_by": f.get("decided_by"),
                    "evidence": f.get("evidence")} if f else None)
            fid = {"deviations": [{"turn": x.get("turn"), "kind": x.get("kind"), "evidence": _cut(str(x.get("evidence")), 200)}
                                  for x in t.meta.get("user_deviations") or []]}
            eps.append(_episode(t, texts, group=gid, verdict=verdict, attribution=att, fidelity=fid))
        groups.append({"id": gid, "kind": "engine", "key": en["key"], "arm": en.get("arm"), "round": r,
                       "label": f"{en['key']} round {r}", "episodes": eps, "total": _counts(items),
                       "shown": _counts([(e["passed"], e["termination"]) for e in eps])})
        props = [p for u in us for p in u.proposals]
        views = [proposal_view(p, checked, ecfg) for p in (props if proposal_cap is None else props[:proposal_cap])]
        prop_groups.append({"id": gid, "label": f"{en['key']} round {r}", "round": r, "proposals": views,
                            "total": {"proposals": len(props), "accepted": sum(bool(p.get("accepted")) for p in props),
                                      "rejected": sum(not p.get("accepted") for p in props)},
                            "shown": len(views)})
    return groups, prop_groups


def proposal_view(p: dict, checked: dict, ecfg: dict) -> dict:
    """One proposals.jsonl row: scenario, gold actions, checks passed or failed and why, the checker's
    mutation report."""
    from kit.engine.rounds import REJECT_CHECKS

    rec = checked.get(p.get("task_id")) if p.get("accepted") else None
    task = rec.task if rec is not None else None
    if task is None and p.get("task"):  # a rejected attempt's task (kit/engine/run.py records it)
        from tau2.data_model.tasks import Task

        task = Task.model_validate(p["task"])
    reasons = p.get("reasons") or []
    mutation = rec.checker.mutation_report if rec is not None else \
        next((x.get("mutation_report") for x in reasons if x.get("mutation_report")), None)
    skipped = [c for c, on in (("llm_judge", ecfg.get("llm_judge", True)),) if not on]
    if ecfg.get("validation") is False:
        passed = []
        checks_note = "validation off: the gold state is the checker, nothing else is checked"
    elif p.get("accepted"):
        passed = [c for c in REJECT_CHECKS if c not in skipped]
        checks_note = "passed every validation check" + (f" ({', '.join(skipped)} off)" if skipped else "")
    else:
        passed = []
        checks_note = "rejected at the first failing validation step (later steps did not run)"
    return {"unit": p.get("unit"), "attempt": p.get("attempt"), "plan_id": p.get("plan_id"),
            "task_id": p.get("task_id"), "accepted": bool(p.get("accepted")),
            "scenario": _scenario(task) if task is not None else None,
            "gold": _gold(task) if task is not None else None,
            "failed": [{"check": x.get("check"), "detail": _cut(str(x.get("detail")), 500)} for x in reasons],
            "passed": passed, "checks_note": checks_note, "mutation_report": mutation,
            "checker": (rec.checker.origin if rec is not None else None),
            "failure": p.get("failure"), "repairs": p.get("repairs") or [],
            "fidelity": {k: v for k, v in (p.get("fidelity") or {}).items() if v}}


# ----- the whole run -----------------------------------------------------------------------------


def browser_data(data: dict, cap: Optional[int] = CAP, proposal_cap: Optional[int] = PROPOSAL_CAP) -> dict:
    """Everything the browser shows, from kit.report.run_data.collect(run_dir)'s output."""
    texts: dict[str, str] = {}
    groups, proposals, problems = [], [], []
    for ev in data.get("evals") or []:
        try:
            groups.append(eval_group(ev, texts, cap))
        except Exception as e:  # one unreadable stage costs its own group, never the report
            problems.append(f"{ev['key']}: {type(e).__name__}: {e}")
    for en in data.get("engine") or []:
        try:
            g, p = engine_groups(en, texts, cap, proposal_cap)
            groups += g
            proposals += p
        except Exception as e:
            problems.append(f"{en['key']}: {type(e).__name__}: {e}")
    return {"groups": groups, "proposals": proposals, "texts": texts, "cap": cap, "proposal_cap": proposal_cap,
            "problems": problems}
