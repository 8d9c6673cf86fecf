"""GRPO's groups: which tasks a step samples, their G episodes each, rewards, dynamic filtering.

    draws = TaskDraws(tasks, seed=0, process_index=0)
    kept, seen, m = collect_groups(draws, procs, cfg, step_idx, rollout, reward_fn, probe=probe_groups)
    m.update(episode_metrics(seen, domain))

After a probe (kit/train/grpo_curriculum.py) its episodes of the band's tasks train the steps after it
(cfg.probe_train): `ProbeGroups.plan` assigns them to the draws the next `probe_train_steps` steps will
make, and collect_groups takes a drawn task's probe episodes as its group instead of rolling it out
(topped up to G with fresh episodes where probe_k < G), scored with the rewards the probe computed.

An episode a server failed (`Trajectory.infra_failed`: a 5xx or garbled turn of the user simulator or
the rollout server) is left out of its group, never scored (metrics `episodes/infra_failed`, and per
group in `groups`); a group left with fewer than two episodes has no advantage and is dropped like a
filtered one. A rollout call whose every episode a server failed stops GRPO with that server's error:
a server failing everything is down, and a rerun resumes from the last checkpoint once it is back.

A failed episode (checker reward < 1) that failure attribution (kit/checkers/attribution.py, its rules
only: `UserFaultCheck`) puts on the user simulator is a user fault: the reward cannot tell the agent's
failure from the user's. Under `user_faults: mask` it is left out of its group (not in `trajs`, so not in
the advantages; kept in `masked`), and a replacement episode of the same task is rolled out in its place,
all of a round's replacements in one rollout call, again while replacements fault, never more than were
masked, and only while the step's resample budget lasts (a group it leaves with fewer than two episodes is
dropped as above). Under `keep` the episode trains as any failure. A passed episode is never attributed.
Either way each is counted per attribution rule (metrics `episodes/user_faults`, `.../user_fault_masked`,
`.../user_fault_resampled`, `episodes/user_fault/<rule>`; per group `user_faults` in `groups`).

The resample budget is counted in episodes: `resample_budget` tasks of G episodes each. A task drawn to
replace a filtered group spends G of them (metrics `groups/resamples` counts these tasks), a replacement
of a masked episode 1. Replacements come first: they complete a group before filtering can judge it.

Under `accelerate launch` W processes train on the same global batch one process would: every
process draws the same B tasks from one shared stream and takes groups r, r + W, ...; resampling
after filtering draws from the process's own stream and spends its share of `resample_budget`.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from kit import metrics as M
from kit.train.grpo_config import GRPOConfig
from kit.train.grpo_math import filter_groups
from kit.train.processes import Processes


@dataclass
class Group:
    """A task's G episodes: `rewards` are the checker's; `scores` what filtering and advantages use
    (the rewards less `error_penalty` per failed tool call, kit.train.grpo_groups.shaped; the rewards
    themselves when the penalty is 0). `trajs` are the episodes the advantages are over; `infra_failed`
    counts the ones a server failed, left out. `user_faults`: the attribution rule of each user-fault
    episode (masked or kept); `masked`: the (trajectory, reward) of those left out (user_faults "mask");
    `replaced`: replacement episodes rolled out for them."""
    task: Any
    trajs: list
    rewards: list[float]
    scores: list[float] | None = None
    infra_failed: int = 0
    from_probe: int = 0  # the first `from_probe` of `trajs` are a probe's episodes (ProbeGroups), not rolled out here
    user_faults: list[str] = field(default_factory=list)
    masked: list[tuple[Any, float]] = field(default_factory=list)
    replaced: int = 0

    def __post_init__(self):
        if self.scores is None:
            self.scores = list(self.rewards)

    def scored(self) -> list[tuple[Any, float]]:
        """Every episode of the group that was scored, (trajectory, reward), masked ones included: what the
        step rolled out and checked (its reward and user-fidelity metrics, the episode budget)."""
        return list(zip(self.trajs, self.rewards)) + list(self.masked)


class UserFaultCheck:
    """Which failed episodes the user simulator failed: `check(task, trajectory)` -> the user rule of
    kit.checkers.attribution.attribute that decided it, or None (the agent's, the task's, undetermined).
    Call it on failed episodes only. The task rules (`task_fault`: the gold replay) are a function of the
    task and run once per task, not once per episode."""

    def __init__(self, domain: Any):
        self.domain = domain
        self._sound: dict[int, tuple[Any, bool]] = {}  # id(task) -> (task, no task rule fired)

    def __call__(self, task: Any, traj: Any) -> Optional[str]:
        from kit.checkers.attribution import attribute, task_fault

        if id(task) not in self._sound:
            self._sound[id(task)] = (task, task_fault(self.domain, task) is None)
        if not self._sound[id(task)][1]:
            return None
        att = attribute(self.domain, task, traj, task_sound=True)
        return att.rule if att.label == "user" else None


def shaped(reward: float, traj: Any, error_penalty: float) -> float:
    """The score GRPO learns from: the checker's reward less `error_penalty` per failed tool call,
    never below 0. A call of a made-up id fails and leaves the database as it was, so the checker alone
    never tells a clean success from one sprayed with failed calls (tests/test_grpo_groups.py)."""
    if error_penalty <= 0:
        return reward
    return max(0.0, reward - error_penalty * traj.tool_errors())


class TaskDraws:
    """Tasks without replacement within a pass over the shuffled list, from the stream every process
    shares (`shared`) or from this process's own (`own`, also the process's other randomness).

    With `strata` (one key per task, e.g. its gold tool pattern) a pass goes round the strata: each
    stratum shuffled, then one task of every stratum per round, the rounds in shuffled order, so that
    B consecutive draws hold B different strata while there are that many (a batch of creates and
    updates side by side, whose advantages must tell the requests apart)."""

    def __init__(self, tasks: list, seed: int, process_index: int = 0, strata: list[str] | None = None):
        self.tasks = list(tasks)
        if strata is not None and len(strata) != len(self.tasks):
            raise ValueError(f"TaskDraws: {len(strata)} strata for {len(self.tasks)} tasks")
        self.strata = list(strata) if strata is not None else None
        self.shared = random.Random(seed * 1000)
        self.own = random.Random(seed * 1000 + 1 + process_index)
        self._queues: dict[bool, list] = {False: [], True: []}

    def _pass(self, rng: random.Random) -> list:
        """One pass over the tasks, as the queue holds it (drawn from the end)."""
        if self.strata is None:
            return rng.sample(self.tasks, len(self.tasks))
        by: dict[str, list] = {}
        for t, key in zip(self.tasks, self.strata):
            by.setdefault(key, []).append(t)
        cols = [rng.sample(g, len(g)) for g in by.values()]
        out = []
        for i in range(max(len(c) for c in cols)):
            row = [c[i] for c in cols if i < len(c)]
            out += rng.sample(row, len(row))
        return out[::-1]

    def peek(self, n: int) -> list:
        """The next `n` tasks the shared stream will draw, leaving it as it is."""
        state, queue = self.shared.getstate(), list(self._queues[False])
        out = self.draw(n)
        self.shared.setstate(state)
        self._queues[False] = queue
        return out

    def draw(self, n: int, own: bool = False) -> list:
        rng, queue = (self.own if own else self.shared), self._queues[own]
        out = []
        while len(out) < n:
            if not queue:
                queue.extend(self._pass(rng))
            out.append(queue.pop())
        return out

    def state_dict(self) -> dict:
        """Both streams and what is left of both passes, tasks as their positions in `tasks` (a
        checkpoint holds no task objects; the resumed trainer is given the same task list)."""
        pos = {id(t): i for i, t in enumerate(self.tasks)}
        return {"tasks": len(self.tasks), "shared": self.shared.getstate(), "own": self.own.getstate(),
                "queues": {"shared": [pos[id(t)] for t in self._queues[False]],
                           "own": [pos[id(t)] for t in self._queues[True]]}}

    def load_state_dict(self, state: dict) -> None:
        if state["tasks"] != len(self.tasks):
            raise ValueError(f"task draws of {state['tasks']} tasks cannot resume over {len(self.tasks)} tasks")
        self.shared.setstate(state["shared"])
        self.own.setstate(state["own"])
        self._queues = {False: [self.tasks[i] for i in state["queues"]["shared"]],
                        True: [self.tasks[i] for i in state["queues"]["own"]]}


class ProbeGroups:
    """A probe's episodes that train the steps after it (cfg.probe_train), planned right after the probe.

    The plan follows the tasks the steps will draw (TaskDraws.peek of the shared stream, the same on every
    process): in the next `cfg.probe_train_steps` steps, a drawn task whose probe episodes are held gets
    them at its position in that step's draw, each task's once (its first draw; a later draw of it rolls
    out fresh). The task-draw sequence is the one without probe_train; resampled tasks (each process's own
    stream) always roll out fresh. Under `accelerate launch` position j of a step's draw is process j % W's
    (collect_groups' rule) while the probe scored a task on the process that probed it: the planned
    episodes are exchanged once (Processes.gather) and each process keeps its positions'.

    Loop state (GRPOTrainer.checkpointed): what is left of the plan, episodes as their model_dump(), so a
    run resumed after a checkpoint trains the steps after it on the same episodes.
    """

    def __init__(self) -> None:
        # (step, position in that step's draw of tasks_per_step) -> (probe episodes, their rewards)
        self.slots: dict[tuple[int, int], tuple[list, list[float]]] = {}

    def plan(self, episodes: dict[str, tuple[list, list[float]]], draws: TaskDraws, procs: Processes,
             cfg: GRPOConfig, step: int) -> int:
        """Assign `episodes` (task id -> this process's probe episodes and rewards) to the draws of steps
        step .. step + probe_train_steps - 1; returns how many groups were planned (every process's)."""
        B, W, r = cfg.tasks_per_step, procs.count, procs.index
        upcoming = draws.peek(B * cfg.probe_train_steps)
        wanted = {t.id for t in upcoming}
        held = {tid: e for tid, e in episodes.items() if tid in wanted}
        if W > 1:  # every process gets every planned group; each keeps its own positions' below
            held = {tid: e for part in procs.gather(held) for tid, e in part.items()}
        first: dict[str, tuple[int, int]] = {}
        for n, t in enumerate(upcoming):
            if t.id in held and t.id not in first:
                first[t.id] = (step + n // B, n % B)
        self.slots = {(s, j): held[tid] for tid, (s, j) in first.items() if j % W == r}
        return len(first)

    def take(self, step: int, position: int) -> tuple[list, list[float]] | None:
        """The probe episodes planned for `position` of step `step`'s draw (once), or None."""
        return self.slots.pop((step, position), None)

    def expire(self, step: int) -> None:
        """Drop what was planned for steps before `step` (not taken: e.g. a step the budget never ran)."""
        self.slots = {k: v for k, v in self.slots.items() if k[0] >= step}

    def __len__(self) -> int:
        return len(self.slots)

    def state_dict(self) -> dict:
        dump = lambda t: t.model_dump(mode="json") if hasattr(t, "model_dump") else t
        return {"slots": [[s, j, [dump(t) for t in trajs], list(rewards)]
                          for (s, j), (trajs, rewards) in sorted(self.slots.items())]}

    def load_state_dict(self, state: dict) -> None:
        from kit.trajectory import Trajectory

        load = lambda d: Trajectory.model_validate(d) if isinstance(d, dict) else d
        self.slots = {(int(s), int(j)): ([load(t) for t in trajs], [float(x) for x in rewards])
                      for s, j, trajs, rewards in state.get("slots") or []}


def collect_groups(
    draws: TaskDraws,
    procs: Processes,
    cfg: GRPOConfig,
    step_idx: int,
    rollout: Callable[[list, int], list],
    reward_fn: Callable[[Any, Any], float],
    resample_limit: Optional[int] = None,
    probe: ProbeGroups | None = None,
    user_fault: Optional[Callable[[Any, Any], Optional[str]]] = None,
) -> tuple[list[Group], list[Group], dict]:
    """Roll out this process's share of the B groups (`rollout(tasks, seed)` -> one trajectory per
    task, in order), score them, attribute the failed ones (`user_fault(task, traj)` -> a user rule or
    None, e.g. UserFaultCheck; None: nothing is attributed), replace masked user faults
    (`cfg.user_faults`), filter (`cfg.filter_mode`), resample until the share is kept or the budget is
    spent. `resample_limit` caps the step's resample budget below `cfg.resample_budget` (what is left of
    `cfg.episode_budget` after the batch, in tasks of G episodes), shared out over the processes the same
    way. `probe`: a drawn task with probe episodes planned for its position (ProbeGroups) takes G of
    them (all, topped up with G - probe_k fresh ones, when probe_k < G), with the probe's rewards; every
    fresh episode of the step's first round is rolled out in one call. Returns (kept, every group seen,
    metrics)."""
    c, G, W, r = cfg, cfg.group_size, procs.count, procs.index
    drawn = draws.draw(c.tasks_per_step)
    todo = drawn[r::W]
    fed = [probe.take(step_idx, j) if probe is not None else None for j in range(r, len(drawn), W)]
    share = len(todo)
    kept: list[Group] = []
    seen: list[Group] = []
    total = c.resample_budget if resample_limit is None else max(0, min(c.resample_budget, resample_limit))
    budget = (total // W + (r < total % W)) * G  # in episodes: a resampled task spends G, a replacement 1
    masking = c.user_faults == "mask" and user_fault is not None
    rnd, score_s, resampled, replacements = 0, 0.0, 0, 0

    def add(g: Group, trajs: list, rewards: Optional[list] = None) -> None:
        """Score `trajs` (episodes of g's task; `rewards`: already scored, a probe's) into g: a server's
        failure counted, a user fault masked or kept."""
        for k, t in enumerate(trajs):
            if t.infra_failed:  # never scored: not the agent's doing
                g.infra_failed += 1
                continue
            reward = float(reward_fn(g.task, t)) if rewards is None else float(rewards[k])
            rule = user_fault(g.task, t) if user_fault is not None and reward < 1.0 else None
            if rule is not None:
                g.user_faults.append(rule)
                if masking:  # not the agent's doing either: out of the advantages
                    g.masked.append((t, reward))
                    continue
            g.trajs.append(t)
            g.rewards.append(reward)
            g.scores.append(shaped(reward, t, c.error_penalty))

    def seed() -> int:  # distinct per process, step and rollout call
        return ((c.seed * 1009 + r) * 100_003 + step_idx) * 101 + rnd

    while todo:  # a process with no share (W > B) rolls out nothing
        given = [(f[0][:G], f[1][:G]) if f is not None else ([], []) for f in fed]
        missing = [G - len(pt) for pt, _ in given]
        fresh = [t for t, n in zip(todo, missing) for _ in range(n)]
        trajs = rollout(fresh, seed()) if fresh else []
        rnd += 1
        t_score = time.perf_counter()
        failed = [t for t in trajs if t.infra_failed]
        if trajs and len(failed) == len(trajs):
            from kit.llm.openai_backend import EndpointError

            raise EndpointError(f"a server failed every one of the {len(trajs)} episodes of the rollout; the "
                                f"first: {failed[0].infra_error}")
        groups, at = [], 0
        for task, (pt, pr), n in zip(todo, given, missing):
            groups.append(Group(task, [], [], [], from_probe=len(pt)))
            add(groups[-1], pt, pr)  # the probe's episodes first, scored by the probe (reward_fn is not called again)
            add(groups[-1], trajs[at : at + n])
            at += n
        score_s += time.perf_counter() - t_score
        # masked user faults: one replacement each, all groups' in one rollout call, while the budget lasts
        while masking and budget > 0:
            asks: list[tuple[Group, int]] = []
            for g in groups:
                n = min(len(g.masked) - g.replaced, budget - sum(n for _, n in asks))
                if n > 0:
                    asks.append((g, n))
            if not asks:
                break
            more = rollout([g.task for g, n in asks for _ in range(n)], seed())
            rnd += 1
            t_score, i = time.perf_counter(), 0
            for g, n in asks:  # (a replacement a server failed is counted, not replaced again)
                g.replaced += n
                add(g, more[i : i + n])
                i += n
            budget -= i
            replacements += i
            score_s += time.perf_counter() - t_score
        seen += groups
        mask = filter_groups([g.scores for g in groups], c.filter_mode)
        kept += [g for g, keep in zip(groups, mask) if keep and len(g.trajs) >= 2]  # one episode: no advantage
        need = share - len(kept)
        n = min(need, budget // G)
        if need <= 0 or n <= 0:
            break
        budget, resampled, todo = budget - n * G, resampled + n, draws.draw(n, own=True)  # resamples roll out fresh
        fed = [None] * len(todo)
    m = {M.GROUPS_RESAMPLES: resampled, M.GROUPS_KEPT: min(len(kept), share), "time/score_s": score_s,
         M.INFRA_FAILED: sum(g.infra_failed for g in seen), M.FROM_PROBE: sum(g.from_probe for g in seen),
         M.FILTERED_FRAC: 1.0 - len(kept) / len(seen) if seen else 0.0}
    if user_fault is not None:
        m[M.USER_FAULTS] = sum(len(g.user_faults) for g in seen)
        m[M.USER_FAULT_MASKED] = sum(len(g.masked) for g in seen)
        m[M.USER_FAULT_RESAMPLED] = replacements
        for rule, n in sorted(Counter(x for g in seen for x in g.user_faults).items()):
            m[M.user_fault_key(rule)] = n
    return kept[:share], seen, m


def episode_metrics(seen: list[Group], domain: Any = None) -> dict:
    """Reward, pass rate, turns, tokens and termination reasons of every episode scored (kept or
    filtered, masked user faults included: these describe the rollouts, masking only what the update
    sees; a server's failures are counted apart, M.INFRA_FAILED); the user simulator's deviation rate
    with a tau2 `domain`."""
    seen = [g for g in seen if g.scored()]
    if not seen:
        return {"proc/episodes": 0.0}
    rewards = [r for g in seen for _, r in g.scored()]
    trajs = [t for g in seen for t, _ in g.scored()]
    mean = sum(rewards) / len(rewards)
    m = {"proc/episodes": float(len(rewards)),
         M.REWARD_MEAN: mean,
         M.REWARD_STD: math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)),
         M.PASS_RATE: sum(r >= 1.0 for r in rewards) / len(rewards),
         "episode/turns_mean": sum(sum(x.role == "assistant" and "completion_tokens" in x.meta for x in t.messages)
                                   for t in trajs) / len(trajs),
         "episode/tokens_mean": sum(sum(x.meta.get("completion_tokens") or 0 for x in t.messages
                                        if x.role == "assistant") for t in trajs) / len(trajs),
         }
    for reason, n in Counter(t.termination_reason for t in trajs).items():
        m[f"termination/{reason}"] = n / len(trajs)
    if domain is not None:  # user fidelity is defined on tau2 tasks: how the rollouts' user simulator behaved
        from kit.rollout.fidelity import proper_end, request_stated, user_deviations

        dev = [bool(user_deviations(g.task, t, goal_reached=r >= 1.0)) for g in seen for t, r in g.scored()]
        m[M.USER_DEVIATION_RATE] = sum(dev) / len(dev)
        stated = [s for g in seen for t, _ in g.scored() if (s := request_stated(g.task, t, domain=domain)) is not None]
        if stated:
            m[M.REQUEST_STATED_RATE] = sum(stated) / len(stated)
        m[M.PROPER_END_RATE] = sum(proper_end(t) for t in trajs) / len(trajs)
    return m
