"""GRPO on the agent with checker rewards and dynamic filtering (PAPER.md, "The RL recipe").

    trainer = GRPOTrainer(model, tokenizer, domain.tasks("train"), GRPOConfig(), domain=domain)
    history = trainer.train()          # one metrics dict per step (also logged to W&B if given)
    trainer.save("runs/<id>/grpo")     # HF folder: HFBackend, vLLM and `transformers serve` load it
    # crash-safe: trainer.resume(d) (steps a checkpoint in d holds, 0 if none), then
    trainer.train(checkpoint_dir=d)    # the steps left, a checkpoint every `save_every` steps
    # multi-GPU: the same script under `accelerate launch --num_processes 8 script.py`

Per step: draw B tasks; run G multi-turn episodes of each (kit.rollout.run_episodes) with an
HFBackend that wraps the *current* policy (eval mode while sampling); reward = the checker's
verdict (default kit.verify.verify(...).reward, any `reward_fn(task, traj)` replaces it); drop
groups per `filter_mode` and draw fresh tasks in their place until B groups are kept or
`resample_budget` extra tasks are spent; advantages (R - mean_G) / (std_G + eps) go to every
token the agent sampled; token-level PPO-clip over all generated tokens of the batch (train mode).
Every fresh episode of a step's first round is one rollout call (run_episodes decodes all of them
as one batch per turn); a resampling round after filtering is another call.

The curriculum's probe (kit/train/grpo_curriculum.py) samples the very policy the step after it
trains: with `probe_train` (default) its episodes of the band's tasks are that step's groups instead
of being rolled out again (kit.train.grpo_groups.ProbeGroups: a drawn task takes G of its probe_k
probe episodes, topped up with fresh ones where probe_k < G, scored with the probe's rewards; the
draw order is the one without it), counted in `episodes/from_probe` and once in `episodes/total`.
`probe_train_steps` > 1 feeds later steps too, off-policy. A probe read from another stage's memo
has no episodes here: the steps roll out their own (metric curriculum/probe_memo_no_episodes).

Where each part lives: this file drives a step; kit/train/grpo_groups.py draws tasks, rolls out
and filters groups; kit/train/grpo_update.py builds rows and runs the PPO-clip minibatches;
kit/train/grpo_math.py is the arithmetic; kit/train/processes.py what processes agree on under
`accelerate launch`; kit/train/rollout_server.py the optional vLLM rollout server.

Kept from the paper: group advantages with population std, checker reward in {0, 1}, no KL
(`kl_coef` > 0 adds a k3 penalty to a frozen copy), token-level loss normalised over the batch's
generated tokens, dynamic filtering of all-equal groups (the public AReaL "all_success" variant
and batch-level normalisation are switches), temperature 1.0 rollouts, lr 1.7e-5, clip 0.4.
Dropped, and why:
- Asynchronous rollouts (AReaL's SGLang workers, staleness control): rollouts here are
  synchronous and on-policy, so with `minibatches=1` the old log-probs equal the new ones and are
  taken from the same forward pass (detached): ratio = 1, clipping only acts from the second
  minibatch on. This is what TRL does with one iteration; it saves a forward pass per step.
- The loss is normalised over the tokens of the (filtered) batch, not per group: with
  per-group normalisation a group's weight would depend on how long its episodes are.
- A plain PyTorch loop, not TRL's GRPOTrainer: TRL's multi-turn path (`rollout_func`) has to
  re-create episodes from completions, while here run_episodes owns the dialogue (user
  simulator, tools, termination) and the loop needs per-turn rows with the exact sampled ids.
  accelerate wraps model and optimizer, so the same loop runs under `accelerate launch` (DDP, or
  DeepSpeed ZeRO / FSDP from the accelerate config; `kit run` launches a stage that way with a
  `launch:` field). W processes train on the same global batch one process would: every process
  draws the same B tasks and takes groups r, r + W, ...; each normalises its loss by the tokens
  of the whole batch (summed over processes) times W, which DDP's gradient averaging undoes;
  resampling after filtering draws from each process's own stream and share of the budget; a
  process left without rows runs placeholder rows of zero weight; the logged metrics are summed
  or episode-weighted over processes (each process's own under proc/). tests/test_grpo_distributed.py
  checks 2 gloo processes against 1 process on the same batch (equal weights). Sampling from
  ZeRO-3/FSDP-sharded weights needs the rollout server (`rollout: server`): the local sampler would
  gather every layer.
- Options beyond the paper's loop: LoRA adapters and gradient checkpointing (kit.train.lora, the
  knobs SFT has); rollouts from an OpenAI-compatible server (vLLM) whose weights or adapter are
  pushed after each step, with the server's token ids and log-probs (kit/train/rollout_server.py).
- One row per assistant turn (prompt re-rendered as the agent saw it), not one packed sequence
  per episode: exact for any chat template, at the cost of re-encoding long histories.

Users fail too (kit/train/grpo_groups.py, `user_faults`): a failed episode that failure attribution
(kit/checkers/attribution.py, its rules) puts on the user simulator is left out of its group's advantage
and replaced by a fresh episode of the same task within the resample budget (`mask`, the default), or
trained on as any failure (`keep`, the paper); counted either way (`episodes/user_faults`, per rule
`episodes/user_fault/<rule>`, `episodes/user_fault_masked`, `episodes/user_fault_resampled`). Attribution
needs a `domain`: with `rollout_fn` and `reward_fn` alone nothing is attributed.

Servers fail (kit/train/grpo_groups.py): an episode whose user-simulator or rollout-server turn got a 5xx or
a garbled answer after the backend's retries is left out of its group, unscored, and counted
(`episodes/infra_failed`); a server that does not answer at all, or fails every episode of a rollout, stops
`train()` with an EndpointError naming it (`rollout_server` where it is that one), the step, and the step a
rerun resumes from once it is back.

Checkpoints (kit/train/checkpoints.py has the layout): everything the loop carries from one step
to the next is saved every `save_every` steps, the trainable weights and the optimizer once, the
rest per process (`loop_state`: step, task draws with the per-process stream that also shuffles
minibatches, global RNG states, and every part registered in `self.checkpointed`, the probe episodes
planned for later steps among them). Resumed, the
run continues with the weights, draws and rollout seeds an uninterrupted run has at that step
(tests/test_resume.py: equal final weights after a kill -9). Not under FSDP (sharded optimizer
state): there the trainer says so and saves none.
"""

