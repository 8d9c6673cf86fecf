"""The engine's driver: plans → tasks → validation → rollouts → checkers → reflection, K rounds.

    result = run_engine(EngineConfig(domain="mock", out_dir="runs/demo", rounds=3, num_plans=4))

A round reads top to bottom (`Engine.run`): its plans → one *unit* per plan (`_run_unit`: the
plan's task proposals, kit/engine/synthesize.py; their validation, kit/engine/validate.py; G
rollouts per accepted task, each verified once and scored by the task's checker, failures
attributed; SFT samples) returning a `UnitResult` (kit/engine/records.py) → the store commits
it (kit/engine/store.py) → the round's row of rounds.csv, a pure function of its committed units
(kit/engine/rounds.py) → the reflector (kit/engine/reflect.py) writes the next round's plans.
Rerunning with the same out_dir resumes at the first uncommitted unit.

Outputs (runs/<id>/): tasks.jsonl (tau2 Task per line), checked_tasks.jsonl (task + checker),
trajectories.jsonl, samples_agent.jsonl / samples_user.jsonl (SFT samples of every accepted task),
failures.jsonl, proposals.jsonl (every attempt with its decisions and rejection reasons), units.jsonl
(commits); after each round, the two disjoint pools as views of those (`_write_pools`,
kit/engine/pools.py): rl_tasks.jsonl (task + checker, for grpo), sft_tasks.jsonl and their SFT data
sft_agent.jsonl / sft_user.jsonl; rounds.csv, plans/round_<k>.json, prompts/round_<k>/, manifest.json.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Collection, Iterator, Optional

from tqdm import tqdm

from kit import metrics as M
from kit._tau2 import TAU2_VERSION
from kit.checkers.checker import CheckedTask, run_checker
from kit.checkers.attribution import attribute
from kit.engine.choice import Chooser
from kit.engine.config import EngineConfig
from kit.engine.plans import load_plans, meta_plan, save_plans
from kit.engine.prompts import Prompts
from kit.engine.pools import POOL_FILES, assign_pools
from kit.engine.records import Check, CommittedUnit, Episode, Rejection, UnitResult
from kit.engine.reflect import reflect
from kit.engine.rounds import RoundRow, plan_feedback, round_stats, write_rounds_csv
from kit.engine.store import RunStore, atomic_write, unit_id

# what round statistics read of a committed unit
ROUND_FILES = ("tasks.jsonl", "proposals.jsonl", "trajectories.jsonl", "failures.jsonl", "samples_agent.jsonl", "samples_user.jsonl")
from kit.engine.synthesize import Synthesizer
from kit.engine.validate import Seen, executable_checks, llm_judgment, make_checker
from kit.envs.domain import load_domain
from kit.llm.types import SamplingParams
from kit.rollout.fidelity import user_deviations
from kit.rollout.loop import RolloutConfig, run_episodes
from kit.verify import verify


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
        self._lazy = threading.Lock()  # units run in threads: one builds a lazy member, the others wait
        given = backends or {}
        self.engine_llm = given.get("model") or self._backend(cfg.model)
        self.agent = given.get("agent") or self._backend(cfg.agent_model or cfg.model)
        self.user = given.get("user") or self._backend(cfg.user_model or cfg.model)
        self.coalescer = self._coalesce() if cfg.concurrency > 1 else None
        self.chooser = Chooser(self.engine_llm, temperature=cfg.choice_temperature, seed=cfg.seed)  # plans, reflection
        self.write_tools = frozenset(n for n in self.domain.tool_names("assistant")
                                     if self.domain.tool_kind(n) == "write")
        self._seen: Optional[Seen] = None  # accepted tasks, for the duplicate check (loaded in run())
        self._tokenizer = None
        self._sandbox = None
        self._wandb = None

    # ----- resources --------------------------------------------------------------------------

    def _backend(self, spec: Any):
        from kit.llm import make_backend

        key = json.dumps(spec, sort_keys=True, default=str)
        with self._lazy:
            if key not in self._backends:
                self._backends[key] = make_backend(spec)
        return self._backends[key]

    def _coalesce(self):
        """In-process models run one forward pass at a time: the units then run in threads whose model
        calls are gathered and batched (kit/llm/coalesce.py); None where every backend takes calls
        from several threads itself (endpoints)."""
        if all(b.caps.parallel for b in (self.engine_llm, self.agent, self.user)):
            return None
        from kit.llm.coalesce import Coalescer

        coalescer, wrapped = Coalescer(), {}
        for role in ("engine_llm", "agent", "user"):
            b = getattr(self, role)
            if not b.caps.parallel:
                setattr(self, role, wrapped.setdefault(id(b), coalescer.wrap(b)))
        return coalescer

    @property
    def tokenizer(self):
        """Built once, on first use. Under a lock: two units reaching it at once made two tokenizers, or
        failed ("cannot import name 'AutoTokenizer' from 'transformers'": its lazy import is not
        thread-safe; seen in the rehearsal once its model was fast enough for both units to get here together)."""
        with self._lazy:
            return self._build_tokenizer()

    def _build_tokenizer(self):
        if self._tokenizer is None:
            if self.cfg.sft_tokenizer:
                from transformers import AutoTokenizer

                from kit.llm.embedded import ensure_embedded_model

                folder = self.cfg.sft_tokenizer
                self._tokenizer = AutoTokenizer.from_pretrained(
                    str(ensure_embedded_model()) if folder == "embedded" else folder)
            elif self.agent.caps.tokenizer:
                self._tokenizer = self.agent.tokenizer
            else:
                from transformers import AutoTokenizer

                from kit.llm.embedded import ensure_embedded_model

                self._tokenizer = AutoTokenizer.from_pretrained(str(ensure_embedded_model()))
        return self._tokenizer

    @property
    def sandbox(self):
        with self._lazy:
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
            self._wandb, why = M.start_wandb(self.cfg.wandb_project, self.cfg.wandb_group or self.out.name,
                                             M.WANDB_ENGINE_JOB, f"{M.WANDB_ENGINE_JOB}-{self.out.name}", str(self.out),
                                             self.cfg.model_dump())
            if self._wandb is None:  # tracking never costs a run: the rounds are in rounds.csv
                print(f"engine: W&B off ({why})")
                self.cfg.wandb = False
                return
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
                                 max_similarity=self.cfg.max_similarity, seed=self.cfg.seed,
                                 max_lookup_share=self.cfg.max_lookup_share,
                                 device_fix_share=self.cfg.device_fix_share)
        save_plans(path, plans)
        atomic_write(self.out / "plans" / "meta_planner.json", json.dumps(stats, indent=1))
        self.prompts.save(self.out / "prompts" / "round_0", plans)

    # ----- one unit: one plan in one round ------------------------------------------------------

    def _unit_roles(self, seed: int) -> tuple[Chooser, Synthesizer]:
        """A unit's own chooser and synthesizer, so units can run side by side (endpoints)."""
        chooser = Chooser(self.engine_llm, temperature=self.cfg.choice_temperature, seed=seed)
        synth = Synthesizer(self.domain, chooser, self.prompts, explore_steps=self.cfg.explore_steps,
                            max_repairs=self.cfg.max_repairs, repair_scenario=self.cfg.repair_scenario,
                            taken=self.seen.actions_taken, raw=self.cfg.raw_synthesis)
        return chooser, synth

    def _validate(self, plan, prop, chooser: Chooser) -> tuple[Optional[CheckedTask], list[Rejection], list[Rejection]]:
        """(the checked task or None, why it was rejected, what validation would have rejected it for but did
        not: `validation: false` runs every check and counts what it finds, rejecting only for the held-out
        guard and the LLM judge, which hold in both arms of the no_validation ablation)."""
        if prop.task is None:
            return None, [prop.failure], []
        reasons = executable_checks(self.domain, prop.task)
        if not self.cfg.validation:
            return self._unvalidated(plan, prop.task, chooser, reasons)
        if reasons:
            return None, reasons, []
        dup = self.seen.claim(prop.task)  # recorded now; forgotten if a later check rejects it
        if dup is not None:
            return None, [dup], []
        rec, reasons = make_checker(self.domain, prop.task, self.sandbox)
        reasons = reasons or self._judge(plan, prop.task, chooser)
        if reasons:
            self.seen.forget(prop.task)
            return None, reasons, []
        return rec, [], []

    def _judge(self, plan, task, chooser: Chooser) -> list[Rejection]:
        if not self.cfg.llm_judge:
            return []
        ok, decision = llm_judgment(chooser, self.prompts, plan, task, self.cfg.judge_threshold)
        return [] if ok else [Rejection(Check.LLM_JUDGE, f"model judged the task off-plan (P(no)={decision['p_no']})")]

    def _unvalidated(self, plan, task, chooser: Chooser, reasons: list[Rejection]):
        """validation off: accepted unless it holds an evaluation task's solution or the judge refuses it;
        the checker is the gold-state code (its strength tested only to count)."""
        held = [why for why in reasons if why.check == Check.HELD_OUT]
        if held:
            return None, held, []
        would = list(reasons)
        dup = self.seen.claim(task)
        if dup is not None:
            would.append(dup)
        rec, checker_reasons = make_checker(self.domain, task, self.sandbox)
        would += checker_reasons
        judged = self._judge(plan, task, chooser)
        if judged:
            if dup is None:
                self.seen.forget(task)
            return None, judged, []
        return rec, [], would

    @property
    def seen(self) -> Seen:
        """The tasks accepted so far (committed units' tasks.jsonl, then this process's acceptances)."""
        if self._seen is None:
            from kit.files import read_jsonl
            from tau2.data_model.tasks import Task

            self._seen = Seen([Task.model_validate(t) for t in read_jsonl(self.out / "tasks.jsonl")])
        return self._seen

    def _run_unit(self, r: int, p: int, plan) -> UnitResult:
        """One plan in one round: task proposals, their validation, rollouts of the accepted ones, SFT samples."""
        t0 = time.perf_counter()
        unit = unit_id(r, p)
        proposals, accepted, flagged = [], [], set()
        fallbacks = 0
        for a, (prop, chooser) in enumerate(self._proposals(unit, r, p, plan)):
            rec, reasons, would = self._validate(plan, prop, chooser)  # in attempt order: duplicates too
            fallbacks += chooser.fallbacks
            row = prop.record()
            row.update({"round": r, "accepted": rec is not None, "reasons": [why.to_json() for why in reasons],
                        "unvalidated": [why.to_json() for why in would]})
            if rec is None and prop.task is not None:  # a rejected task is nowhere else: its scenario and gold
                row["task"] = json.loads(prop.task.model_dump_json(exclude_none=True))
            proposals.append(row)
            if rec is not None:
                accepted.append(rec)
                if would:
                    flagged.add(rec.task.id)
        episodes = self._rollouts(unit, r, accepted) if accepted and self.cfg.group_size > 0 else []
        # samples of every accepted task; which of them are SFT data is the pools' choice (_write_pools)
        samples_agent, samples_user, ungrounded = self._sft(accepted, [e.trajectory for e in episodes], flagged)
        return UnitResult(unit=unit, round=r, plan_id=plan.id, proposals=proposals, accepted=accepted,
                          episodes=episodes, samples_agent=samples_agent, samples_user=samples_user,
                          sft_ungrounded=ungrounded,
                          choice_fallbacks=fallbacks, wall_s=round(time.perf_counter() - t0, 2))

    def _proposals(self, unit: str, r: int, p: int, plan) -> list[tuple[Any, Chooser]]:
        """The unit's task proposals, each with its own chooser and synthesizer (seeded by its attempt),
        and the chooser that judges it; side by side as worker jobs where the model calls are coalesced
        (their calls run as one batch), else one after another. A proposal does not see the tasks its
        unit's other proposals make: a repeat is the duplicate check's to reject."""
        def one(a: int) -> tuple[Any, Chooser]:
            chooser, synth = self._unit_roles(_seed(self.cfg.seed, r, p, a))
            return synth.propose(plan, unit, a, f"syn-{unit}-a{a}", seed=_seed(self.cfg.seed, r, p, a)), chooser

        n = self.cfg.tasks_per_plan
        if self.coalescer is None or n <= 1:
            return [one(a) for a in range(n)]
        from concurrent.futures import ThreadPoolExecutor

        def job(a: int) -> tuple[Any, Chooser]:
            with group.worker(f"{unit}-a{a:03d}"):
                return one(a)

        with self.coalescer.workers(n, n) as group, ThreadPoolExecutor(max_workers=n) as pool:
            return list(pool.map(job, range(n)))

    def _rollouts(self, unit: str, r: int, accepted: list[CheckedTask]) -> list[Episode]:
        """G episodes per accepted task; each is verified once, and that verdict serves the checker,
        the user-deviation check and (reward below 1) the failure attribution."""
        cfg = self.cfg
        g = cfg.group_size
        rcfg = RolloutConfig(
            max_messages=cfg.max_messages, seed=_seed(cfg.seed, unit, "rollout") % (1 << 30),
            agent_params=SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens),
            user_params=SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.user_max_new_tokens))
        tasks = [rec.task for rec in accepted for _ in range(g)]
        trajs = run_episodes(self.domain, tasks, self.agent, self.user, rcfg, progress=self.progress)
        failed = [t for t in trajs if t.infra_failed]  # a server's failure says nothing of task or agent
        if failed:
            print(f"engine: unit {unit}: {len(failed)} of {len(trajs)} episodes failed on a server and are left "
                  f"out: {failed[0].infra_error}")
            trajs = [t for t in trajs if not t.infra_failed]
        by_id = {rec.task.id: rec for rec in accepted}
        episodes = []
        for i, traj in enumerate(trajs):
            rec = by_id[traj.task_id]
            traj.meta.update({"source": "engine", "unit": unit, "trial": i % g})
            criteria = verify(self.domain, rec.task, traj)
            v = run_checker(self.domain, rec, traj, self.sandbox, criteria=criteria)
            devs = user_deviations(rec.task, traj, goal_reached=v.reward == 1.0)
            traj.meta.update({"reward": v.reward, "breakdown": v.breakdown,
                              "user_deviations": [d.__dict__ for d in devs]})
            failure = None
            if v.reward < 1.0:
                att = attribute(self.domain, rec.task, traj, criteria=criteria)
                failure = {"unit": unit, "round": r, "task_id": traj.task_id, "trajectory_id": traj.id,
                           "label": att.label, "rule": att.rule, "decided_by": att.decided_by,
                           "evidence": att.evidence[:300], "reason": v.reason, "termination": traj.termination_reason}
            episodes.append(Episode(trajectory=traj, verdict=v, failure=failure))
        return episodes

    def _sft(self, accepted: list[CheckedTask], trajs: list, flagged: Collection[str] = ()) -> tuple[list, list, int]:
        """Agent and user SFT samples of a unit: rolled-out dialogues that passed trajectory validation,
        plus the gold dialogues of the accepted tasks (grounded: the user states the request first);
        every sample passes the grounding check (kit/grounding.py) or is dropped and counted.
        Each sample's meta says whether validation keeps it (`validated`): with `validation: false`, its task
        passed every check (`flagged`: ids of the tasks a check would have rejected) and it is gold or from a
        rollout that passed its checker (agent) / whose user kept to the script (user). The SFT stage's
        `validated_only` trains on those alone: the full engine's data out of the same run."""
        from kit.grounding import grounded_only
        from kit.train.sft_data import build_sft_samples, gold_sft_samples

        if not accepted:
            return [], [], 0
        tasks = [rec.task for rec in accepted]
        passed = {t.id for t in trajs if t.meta.get("reward") == 1.0}  # what trajectory validation keeps
        on_script = {t.id for t in trajs if not t.meta.get("user_deviations")}
        if self.cfg.validation:  # trajectory validation: successful episodes, users who kept to the script
            agent_trajs = [t for t in trajs if t.id in passed]
            user_trajs = [t for t in trajs if t.id in on_script]
        else:
            agent_trajs = user_trajs = trajs
        agent, _ = build_sft_samples(agent_trajs, self.domain, self.tokenizer, tasks=tasks) if agent_trajs else ([], [])
        _, user = build_sft_samples(user_trajs, self.domain, self.tokenizer, tasks=tasks) if user_trajs else ([], [])
        if self.cfg.gold_dialogues:
            gold_agent, gold_user = gold_sft_samples(self.domain, tasks, self.tokenizer)
            agent += gold_agent
            user += gold_user
        for samples, kept in ((agent, passed), (user, on_script)):
            for s in samples:
                rolled_out = s.meta.get("source") == "engine"
                s.meta["validated"] = s.task_id not in flagged and (not rolled_out or s.trajectory_id in kept)
        agent, dropped_a = grounded_only(agent)
        user, dropped_u = grounded_only(user)
        return agent, user, len(dropped_a) + len(dropped_u)

    # ----- rounds -----------------------------------------------------------------------------

    def _map_units(self, r: int, todo: list) -> Iterator[UnitResult]:
        """A round's units, each as it finishes; `concurrency` of them at once: with endpoint backends
        as concurrent requests, with in-process models as worker threads whose model calls run batched
        (kit/llm/coalesce.py)."""
        workers = min(self.cfg.concurrency, len(todo)) if self._parallel_ok() else 1
        if workers <= 1:
            for p, plan in todo:
                yield self._run_unit(r, p, plan)
            return
        from concurrent.futures import ThreadPoolExecutor, as_completed

        def unit(p: int, plan) -> UnitResult:
            if group is None:
                return self._run_unit(r, p, plan)
            with group.worker(unit_id(r, p)):
                return self._run_unit(r, p, plan)

        with (self.coalescer.workers(len(todo), workers) if self.coalescer else contextlib.nullcontext()) as group, \
                ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(unit, p, plan) for p, plan in todo]
            for f in as_completed(futures):
                yield f.result()

    def _parallel_ok(self) -> bool:
        """In-process models (hf) run one forward pass at a time: no threads for them."""
        return all(b.caps.parallel for b in (self.engine_llm, self.agent, self.user))

    def _next_plans(self, r: int, plans: list, units: list[CommittedUnit]) -> None:
        """Round r+1's plans: the reflector's edits of round r's in the light of its units (without
        evolution, the same plans)."""
        new = plans
        if self.cfg.evolution:
            stats, examples, patterns = plan_feedback(plans, units)
            self.chooser.reseed(_seed(self.cfg.seed, r, "reflect"))
            new = reflect(self.domain, plans, stats, examples, self.chooser, self.prompts, r, patterns,
                          max_lookup_share=self.cfg.max_lookup_share, device_fix_share=self.cfg.device_fix_share)
        save_plans(self._plans_path(r + 1), new)
        self.prompts.save(self.out / "prompts" / f"round_{r + 1}", new)

    def _write_pools(self) -> dict[str, str]:
        """Split every accepted task so far into the two disjoint pools (kit/engine/pools.py) and write
        them, with the SFT pool's samples as the SFT data (each file replaced whole, atomically);
        returns {task id: pool}. A function of the committed units alone: a resumed run writes the same."""
        from kit.files import read_jsonl

        checked = [CheckedTask.model_validate(r) for r in read_jsonl(self.out / "checked_tasks.jsonl")]
        pools = assign_pools([c.task for c in checked], self.cfg.rl_share, self.cfg.seed, self.cfg.pool_split)

        def lines(rows) -> str:
            return "".join((r.model_dump_json() if hasattr(r, "model_dump_json") else json.dumps(r, ensure_ascii=False))
                           + "\n" for r in rows)

        for pool, name in POOL_FILES.items():
            atomic_write(self.out / name, lines(c for c in checked if pools[c.task.id] == pool))
        for role in ("agent", "user"):
            samples = read_jsonl(self.out / f"samples_{role}.jsonl")
            atomic_write(self.out / f"sft_{role}.jsonl", lines(s for s in samples if pools.get(s.get("task_id")) == "sft"))
        return pools

    def run(self) -> EngineResult:
        """Every round: plans → units → commit → rounds.csv row → next round's plans."""
        dropped = self.store.recover()
        committed = self.store.committed()
        self._manifest("running", {"recovered_lines_dropped": dropped})
        self._initial_plans()
        bar = tqdm(total=self.cfg.rounds * self.cfg.num_plans, desc=f"engine {self.cfg.domain}",
                   disable=not self.progress, initial=sum(u["round"] < self.cfg.rounds for u in committed.values()))
        shown = {k: sum(u.get(k, 0) for u in committed.values()) for k in ("accepted", "episodes")}  # run totals
        rows: list[RoundRow] = []
        for r in range(self.cfg.rounds):
            plans = load_plans(self._plans_path(r))
            todo = [(p, plan) for p, plan in enumerate(plans) if unit_id(r, p) not in committed]
            for result in self._map_units(r, todo):
                self.store.commit(result)
                shown["accepted"] += len(result.accepted)
                shown["episodes"] += len(result.episodes)
                bar.update(1)
                bar.set_postfix(round=r, **shown)
            units = self.store.units(round=r)
            pools = self._write_pools()  # over every round so far: earlier rounds' pool counts may move
            every = self.store.units(files=ROUND_FILES)  # the ledger read once, split by round below
            rows = [round_stats(i, load_plans(self._plans_path(i)) if i < r else plans,
                                [u for u in every if u.round == i], pools, self.write_tools) for i in range(r + 1)]
            write_rounds_csv(self.out / "rounds.csv", rows)
            self._log_wandb(rows[-1].as_dict())
            if r + 1 < self.cfg.rounds and not self._plans_path(r + 1).exists():
                self._next_plans(r, plans, units)
        bar.close()
        result = EngineResult(out_dir=self.out, rounds=[row.as_dict() for row in rows],
                              accepted=sum(row.accepted for row in rows), resumed_units=len(committed))
        self._manifest("complete", {"accepted": result.accepted, "rounds": result.rounds})
        if self._wandb is not None:
            self._wandb.finish()
        return result

def run_engine(cfg: EngineConfig | dict, progress: bool = True, backends: Optional[dict] = None) -> EngineResult:
    """Run (or resume) the data engine; `backends` may pass ready backends {"model", "agent", "user"}."""
    if isinstance(cfg, dict):
        cfg = EngineConfig(**cfg)
    return Engine(cfg, progress=progress, backends=backends).run()
