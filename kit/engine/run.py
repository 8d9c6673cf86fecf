"""The engine's driver: plans → tasks → validation → rollouts → checkers → reflection, K rounds.

    result = run_engine(EngineConfig(domain="mock", out_dir="runs/demo", rounds=3, num_plans=4))

A round runs every plan as one *unit* (kit/engine/store.py): the plan's task proposals
(kit/engine/synthesize.py), their validation (kit/engine/validate.py), G rollouts per
accepted task scored by the task's checker, failure attribution, SFT samples — then the
unit is committed. After the round, rounds.csv is rewritten from the committed records and
the reflector (kit/engine/reflect.py) writes the next round's plans. Rerunning with the
same out_dir resumes at the first uncommitted unit.

Outputs (runs/<id>/): tasks.jsonl (tau2 Task per line), rl_tasks.jsonl (task + checker),
trajectories.jsonl, sft_agent.jsonl, sft_user.jsonl, failures.jsonl, proposals.jsonl (every
attempt with its decisions and rejection reasons), units.jsonl (commits), rounds.csv,
plans/round_<k>.json, prompts/round_<k>/, manifest.json.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from tqdm import tqdm

from kit import metrics as M
from kit._tau2 import TAU2_VERSION
from kit.checkers.checker import CheckedTask, Checker, run_checker
from kit.checkers.attribution import attribute
from kit.checkers.codegen import state_checker_source
from kit.engine.choice import Chooser
from kit.engine.config import EngineConfig
from kit.engine.plans import diversity, load_plans, meta_plan, save_plans
from kit.engine.prompts import Prompts
from kit.engine.reflect import reflect
from kit.engine.store import RunStore, atomic_write, unit_id
from kit.engine.synthesize import Synthesizer
from kit.engine.validate import executable_checks, llm_judgment, make_checker
from kit.envs.domain import load_domain
from kit.llm.types import SamplingParams
from kit.rollout.fidelity import user_deviations
from kit.rollout.loop import RolloutConfig, run_episodes

ROUND_COLUMNS = [
    "round", "plans", "proposals", "built", "accepted", "acceptance_rate", "repaired",
    "reject_synthesis", "reject_gold_runs", "reject_changes_state", "reject_grounded_args", "reject_held_out", "reject_policy",
    "reject_gold_reward", "reject_checker_strength", "reject_llm_judge", "fidelity_templated",
    "episodes", M.PASS_RATE, "failures_task", "failures_agent", "failures_user", "failures_undetermined",
    M.USER_DEVIATION_RATE, "diversity", "sft_agent", "sft_user", "sft_ungrounded", "choice_fallbacks", "wall_s",
]


@dataclass
class EngineResult:
    out_dir: Path
    rounds: list[dict] = field(default_factory=list)
    accepted: int = 0
    resumed_units: int = 0

    def summary_line(self) -> str:
        props = sum(r["proposals"] for r in self.rounds)
        return (f"engine: {self.accepted} accepted of {props} proposals "
                f"({self.accepted / max(props, 1):.1%}) over {len(self.rounds)} rounds -> {self.out_dir}")


def _seed(*parts: Any) -> int:
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:8], 16)


def _git_commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


class Engine:
    def __init__(self, cfg: EngineConfig, progress: bool = True, backends: Optional[dict] = None):
        self.cfg = cfg
        self.progress = progress
        self.domain = load_domain(cfg.domain)
        self.store = RunStore(cfg.out_dir)
        self.out = self.store.dir
        self.prompts = Prompts(cfg.templates_dir)
        self._backends: dict[str, Any] = {}
        given = backends or {}
        self.engine_llm = given.get("model") or self._backend(cfg.model)
        self.agent = given.get("agent") or self._backend(cfg.agent_model or cfg.model)
        self.user = given.get("user") or self._backend(cfg.user_model or cfg.model)
        self.chooser = Chooser(self.engine_llm, temperature=cfg.choice_temperature, seed=cfg.seed)  # plans, reflection
        self._commit_lock = threading.Lock()
        self._tokenizer = None
        self._sandbox = None
        self._wandb = None

    # ----- resources --------------------------------------------------------------------------

    def _backend(self, spec: Any):
        from kit.llm import make_backend

        key = json.dumps(spec, sort_keys=True, default=str)
        if key not in self._backends:
            self._backends[key] = make_backend(spec)
        return self._backends[key]

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            if self.cfg.sft_tokenizer:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(self.cfg.sft_tokenizer)
            elif self.agent.caps.tokenizer:
                self._tokenizer = self.agent.tokenizer
            else:
                from transformers import AutoTokenizer

                from kit.llm.embedded import ensure_embedded_model

                self._tokenizer = AutoTokenizer.from_pretrained(str(ensure_embedded_model()))
        return self._tokenizer

    @property
    def sandbox(self):
        if self._sandbox is None:
            from kit.checkers.sandbox import default_sandbox

            self._sandbox = default_sandbox()
        return self._sandbox

    # ----- manifest and logging -----------------------------------------------------------------

    def _manifest(self, status: str, extra: Optional[dict] = None) -> None:
        models = {}
        for role, spec in (("engine", self.cfg.model), ("agent", self.cfg.agent_model or self.cfg.model),
                           ("user", self.cfg.user_model or self.cfg.model)):
            b = self._backend(spec) if json.dumps(spec, sort_keys=True, default=str) in self._backends else None
            models[role] = {"spec": spec, "path": getattr(b, "path", None)}
        m = {
            "kind": "engine", "status": status, "updated": datetime.now().isoformat(timespec="seconds"),
            "domain": self.cfg.domain, "models": models, "settings": self.cfg.model_dump(),
            "tau2_version": TAU2_VERSION, "git_commit": _git_commit(),
            "generator": {
                "synthesis": "model decisions among environment-offered options (constrained choice, "
                             "kit/engine/choice.py) and model-written prose; no template-generated tasks",
                "repairs": "executable repairs and fidelity-gate templates are recorded per proposal "
                           "(proposals.jsonl 'repairs', 'fidelity')",
                "gold_dialogues": ("sft_agent.jsonl / sft_user.jsonl include the grounded gold dialogues of accepted "
                                   "tasks (meta.source = 'gold')") if self.cfg.gold_dialogues else None,
            },
        }
        if extra:
            m.update(extra)
        atomic_write(self.out / "manifest.json", json.dumps(m, indent=1, default=str))

    def _log_wandb(self, row: dict) -> None:
        if not self.cfg.wandb:
            return
        if self._wandb is None:
            try:
                import wandb
            except ImportError:
                self.cfg.wandb = False
                return
            os.environ.setdefault("WANDB_MODE", "offline")
            os.environ.setdefault("WANDB_SILENT", "true")
            self._wandb = wandb.init(project=self.cfg.wandb_project, group=self.cfg.wandb_group or self.out.name,
                                     job_type="synthesize", dir=str(self.out), config=self.cfg.model_dump(),
                                     reinit="finish_previous", name=f"synthesize-{self.out.name}")
        self._wandb.log(M.wandb_keys("engine", row), step=row["round"])

    # ----- plans ------------------------------------------------------------------------------

    def _plans_path(self, r: int) -> Path:
        return self.out / "plans" / f"round_{r}.json"

    def _initial_plans(self) -> None:
        path = self._plans_path(0)
        if path.exists():
            return
        self.chooser.reseed(_seed(self.cfg.seed, "meta-plan"))
        plans, stats = meta_plan(self.domain, self.cfg.num_plans, self.chooser, self.prompts,
                                 max_similarity=self.cfg.max_similarity, seed=self.cfg.seed)
        save_plans(path, plans)
        atomic_write(self.out / "plans" / "meta_planner.json", json.dumps(stats, indent=1))
        self.prompts.save(self.out / "prompts" / "round_0", plans)

    # ----- one unit: one plan in one round ------------------------------------------------------

    def _unit_roles(self, seed: int) -> tuple[Chooser, Synthesizer]:
        """A unit's own chooser and synthesizer, so units can run side by side (endpoints)."""
        chooser = Chooser(self.engine_llm, temperature=self.cfg.choice_temperature, seed=seed)
        synth = Synthesizer(self.domain, chooser, self.prompts, explore_steps=self.cfg.explore_steps,
                            max_repairs=self.cfg.max_repairs, repair_scenario=self.cfg.repair_scenario)
        return chooser, synth

    def _validate(self, plan, prop, chooser: Chooser) -> tuple[Optional[CheckedTask], list[dict]]:
        if prop.task is None:
            return None, [{"check": "synthesis", "detail": prop.failure}]
        if not self.cfg.validation:
            code = state_checker_source(self.domain, prop.task)
            return CheckedTask(task=prop.task, checker=Checker(code=code, origin="codegen:gold_state")), []
        reasons = executable_checks(self.domain, prop.task)
        if reasons:
            return None, reasons
        rec, reasons = make_checker(self.domain, prop.task, self.sandbox)
        if reasons:
            return None, reasons
        if self.cfg.llm_judge:
            ok, decision = llm_judgment(chooser, self.prompts, plan, prop.task, self.cfg.judge_threshold)
            if not ok:
                return None, [{"check": "llm_judge", "detail": f"model judged the task off-plan (P(no)={decision['p_no']})"}]
        return rec, []

    def _run_unit(self, r: int, p: int, plan) -> dict:
        t0 = time.perf_counter()
        unit = unit_id(r, p)
        chooser, synth = self._unit_roles(_seed(self.cfg.seed, r, p))
        proposals, accepted = [], []
        for a in range(self.cfg.tasks_per_plan):
            prop = synth.propose(plan, unit, a, f"syn-{unit}-a{a}", seed=_seed(self.cfg.seed, r, p, a))
            rec, reasons = self._validate(plan, prop, chooser)
            row = prop.record()
            row.update({"round": r, "accepted": rec is not None, "reasons": reasons})
            proposals.append(row)
            if rec is not None:
                accepted.append(rec)
        trajs, failures = [], []
        if accepted and self.cfg.group_size > 0:
            trajs, failures = self._rollouts(unit, r, accepted)
        sft_agent, sft_user, ungrounded = self._sft(accepted, trajs)
        with self._commit_lock:
            return self._commit(unit, r, plan, t0, chooser, proposals, accepted, trajs, failures, sft_agent, sft_user,
                                ungrounded)

    def _commit(self, unit, r, plan, t0, chooser, proposals, accepted, trajs, failures, sft_agent, sft_user,
                ungrounded) -> dict:
        self.store.append("tasks.jsonl", [rec.task.model_dump_json(exclude_none=True) for rec in accepted])
        self.store.append("rl_tasks.jsonl", accepted)
        self.store.append("trajectories.jsonl", trajs)
        self.store.append("sft_agent.jsonl", sft_agent)
        self.store.append("sft_user.jsonl", sft_user)
        self.store.append("failures.jsonl", failures)
        self.store.append("proposals.jsonl", proposals)
        summary = {"round": r, "plan": plan.id, "proposals": len(proposals), "accepted": len(accepted),
                   "episodes": len(trajs), "sft_agent": len(sft_agent), "sft_user": len(sft_user),
                   "sft_ungrounded": ungrounded, "choice_fallbacks": chooser.fallbacks,
                   "wall_s": round(time.perf_counter() - t0, 2)}
        self.store.commit(unit, summary)
        return summary

    def _rollouts(self, unit: str, r: int, accepted: list[CheckedTask]):
        cfg = self.cfg
        g = cfg.group_size
        rcfg = RolloutConfig(
            max_messages=cfg.max_messages, seed=_seed(cfg.seed, unit, "rollout") % (1 << 30),
            agent_params=SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens),
            user_params=SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.user_max_new_tokens))
        tasks = [rec.task for rec in accepted for _ in range(g)]
        trajs = run_episodes(self.domain, tasks, self.agent, self.user, rcfg, progress=self.progress)
        by_id = {rec.task.id: rec for rec in accepted}
        failures = []
        for i, traj in enumerate(trajs):
            rec = by_id[traj.task_id]
            traj.meta.update({"source": "engine", "unit": unit, "trial": i % g})
            v = run_checker(self.domain, rec, traj, self.sandbox)
            devs = user_deviations(rec.task, traj, goal_reached=v.reward == 1.0)
            traj.meta.update({"reward": v.reward, "breakdown": v.breakdown,
                              "user_deviations": [d.__dict__ for d in devs]})
            if v.reward < 1.0:
                att = attribute(self.domain, rec.task, traj)
                failures.append({"unit": unit, "round": r, "task_id": traj.task_id, "trajectory_id": traj.id,
                                 "label": att.label, "rule": att.rule, "decided_by": att.decided_by,
                                 "evidence": att.evidence[:300], "reason": v.reason,
                                 "termination": traj.termination_reason})
        return trajs, failures

    def _sft(self, accepted: list[CheckedTask], trajs: list) -> tuple[list, list, int]:
        """Agent and user SFT samples of a unit: rolled-out dialogues that passed trajectory validation,
        plus the gold dialogues of the accepted tasks (grounded: the user states the request first);
        every sample passes the grounding check (kit/grounding.py) or is dropped and counted."""
        from kit.grounding import grounded_only
        from kit.train.sft_data import build_sft_samples, gold_sft_samples

        if not accepted:
            return [], [], 0
        tasks = [rec.task for rec in accepted]
        if self.cfg.validation:  # trajectory validation: successful episodes, users who kept to the script
            agent_trajs = [t for t in trajs if t.meta.get("reward") == 1.0]
            user_trajs = [t for t in trajs if not t.meta.get("user_deviations")]
        else:
            agent_trajs = user_trajs = trajs
        agent, _ = build_sft_samples(agent_trajs, self.domain, self.tokenizer, tasks=tasks) if agent_trajs else ([], [])
        _, user = build_sft_samples(user_trajs, self.domain, self.tokenizer, tasks=tasks) if user_trajs else ([], [])
        if self.cfg.gold_dialogues:
            gold_agent, gold_user = gold_sft_samples(self.domain, tasks, self.tokenizer)
            agent += gold_agent
            user += gold_user
        agent, dropped_a = grounded_only(agent)
        user, dropped_u = grounded_only(user)
        return agent, user, len(dropped_a) + len(dropped_u)

    # ----- rounds -----------------------------------------------------------------------------

    def _round_row(self, r: int, plans) -> tuple[dict, dict, dict, dict]:
        props = [p for p in self.store.rows("proposals.jsonl") if p["round"] == r]
        fails = [f for f in self.store.rows("failures.jsonl") if f["round"] == r]
        units = [u for u in self.store.committed().values() if u["round"] == r]
        trajs = [t for t in self.store.rows("trajectories.jsonl") if t.get("meta", {}).get("unit", "").startswith(f"r{r}-")]
        rej = Counter(reason["check"] for p in props if not p["accepted"] for reason in p["reasons"][:1])
        labels = Counter(f["label"] for f in fails)
        rewards = [t["meta"].get("reward", 0.0) for t in trajs]
        accepted = sum(p["accepted"] for p in props)
        row = {
            "round": r, "plans": len(plans), "proposals": len(props), "built": sum(p["task_id"] is not None for p in props),
            "accepted": accepted, "acceptance_rate": round(accepted / max(len(props), 1), 4),
            "repaired": sum(bool(p["repairs"]) for p in props),
            **{f"reject_{k}": rej.get(k, 0) for k in ("synthesis", "gold_runs", "changes_state", "grounded_args",
                                                       "held_out", "policy", "gold_reward", "checker_strength", "llm_judge")},
            "episodes": len(trajs), M.PASS_RATE: round(sum(rewards) / len(rewards), 4) if rewards else None,
            **{f"failures_{k}": labels.get(k, 0) for k in ("task", "agent", "user", "undetermined")},
            M.USER_DEVIATION_RATE: (round(sum(bool(t["meta"].get("user_deviations")) for t in trajs) / len(trajs), 4)
                                    if trajs else None),
            "diversity": round(diversity(plans), 4),
            "sft_agent": sum(u["sft_agent"] for u in units), "sft_user": sum(u["sft_user"] for u in units),
            "sft_ungrounded": sum(u.get("sft_ungrounded", 0) for u in units),
            "fidelity_templated": sum(any(str(x).startswith("fidelity:") for x in p["repairs"]) for p in props),
            "choice_fallbacks": sum(u["choice_fallbacks"] for u in units),
            "wall_s": round(sum(u["wall_s"] for u in units), 1),
        }
        stats, examples = {}, {}
        for plan in plans:
            mine = [p for p in props if p["plan_id"] == plan.id]
            ids = {p["task_id"] for p in mine}
            pf = [f for f in fails if f["task_id"] in ids]
            rj = Counter(reason["check"] if reason["check"] != "synthesis" else (reason["detail"] or "").split(":")[0]
                         for p in mine if not p["accepted"] for reason in p["reasons"][:1])
            fl = Counter(f["label"] for f in pf)
            episodes = sum(1 for t in trajs if (t.get("task_id") or "") in ids)
            stats[plan.id] = {"proposals": len(mine), "accepted": sum(p["accepted"] for p in mine),
                              "rejections": rj, "failures": fl, "episodes": episodes}
            examples[plan.id] = [f"{p['reasons'][0]['check']}: {(p['reasons'][0]['detail'] or '')[:120]}"
                                 for p in mine if not p["accepted"]] + [f"{f['label']}/{f['rule']}: {f['evidence'][:100]}"
                                                                        for f in pf]
        patterns: dict[str, tuple[int, int]] = {}
        for plan in plans:
            key = ">".join(plan.slice.tools)
            a, n = patterns.get(key, (0, 0))
            patterns[key] = (a + stats[plan.id]["accepted"], n + stats[plan.id]["proposals"])
        return row, stats, examples, patterns

    def _write_rounds(self, rows: list[dict]) -> None:
        import io

        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=ROUND_COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in ROUND_COLUMNS})
        atomic_write(self.out / "rounds.csv", buf.getvalue())

    def _map_units(self, r: int, todo: list):
        """Run a round's units; with an endpoint backend, `concurrency` of them at once (each
        unit's rollouts are already concurrent requests inside the backend)."""
        workers = self.cfg.concurrency if self._parallel_ok() else 1
        if workers <= 1:
            for p, plan in todo:
                yield self._run_unit(r, p, plan)
            return
        from concurrent.futures import ThreadPoolExecutor, as_completed

        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(self._run_unit, r, p, plan) for p, plan in todo]
            for f in as_completed(futures):
                yield f.result()

    def _parallel_ok(self) -> bool:
        """In-process models (hf) run one forward pass at a time: no threads for them."""
        return all(b.caps.parallel for b in (self.engine_llm, self.agent, self.user))

    def run(self) -> EngineResult:
        dropped = self.store.recover()
        committed = self.store.committed()
        self._manifest("running", {"recovered_lines_dropped": dropped})
        self._initial_plans()
        result = EngineResult(out_dir=self.out, resumed_units=len(committed))
        rows = []
        total = self.cfg.rounds * self.cfg.num_plans
        bar = tqdm(total=total, desc=f"engine {self.cfg.domain}", disable=not self.progress,
                   initial=sum(1 for u in committed if int(u.split("-")[0][1:]) < self.cfg.rounds))
        shown = {k: sum(u.get(k, 0) for u in committed.values()) for k in ("accepted", "episodes")}
        for r in range(self.cfg.rounds):
            plans = load_plans(self._plans_path(r))
            todo = [(p, plan) for p, plan in enumerate(plans) if unit_id(r, p) not in committed]
            for s in self._map_units(r, todo):
                shown["accepted"] += s["accepted"]
                shown["episodes"] += s["episodes"]
                bar.update(1)
                bar.set_postfix(round=r, **shown)  # run totals so far
            row, stats, examples, patterns = self._round_row(r, plans)
            rows.append(row)
            self._write_rounds(rows)
            self._log_wandb(row)
            nxt = self._plans_path(r + 1)
            if r + 1 < self.cfg.rounds and not nxt.exists():
                if self.cfg.evolution:
                    self.chooser.reseed(_seed(self.cfg.seed, r, "reflect"))
                    new = reflect(self.domain, plans, stats, examples, self.chooser, self.prompts, r, patterns)
                else:
                    new = plans
                save_plans(nxt, new)
                self.prompts.save(self.out / "prompts" / f"round_{r + 1}", new)
        bar.close()
        result.rounds = rows
        result.accepted = sum(row["accepted"] for row in rows)
        self._manifest("complete", {"accepted": result.accepted, "rounds": rows})
        if self._wandb is not None:
            self._wandb.finish()
        return result


def run_engine(cfg: EngineConfig | dict, progress: bool = True, backends: Optional[dict] = None) -> EngineResult:
    """Run (or resume) the data engine; `backends` may pass ready backends {"model", "agent", "user"}."""
    if isinstance(cfg, dict):
        cfg = EngineConfig(**cfg)
    return Engine(cfg, progress=progress, backends=backends).run()