from __future__ import annotations

import copy
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kit import metrics as M
from kit.checkers.attribution import USER_RULES
from kit.files import atomic_write
from kit.llm.hf import HFBackend
from kit.llm.openai_backend import EndpointError
from kit.llm.types import SamplingParams
from kit.rollout.loop import step_budget_warning
from kit.rollout.prompts import agent_system_prompt
from kit.train import checkpoints as ck
from kit.train.grpo_config import RESUMABLE_CHANGES, GRPOConfig, SkipReason
from kit.train.grpo_curriculum import Curriculum, balanced_by_pattern, gold_pattern
from kit.train.grpo_curve import LearningCurve
from kit.train.grpo_memo import adopt_point, adopt_probe
from kit.train.grpo_groups import ProbeGroups, TaskDraws, UserFaultCheck, collect_groups, episode_metrics
from kit.train.grpo_update import placeholder_rows, policy_rows, ppo_update
from kit.train.lora import merged_copy_state, prepare_for_training, trainable_parameters
from kit.train.processes import Processes

log = logging.getLogger(__name__)

# metrics over the whole batch, all processes together (each process's own stay under proc/)
_SUMMED = (M.GROUPS_KEPT, M.GROUPS_RESAMPLES, M.INFRA_FAILED, M.FROM_PROBE, M.USER_FAULTS, M.USER_FAULT_MASKED,
           M.USER_FAULT_RESAMPLED, *(M.user_fault_key(rule) for rule in USER_RULES),
           "train/rows", "train/tokens", "train/unmatched_turns", "train/too_long_rows", "train/retokenized_turns")
_EPISODE_MEANS = (M.REWARD_MEAN, M.PASS_RATE, M.USER_DEVIATION_RATE, M.REQUEST_STATED_RATE, M.PROPER_END_RATE)


class GRPOTrainer:
    """The loop. `model`/`tokenizer`: the policy (a loaded causal LM). `tasks`: what to sample.

    domain: a kit Domain; gives the default rollouts (run_episodes), reward (verify), system
        prompt and tools. Without it pass `rollout_fn` and `reward_fn` (e.g. single-turn tasks).
    user: the user simulator Backend (default: make_backend(config.user_model), built lazily).
    reward_fn(task, trajectory) -> float; rollout_fn(tasks, agent_backend, seed) -> trajectories.
    agent_system, tools: what the agent sees, when they are not the domain's.
    wandb_run: a W&B run to log each step's metrics to. accelerator: an accelerate.Accelerator.

    A step (`step()`): kit.train.grpo_groups collects the kept groups, kit.train.grpo_update turns
    them into rows and optimizer steps, then a rollout server (if any) gets the new weights.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        tasks: list,
        config: GRPOConfig | None = None,
        *,
        domain: Any = None,
        user: Any = None,
        reward_fn: Callable[[Any, Any], float] | None = None,
        rollout_fn: Callable[[list, Any, int], list] | None = None,
        agent_system: str | None = None,
        tools: list[dict] | None = None,
        wandb_run: Any = None,
        accelerator: Any = None,
        eval_tasks: list | None = None,
        start_memo: Any = None,
    ):
        if not tasks:
            raise ValueError("GRPOTrainer: `tasks` is empty; GRPO needs at least one task to draw groups from")
        if domain is None and (rollout_fn is None or reward_fn is None or agent_system is None):
            raise ValueError("GRPOTrainer: without a `domain`, pass `rollout_fn`, `reward_fn` and `agent_system`")
        from accelerate import Accelerator

        self.cfg = config or GRPOConfig()
        self.tasks, self.domain, self.tokenizer = list(tasks), domain, tokenizer
        self.acc = accelerator or Accelerator()
        if self.acc.distributed_type == "DEEPSPEED":
            from kit.errors import BadInput

            raise BadInput("GRPO does not run under DeepSpeed: its loop accumulates a minibatch's micro-batches "
                           "and steps once, while DeepSpeed steps the optimizer inside every backward",
                           "launch the grpo stage without a DeepSpeed config (plain DDP: `launch: {num_processes: "
                           "N}`); with lora the frozen base weights fit on each GPU (kit run --validate estimates it)")
        self.procs = Processes(self.acc)
        self.ref = None
        if self.cfg.kl_coef > 0:  # the initial policy, before any adapter is added
            self.ref = copy.deepcopy(model).eval().requires_grad_(False)
        model = prepare_for_training(model, self.cfg)  # LoRA adapters, gradient checkpointing
        opt = torch.optim.AdamW(trainable_parameters(model), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        self.model, self.opt = self.acc.prepare(model, opt)
        self.policy = self.acc.unwrap_model(self.model)
        # renders and tokenizes the training rows; samples too with rollout 'local' (completions carry their ids)
        self.backend = HFBackend(model=self.policy, tokenizer=tokenizer)
        self.server = None
        if self.cfg.rollout == "server":
            from kit.train.rollout_server import ServerPolicy

            sync = self.cfg.sync_dir or tempfile.mkdtemp(prefix="kit-grpo-sync-")
            self.server = ServerPolicy(self.cfg, self.backend.tool_mode, self.acc, sync)
        self.sampler = self.server.backend if self.server is not None else self.backend
        tdir = Path(self.cfg.templates_dir) if self.cfg.templates_dir else None
        self.system = agent_system if agent_system is not None else agent_system_prompt(domain.policy, tdir)
        self.tools = tools if tools is not None else (domain.tool_schemas("assistant") if domain else None)
        self._user = user
        self.rollout_fn = rollout_fn
        # the kit's own rollouts: warn when the episode budget cannot fit a dialogue that scores
        self.step_budget_warning = None if rollout_fn is not None else step_budget_warning(
            self.tasks, self.cfg.max_messages, "max_messages")
        if self.step_budget_warning:
            log.warning(self.step_budget_warning)
        if reward_fn is None:
            from kit.verify import verify

            reward_fn = lambda task, traj: verify(domain, task, traj).reward
        self.reward_fn = reward_fn
        # failed episodes the user simulator failed (cfg.user_faults): attributed on the domain's τ² tasks only
        self.user_fault = UserFaultCheck(domain) if domain is not None else None
        self.wandb_run = wandb_run
        self.draws = TaskDraws(self.tasks, self.cfg.seed, self.acc.process_index)
        self.curriculum = Curriculum(self.tasks, self.cfg)
        self.curve = LearningCurve(eval_tasks or [], self.cfg, domain)
        self.probe_groups = ProbeGroups()  # the last probe's episodes planned to train the steps after it
        self.step_idx = 0
        # step 0's probe and curve point, read from / written to a memo shared by stages with the same start
        # (kit/train/grpo_memo.py); one process only: under accelerate every process measures its share
        self.start_memo = start_memo if self.procs.count == 1 else None
        # the loop's state between steps beyond weights and optimizer, by name: each part has
        # state_dict() / load_state_dict(), its state made of tensors, numbers, strings, lists,
        # tuples and dicts (read back with torch.load(weights_only=True)); a checkpoint holds them
        # all, one copy per process: add a new part here
        self.checkpointed: dict[str, Any] = {"curriculum": self.curriculum, "draws": self.draws, "curve": self.curve,
                                             "probe_groups": self.probe_groups}
        self.episodes_scored = 0  # rollout episodes of the steps so far, every process's (cfg.episode_budget)
        self.checkpoint_warning = None
        if self.cfg.save_every and self.acc.distributed_type == "FSDP":
            self.checkpoint_warning = ("GRPO saves no checkpoints under FSDP (its optimizer state is sharded "
                                       "across processes): a crash restarts the stage from step 0")
            log.warning(self.checkpoint_warning)

    @property
    def user(self) -> Any:
        if self._user is None:
            from kit.llm import make_backend

            self._user = make_backend(self.cfg.user_model)
        return self._user

    def _rollout(self, tasks: list, seed: int) -> list:
        if self.rollout_fn is not None:
            return self.rollout_fn(tasks, self.sampler, seed)
        from kit.rollout import RolloutConfig, run_episodes

        c = self.cfg
        rc = RolloutConfig(
            max_messages=c.max_messages, max_errors=c.max_errors, seed=seed, templates_dir=c.templates_dir,
            agent_params=SamplingParams(temperature=c.temperature, top_p=c.top_p, top_k=c.top_k,
                                        max_new_tokens=c.max_new_tokens),
            user_params=SamplingParams(temperature=c.user_temperature, max_new_tokens=c.user_max_new_tokens),
        )
        return run_episodes(self.domain, tasks, self.sampler, self.user, rc, progress=False)

    def step(self, pre: dict | None = None) -> dict:
        """One GRPO step; returns its metrics (with `pre`'s: the probe's and the curve's before it). A
        skipped step says why (`skip_reason`)."""
        t0 = time.perf_counter()
        self.policy.eval()
        kept, seen, m = collect_groups(self.draws, self.procs, self.cfg, self.step_idx, self._rollout, self.reward_fn,
                                       resample_limit=self._resamples_left(), probe=self.probe_groups,
                                       user_fault=self.user_fault)
        self.probe_groups.expire(self.step_idx + 1)
        if seen:
            m.update(episode_metrics(seen, self.domain))
        # which task each group was and how it scored (this process's groups; metrics.jsonl only, W&B logs numbers):
        # the report follows a band task's reward over the steps that drew it
        m["groups"] = [{"task": str(getattr(g.task, "id", "")), "rewards": list(g.rewards),
                        **({"scores": list(g.scores)} if self.cfg.error_penalty > 0 else {}),
                        **({"infra_failed": g.infra_failed} if g.infra_failed else {}),
                        **({"from_probe": g.from_probe} if g.from_probe else {}),
                        **({"user_faults": len(g.user_faults), "masked": len(g.masked), "replaced": g.replaced}
                           if g.user_faults else {}),
                        "kept": any(g is k for k in kept)} for g in seen]
        m.update({"step": self.step_idx, "lr": self.opt.param_groups[0]["lr"], "skipped": 0, "skip_reason": "",
                  **(pre or {})})
        m["time/rollout_s"] = time.perf_counter() - t0 - m["time/score_s"]  # sampling; scoring is time/score_s
        reason, rows = None, []
        if not kept:
            reason = SkipReason.ALL_GROUPS_FILTERED
        else:
            retokenize = self.server is not None and not self.cfg.server_token_ids
            rows, rm = policy_rows(self.backend, kept, self.cfg, self.system, self.tools, retokenize)
            m.update(rm)
            if not rows:
                reason = SkipReason.NO_TRAINABLE_TOKENS
            elif len(rows) < self.cfg.minibatches:
                reason = SkipReason.FEWER_ROWS_THAN_MINIBATCHES
        # Under `accelerate launch` every process takes part in the same backward passes. The step is
        # skipped when no process has rows, or when one has fewer rows than minibatches. A process with
        # no rows while others have some runs the same backward passes on rows whose loss is multiplied
        # by 0 (kit.train.grpo_update.placeholder_rows), so its gradient contribution is exactly zero.
        nothing_here = reason in (SkipReason.ALL_GROUPS_FILTERED, SkipReason.NO_TRAINABLE_TOKENS)
        if self.procs.all(nothing_here) or self.procs.any(reason == SkipReason.FEWER_ROWS_THAN_MINIBATCHES):
            reason = reason or SkipReason.SKIPPED_ON_ANOTHER_PROCESS
        else:
            if nothing_here:
                rows, reason = placeholder_rows(self.backend.pad_id, self.cfg.minibatches), None
            t1 = time.perf_counter()
            # the sampler's cached prefix states and packed weights belong to the old weights: freed before the
            # update rather than after, so that the update's activations do not sit on top of them
            self.backend.invalidate()
            um, reason = ppo_update(self.model, self.opt, self.acc, self.procs, rows, self.cfg,
                                    self.backend.pad_id, self.draws.own, self.ref)
            m.update(um)
            m["time/update_s"] = time.perf_counter() - t1
            if reason is None and self.server is not None:
                t2 = time.perf_counter()
                self.server.push(self.policy, self.tokenizer, self.step_idx + 1)
                m["time/weight_sync_s"] = time.perf_counter() - t2
        if reason:
            m.update({"skipped": 1, "skip_reason": reason, f"skipped/{reason}": 1})
        m[M.STEP_TIME] = time.perf_counter() - t0
        m[M.PEAK_RSS] = M.peak_rss_gib()  # this process's high-water mark so far (rollouts, probes, updates)
        self.episodes_scored += int(round(self.procs.sum(float(m.get("proc/episodes", 0.0)))))
        m[M.EPISODES_TOTAL] = self.episodes_scored
        m.update(self.procs.merge(m, _SUMMED, _EPISODE_MEANS))
        self._log(m)
        self.step_idx += 1
        return m

    def train(self, steps: int | None = None, on_step: Callable[[dict], None] | None = None,
              on_event: Callable[[str, dict], None] | None = None,
              checkpoint_dir: str | Path | None = None) -> list[dict]:
        """Run `steps` more steps (default: up to config.train_steps, so a resumed trainer runs
        what is left); one metrics dict each, also handed to `on_step` as soon as the step ends (a
        metrics file, a progress line). With the curriculum (`probe_k`) a probe runs before the steps
        it is due at; with the learning curve (`eval_every`) an evaluation runs before the first step,
        every `eval_every` steps and after the last; each is handed to `on_event("probe" | "eval",
        record)` (a point's `best` says it beat the earlier ones). With `checkpoint_dir`, a checkpoint
        after every `save_every`-th step (after `on_step`: a metrics line may be ahead of the newest
        checkpoint, never behind it), none after the last one (the caller saves the model)."""
        end = self.step_idx + steps if steps is not None else self.cfg.train_steps
        emit = on_event or (lambda kind, rec: None)
        history = []
        while self.step_idx < end and not self.budget_spent:
            try:
                history.append(self.step(self._before_step(emit)))
            except EndpointError as e:
                raise self._server_failed(e, checkpoint_dir) from None
            if on_step is not None:
                on_step(history[-1])
            every = self.cfg.save_every
            if checkpoint_dir is not None and every and self.step_idx % every == 0 and self.step_idx < end:
                self.save_checkpoint(checkpoint_dir)
        if self.curve.due(self.step_idx, last=True):
            point = self._evaluate()
            if self.wandb_run is not None and self.acc.is_main_process:
                self.wandb_run.log(M.wandb_keys(M.WANDB_GRPO, self.curve.metrics(point)), step=self.step_idx)
            emit("eval", point)
        return history

    def _spare_episodes(self) -> int | None:
        """Episodes of the budget (cfg.episode_budget) left over once one more step's G x B are paid for;
        negative when they do not fit, None without a budget."""
        c = self.cfg
        if c.episode_budget is None:
            return None
        return c.episode_budget - self.episodes_scored - c.group_size * c.tasks_per_step

    @property
    def budget_spent(self) -> bool:
        """What is left of the episode budget does not hold one more step's G x B episodes: no further step
        (a step never overshoots the budget)."""
        spare = self._spare_episodes()
        return spare is not None and spare < 0

    def _resamples_left(self) -> int | None:
        """Resampled tasks this step may roll out within the episode budget (after its G x B episodes);
        None without a budget (cfg.resample_budget alone)."""
        spare = self._spare_episodes()
        return None if spare is None else max(0, spare) // self.cfg.group_size

    def _server_failed(self, e: EndpointError, checkpoint_dir: str | Path | None) -> EndpointError:
        """The error GRPO stops with when a server is down (after the backend's retries): which server,
        at which step, and where a rerun resumes."""
        which = " (its rollout_server)" if self.server is not None and e.url == self.server.url else ""
        every = self.cfg.save_every if checkpoint_dir is not None else 0
        last = self.step_idx // every * every if every else 0
        resume = (f"it resumes from step {last}, the last checkpoint in {checkpoint_dir}" if last
                  else "it starts again from step 0 (no checkpoint yet" + (")" if every else ": save_every is off)"))
        return EndpointError(f"GRPO stopped in step {self.step_idx}{which}: {e}",
                             f"bring {e.url or 'the server'} back (`curl {e.url or 'URL'}/models` should answer), "
                             f"then run the same command again: {resume}", url=e.url, unreachable=e.unreachable)

    def _before_step(self, emit: Callable[[str, dict], None]) -> dict:
        """The probe and the learning-curve point due before step `step_idx`; their metrics."""
        pre: dict = {}
        memo = self.start_memo if self.step_idx == 0 else None
        if self.curriculum.due(self.step_idx):
            rec = memo.load("probe") if memo is not None else None
            adopted = rec is not None and adopt_probe(self.curriculum, rec)
            if adopted:
                rec = {**rec, "probe_s": 0.0}  # measured by the stage it names, not here
            else:
                self.policy.eval()
                rec = self.curriculum.probe(self._rollout, self.reward_fn, self.procs, self.step_idx,
                                            keep=self.cfg.probe_train)
                if memo is not None:
                    memo.save("probe", rec)
            # a fresh stream over the band, the same on every process
            self.draws = self.checkpointed["draws"] = self._band_draws()
            pre.update(self.curriculum.metrics(rec))
            planned = self._plan_probe_groups(adopted, rec)
            pre.update(planned)
            if planned:  # probes.jsonl says what the probe's episodes went to (the memo keeps the measurement alone)
                rec = {**rec, "train_groups": planned["curriculum/probe_train_groups"]}
            emit("probe", rec)
        if self.curve.due(self.step_idx):
            point = memo.load("curve") if memo is not None else None
            if point is not None and adopt_point(self.curve, {**point, "eval_s": 0.0}):
                point = self.curve.points[-1]
            else:
                point = self._evaluate()
                if memo is not None:
                    memo.save("curve", {k: v for k, v in point.items() if k != "best"})
            pre.update(self.curve.metrics(point))
            emit("eval", point)
        return pre

    def _plan_probe_groups(self, adopted: bool, rec: dict) -> dict:
        """Hand the probe's band episodes to the steps after it (cfg.probe_train; kit.train.grpo_groups.ProbeGroups);
        its metrics. A probe read from a memo has no episodes: the steps roll out fresh, said in a metric and
        the log."""
        self.probe_groups.slots = {}  # an earlier probe's plan ends with this probe
        episodes, self.curriculum.band_episodes = self.curriculum.band_episodes, {}
        if not self.cfg.probe_train:
            return {}
        if adopted:
            log.info("the probe before step %d was read from %s's memo: it holds no episodes here, so the steps "
                     "after it roll out fresh ones (probe_train)", self.step_idx,
                     rec.get("reused_from", "another stage"))
            return {"curriculum/probe_train_groups": 0, "curriculum/probe_memo_no_episodes": 1}
        planned = self.probe_groups.plan(episodes, self.draws, self.procs, self.cfg, self.step_idx)
        return {"curriculum/probe_train_groups": planned}

    def _band_draws(self) -> TaskDraws:
        """A fresh task stream over the curriculum's band, the same on every process."""
        probe = self.curriculum.last_probe or 0
        band = self.curriculum.band
        if self.cfg.band_balance in ("pattern", "step"):
            band = balanced_by_pattern(band)
        strata = [gold_pattern(t) for t in band] if self.cfg.band_balance == "step" else None
        return TaskDraws(band, self.cfg.seed + 7919 * (probe + 1), self.acc.process_index, strata=strata)

    def _evaluate(self) -> dict:
        self.policy.eval()
        return self.curve.evaluate(self.sampler, self.user, self.step_idx)

    # -- checkpoints (kit/train/checkpoints.py) ---------------------------------------------------
    def loop_state(self) -> dict:
        """This process's loop state between two steps, weights and optimizer aside: the step, the
        global RNG states and every part of `self.checkpointed`."""
        return {"step": self.step_idx, "rng": ck.rng_state(), "episodes": self.episodes_scored,
                "parts": {name: part.state_dict() for name, part in self.checkpointed.items()}}

    def load_loop_state(self, state: dict) -> None:
        missing = set(self.checkpointed) - set(state["parts"])
        if missing:
            from kit.errors import BadInput

            raise BadInput(f"the checkpoint holds no state of {sorted(missing)} (written by an older kit?)",
                           "remove the stage's checkpoints/ folder to start over")
        for name, part in self.checkpointed.items():
            if name == "draws" and self.curriculum.last_probe is not None:  # draws over the probed band
                part = self.draws = self.checkpointed["draws"] = self._band_draws()
            part.load_state_dict(state["parts"][name])
        ck.set_rng_state(state["rng"])
        self.step_idx = state["step"]
        self.episodes_scored = int(state.get("episodes", 0))  # 0 in an older kit's checkpoint (no budget then)

    def _meta(self) -> dict:
        return {"step": self.step_idx, "world_size": self.acc.num_processes,
                "tasks": [str(getattr(t, "id", "")) for t in self.tasks],
                "config": self.cfg.model_dump(mode="json", exclude=set(RESUMABLE_CHANGES))}

    def save_checkpoint(self, root: str | Path) -> Path | None:
        """Write the state after `step_idx` steps to root/step-N, renamed into place once complete
        (every process calls it: the main one writes weights, optimizer and meta.json, each process
        its own loop-rank<r>.pt). None where checkpoints are off (see `checkpoint_warning`)."""
        if self.checkpoint_warning:
            return None
        main = self.acc.is_main_process
        tmp = ck.staging(root, self.step_idx, create=main)
        self.acc.wait_for_everyone()
        mine = tmp / f"loop-rank{self.acc.process_index}.pt"
        ck.save_torch(self.loop_state(), mine)
        try:  # read back as resume reads it: a part whose state torch.load refuses fails here, loudly
            torch.load(mine, weights_only=True)
        except Exception as e:
            raise TypeError(f"GRPO loop state does not load back with torch.load(weights_only=True) ({e}); "
                            f"the state_dict() of each of {sorted(self.checkpointed)} must hold tensors, "
                            "numbers, strings, None, lists, tuples and dicts only") from e
        if main:
            ck.save_trainable(self.policy, tmp / "trainable.safetensors")
            ck.save_torch(self.opt.state_dict(), tmp / "optimizer.pt")
        self.acc.wait_for_everyone()
        path = Path(root) / ck.step_name(self.step_idx)
        if main:
            path = ck.commit(tmp, self._meta(), self.cfg.keep_checkpoints)
        self.acc.wait_for_everyone()
        # the sampler's cached prefix states are not saved: drop them, so that the next step starts
        # from the same empty cache here and in a run resumed from this checkpoint
        self.backend.clear_cache()
        return path

    def resume(self, root: str | Path, tag: str | None = None) -> int:
        """Load the newest complete checkpoint under `root` (every process calls it: each loads the
        weights, the optimizer and its own loop state); returns the steps it holds, 0 when there is
        none (a fresh start). `tag` (the stage's fingerprint): checkpoints of another tag are removed
        first. An unreadable checkpoint is skipped for the next older one; one written with other
        settings, tasks or process count is refused (BadInput)."""
        from kit.errors import BadInput

        if tag is not None and self.acc.is_main_process:
            ck.claim(root, tag)
        self.acc.wait_for_everyone()
        mine = self._meta()
        for path, meta in ck.complete(root):
            # settings compared without RESUMABLE_CHANGES on either side (a checkpoint written when the
            # list was shorter still holds the fields added to it since)
            meta = {**meta, "config": {k: v for k, v in (meta.get("config") or {}).items() if k not in RESUMABLE_CHANGES}}
            for key, what in (("world_size", "processes"), ("tasks", "tasks"), ("config", "settings")):
                if meta.get(key) != mine[key]:
                    diff = (sorted(k for k in set(mine[key]) | set(meta.get(key) or {})
                                   if (meta.get(key) or {}).get(k) != mine[key].get(k))
                            if key == "config" else f"{meta.get(key)!r:.200} vs {mine[key]!r:.200}")
                    raise BadInput(f"checkpoint {path} was written with other {what} than this run has: {diff}",
                                   f"resume with the same {what}, or remove {Path(root)} to start over")
            try:
                weights = ck.read_trainable(path / "trainable.safetensors")
                opt = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
                loop = torch.load(path / f"loop-rank{self.acc.process_index}.pt", weights_only=True)
                readable = True
            except Exception as e:  # noqa: BLE001 -- a damaged file: try the next older checkpoint
                log.warning("checkpoint %s is unreadable (%s: %.200s): skipped", path, type(e).__name__, e)
                readable = False
            if not self.procs.all(readable):
                continue
            ck.load_trainable(self.policy, weights, path)
            self.opt.load_state_dict(opt)
            self.load_loop_state(loop)
            self.backend.invalidate()
            if self.server is not None:  # the server serves the starting weights: give it these
                self.server.push(self.policy, self.tokenizer, self.step_idx)
            return self.step_idx
        return 0

    def _log(self, m: dict) -> None:
        if not self.acc.is_main_process:
            return
        if self.wandb_run is not None:
            self.wandb_run.log(M.wandb_keys(M.WANDB_GRPO, m), step=m["step"])
        elif self.cfg.print_metrics:
            keys = (M.REWARD_MEAN, M.FILTERED_FRAC, M.LOSS, M.CLIP_FRAC, M.GRAD_NORM, M.STEP_TIME)
            body = " ".join(f"{k}={m[k]:.4g}" for k in keys if k in m)
            print(f"[grpo] step {m['step']} {body}" + (f" SKIPPED: {m['skip_reason']}" if m["skipped"] else ""))

    def save(self, path: str | Path) -> Path:
        """Write an HF folder (weights, config, tokenizer) plus the GRPO config as grpo_config.json."""
        path = Path(path)
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            path.mkdir(parents=True, exist_ok=True)
            self.policy.config.use_cache = True  # off while training with gradient checkpointing
            merged_copy_state(self.policy).save_pretrained(path, save_function=self.acc.save)  # LoRA: merged
            self.tokenizer.save_pretrained(path)
            atomic_write(path / "grpo_config.json", self.cfg.model_dump_json(indent=2))
        return path
