"""GRPO on the agent with checker rewards and dynamic filtering (PAPER.md, "The RL recipe").

    trainer = GRPOTrainer(model, tokenizer, domain.tasks("train"), GRPOConfig(), domain=domain)
    history = trainer.train()          # one metrics dict per step (also logged to W&B if given)
    trainer.save("runs/<id>/grpo")     # HF folder: HFBackend, vLLM and `transformers serve` load it
    # multi-GPU: the same script under `accelerate launch --num_processes 8 script.py`

Per step: draw B tasks; run G multi-turn episodes of each (kit.rollout.run_episodes) with an
HFBackend that wraps the *current* policy (eval mode while sampling); reward = the checker's
verdict (default kit.verify.verify(...).reward, any `reward_fn(task, traj)` replaces it); drop
groups per `filter_mode` and draw fresh tasks in their place until B groups are kept or
`resample_budget` extra tasks are spent; advantages (R - mean_G) / (std_G + eps) go to every
token the agent sampled; token-level PPO-clip over all generated tokens of the batch (train mode).

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
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kit import metrics as M
from kit.llm.hf import HFBackend
from kit.llm.types import SamplingParams
from kit.rollout.loop import step_budget_warning
from kit.rollout.prompts import agent_system_prompt
from kit.train.grpo_config import GRPOConfig
from kit.train.grpo_math import filter_groups, group_advantages, ppo_clip_loss
from kit.train.lora import merged_copy_state, prepare_for_training, trainable_parameters
from kit.train.sequences import Row, sampler_logprobs, token_logprobs, trajectory_rows

log = logging.getLogger(__name__)


@dataclass
class _Group:
    task: Any
    trajs: list
    rewards: list[float]


class GRPOTrainer:
    """The loop. `model`/`tokenizer`: the policy (a loaded causal LM). `tasks`: what to sample.

    domain: a kit Domain; gives the default rollouts (run_episodes), reward (verify), system
        prompt and tools. Without it pass `rollout_fn` and `reward_fn` (e.g. single-turn tasks).
    user: the user simulator Backend (default: make_backend(config.user_model), built lazily).
    reward_fn(task, trajectory) -> float; rollout_fn(tasks, agent_backend, seed) -> trajectories.
    agent_system, tools: what the agent sees, when they are not the domain's.
    wandb_run: a W&B run to log each step's metrics to. accelerator: an accelerate.Accelerator.
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
        self.wandb_run = wandb_run
        # tasks are drawn from one stream, the same on every process, then shared out (rank r takes
        # groups r, r + W, ...): W processes train on the same global batch as one would
        self.task_rng = random.Random(self.cfg.seed * 1000)
        self.rng = random.Random(self.cfg.seed * 1000 + 1 + self.acc.process_index)  # this process's own draws
        self._queue: list = []
        self._local_queue: list = []
        self.step_idx = 0

    # -- rollouts -------------------------------------------------------------------------
    @property
    def user(self) -> Any:
        if self._user is None:
            from kit.llm import make_backend

            self._user = make_backend(self.cfg.user_model)
        return self._user

    def _draw(self, n: int, local: bool = False) -> list:
        """n tasks, without replacement within a pass over the shuffled task list; from the stream
        every process shares, or (`local`) from this process's own (resampling)."""
        rng, queue = (self.rng, self._local_queue) if local else (self.task_rng, self._queue)
        out = []
        while len(out) < n:
            if not queue:
                queue.extend(rng.sample(self.tasks, len(self.tasks)))
            out.append(queue.pop())
        return out

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

    def _collect(self) -> tuple[list[_Group], list[_Group], dict]:
        """Roll out this process's share of the B groups, filter, resample (from this process's own
        stream, its share of the budget) until its share is kept or the budget is spent."""
        c, G = self.cfg, self.cfg.group_size
        W, r = self.acc.num_processes, self.acc.process_index
        todo = self._draw(c.tasks_per_step)[r::W]
        share = len(todo)
        kept, seen, budget, rnd = [], [], c.resample_budget // W + (r < c.resample_budget % W), 0
        budget0 = budget
        self.policy.eval()
        while todo:  # a process with no share (W > B) rolls out nothing
            seed = ((c.seed * 1009 + self.acc.process_index) * 100_003 + self.step_idx) * 101 + rnd  # distinct per process
            trajs = self._rollout([t for t in todo for _ in range(G)], seed=seed)
            groups = []
            for k, task in enumerate(todo):
                ts = trajs[k * G : (k + 1) * G]
                groups.append(_Group(task, ts, [float(self.reward_fn(task, t)) for t in ts]))
            seen += groups
            kept += [g for g, keep in zip(groups, filter_groups([g.rewards for g in groups], c.filter_mode)) if keep]
            need = share - len(kept)
            if need <= 0 or budget <= 0:
                break
            n = min(need, budget)
            budget, rnd, todo = budget - n, rnd + 1, self._draw(n, local=True)
        m = {M.GROUPS_RESAMPLES: budget0 - budget, M.GROUPS_KEPT: min(len(kept), share),
             M.FILTERED_FRAC: 1.0 - len(kept) / len(seen) if seen else 0.0}
        return kept[:share], seen, m

    def _episode_metrics(self, seen: list[_Group]) -> dict:
        rewards = [r for g in seen for r in g.rewards]
        trajs = [t for g in seen for t in g.trajs]
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
        if self.domain is not None:  # user fidelity is defined on tau2 tasks
            from kit.rollout.fidelity import user_deviations

            dev = [bool(user_deviations(g.task, t, goal_reached=r >= 1.0))
                   for g in seen for t, r in zip(g.trajs, g.rewards)]
            m[M.USER_DEVIATION_RATE] = sum(dev) / len(dev)
        return m

    # -- update ---------------------------------------------------------------------------
    def _rows(self, kept: list[_Group]) -> tuple[list[Row], dict]:
        advs = group_advantages([g.rewards for g in kept], scope=self.cfg.adv_scope)
        rows, unmatched, too_long = [], 0, 0
        retokenize = self.server is not None and not self.cfg.server_token_ids
        for gi, (g, adv) in enumerate(zip(kept, advs)):
            for traj, a in zip(g.trajs, adv):
                rs, u = trajectory_rows(self.backend, traj, self.system, self.tools, a, gi, retokenize=retokenize)
                unmatched += u
                for r in rs:
                    if self.cfg.max_seq_tokens and len(r.ids) > self.cfg.max_seq_tokens:
                        too_long += 1
                    else:
                        rows.append(r)
        return rows, {"train/rows": len(rows), "train/unmatched_turns": unmatched, "train/too_long_rows": too_long,
                      "train/tokens": sum(sum(r.mask) for r in rows),
                      "train/retokenized_turns": sum(r.retokenized for r in rows),
                      "train/sampler_logprob_rows": sum(r.logprobs is not None for r in rows)}

    def _placeholder_rows(self) -> list[Row]:
        """Rows for a process whose share of the batch was all filtered while others train: under
        DDP it must still run the same backward passes; its loss is multiplied by 0 (group -1)."""
        return [Row([self.backend.pad_id] * 2, [0, 1], 0.0, -1) for _ in range(self.cfg.minibatches)]

    def _update(self, rows: list[Row]) -> tuple[dict, str | None]:
        c = self.cfg
        pad = self.backend.pad_id
        rows = sorted(rows, key=lambda r: len(r.ids))  # micro-batches of similar length pad less
        order = list(range(len(rows)))
        self.rng.shuffle(order)
        mbs = [sorted(order[i :: c.minibatches]) for i in range(c.minibatches)]  # step() checked len(rows)
        micro = [[[rows[j] for j in mb[s : s + c.micro_batch_size]] for s in range(0, len(mb), c.micro_batch_size)]
                 for mb in mbs]
        self.model.train()
        old = ref = None
        with torch.no_grad():
            if c.minibatches > 1:  # later minibatches are off-policy: fix the sampling policy's log-probs now
                old = [[token_logprobs(self.model, mi, pad, c.temperature)[0] for mi in mb] for mb in micro]
            if self.ref is not None:
                ref = [[token_logprobs(self.ref, mi, pad, c.temperature)[0] for mi in mb] for mb in micro]
        out = {M.LOSS: 0.0, M.CLIP_FRAC: 0.0, "approx_kl": 0.0, M.GRAD_NORM: 0.0, **({"kl_ref": 0.0} if ref is not None else {})}
        tokens, applied = 0.0, 0
        # DDP averages gradients over the W processes: each normalises by the tokens (or rows) of the
        # whole batch, all processes together, and scales by W, so W processes compute the gradient
        # one process would on the same global batch
        W = self.acc.num_processes
        for b, mb in enumerate(micro):
            total = self._sum(float(sum(sum(r.mask) for mi in mb for r in mi if r.group >= 0)))
            seqs = self._sum(float(sum(r.group >= 0 for mi in mb for r in mi)))
            self.opt.zero_grad(set_to_none=True)
            bad = False
            for k, mi in enumerate(mb):
                sync = contextlib.nullcontext() if k == len(mb) - 1 else self.acc.no_sync(self.model)
                with sync:
                    logp, mask = token_logprobs(self.model, mi, pad, c.temperature)
                    adv = torch.tensor([r.advantage for r in mi], dtype=logp.dtype, device=logp.device)
                    before = logp.detach() if old is None else old[b][k]
                    behaviour = sampler_logprobs(mi, before)  # a server's log-probs, where it gave them
                    loss, st = ppo_clip_loss(
                        logp, before if behaviour is None else behaviour, adv, mask, c.clip_eps, c.kl_coef,
                        None if ref is None else ref[b][k], c.loss_norm, total_tokens=max(total, 1.0))
                    if c.loss_norm == "sequence":
                        loss = loss * len(mi) / max(seqs, 1.0)
                    loss = loss * W
                    if all(r.group < 0 for r in mi):
                        loss = loss * 0.0
                    if not torch.isfinite(loss):  # keep the backward (DDP peers wait on it), but of nothing
                        bad, loss = True, (logp * 0.0).nan_to_num().sum()
                    self.acc.backward(loss)
                out[M.LOSS] += loss.item() / W / len(micro)
                out["clip_frac"] += st["clip_frac"] * st["tokens"]
                out["approx_kl"] += st["approx_kl"] * st["tokens"]
                if ref is not None:
                    out["kl_ref"] += st["kl_ref"] * st["tokens"]
                tokens += st["tokens"]
            if self._any(bad):
                self.opt.zero_grad(set_to_none=True)
                return {**out, M.LOSS: float("nan"), "train/minibatches_applied": applied}, "nan_loss"
            gn = float(self.acc.clip_grad_norm_(self.model.parameters(), c.max_grad_norm))
            if not math.isfinite(gn):
                self.opt.zero_grad(set_to_none=True)
                return {**out, "train/minibatches_applied": applied}, "nan_grad_norm"
            out["grad_norm"] += gn / len(micro)
            self.opt.step()
            applied += 1
        self.backend.invalidate()  # the sampler's cached prefix states belong to the old weights
        for key in ("clip_frac", "approx_kl", "kl_ref"):
            if key in out:
                out[key] /= max(tokens, 1.0)
        out["train/minibatches_applied"] = applied
        return out, None

    # -- the step -------------------------------------------------------------------------
    def step(self) -> dict:
        """One GRPO step; returns its metrics. A skipped step says why (`skip_reason`)."""
        t0 = time.perf_counter()
        kept, seen, m = self._collect()
        if seen:
            m.update(self._episode_metrics(seen))
        m.update({"step": self.step_idx, "lr": self.opt.param_groups[0]["lr"], "skipped": 0, "skip_reason": ""})
        m["time/rollout_s"] = time.perf_counter() - t0
        reason, rows = None, []
        if not kept:
            reason = "all_groups_filtered"
        else:
            rows, rm = self._rows(kept)
            m.update(rm)
            if not rows:
                reason = "no_trainable_tokens"
            elif len(rows) < self.cfg.minibatches:
                reason = "fewer_rows_than_minibatches"
        # Under `accelerate launch` every process takes part in the same backward passes. The step is
        # skipped when no process has rows, or when one has fewer rows than minibatches. A process with
        # no rows while others have some trains on _placeholder_rows(): zero-weight rows (loss x 0).
        nothing_here = reason in ("all_groups_filtered", "no_trainable_tokens")
        if self._all(nothing_here) or self._any(reason == "fewer_rows_than_minibatches"):
            reason = reason or "skipped_on_another_process"
        else:
            if nothing_here:
                rows, reason = self._placeholder_rows(), None
            t1 = time.perf_counter()
            um, reason = self._update(rows)
            m.update(um)
            m["time/update_s"] = time.perf_counter() - t1
            if reason is None and self.server is not None:
                t2 = time.perf_counter()
                self.server.push(self.policy, self.tokenizer, self.step_idx + 1)
                m["time/weight_sync_s"] = time.perf_counter() - t2
        if reason:
            m.update({"skipped": 1, "skip_reason": reason, f"skipped/{reason}": 1})
        m[M.STEP_TIME] = time.perf_counter() - t0
        m.update(self._global(m))
        self._log(m)
        self.step_idx += 1
        return m

    def train(self, steps: int | None = None, on_step: Callable[[dict], None] | None = None) -> list[dict]:
        """Run `steps` (default config.train_steps) steps; one metrics dict each, also handed to
        `on_step` as soon as the step ends (a metrics file, a progress line)."""
        history = []
        for _ in range(steps if steps is not None else self.cfg.train_steps):
            history.append(self.step())
            if on_step is not None:
                on_step(history[-1])
        return history

    def _sum(self, x: float) -> float:
        """`x` summed over all processes (no communication with a single process)."""
        if self.acc.num_processes == 1:
            return x
        t = torch.tensor([float(x)], dtype=torch.float64, device=self.acc.device)
        return float(self.acc.reduce(t, reduction="sum").item())

    def _any(self, flag: bool) -> bool:
        """True if `flag` is set on any process."""
        return self._sum(float(flag)) > 0

    def _all(self, flag: bool) -> bool:
        """True if `flag` is set on every process."""
        return self._sum(float(flag)) >= self.acc.num_processes

    # metrics over the whole batch, all processes together (each process's own stay under proc/)
    _SUMMED = (M.GROUPS_KEPT, M.GROUPS_RESAMPLES, "train/rows", "train/tokens", "train/unmatched_turns",
               "train/too_long_rows", "train/retokenized_turns")
    _EPISODE_MEANS = (M.REWARD_MEAN, M.PASS_RATE, M.USER_DEVIATION_RATE)

    def _global(self, m: dict) -> dict:
        if self.acc.num_processes == 1:
            return {}
        out = {f"proc/{k}": m[k] for k in self._SUMMED + self._EPISODE_MEANS if k in m}
        for k in self._SUMMED:
            out[k] = self._sum(m.get(k, 0.0))
        episodes = self._sum(m.get("proc/episodes", 0.0))
        for k in self._EPISODE_MEANS:  # weighted by each process's episodes
            out[k] = self._sum(m.get(k, 0.0) * m.get("proc/episodes", 0.0)) / max(episodes, 1.0)
        return {**out, "proc/count": self.acc.num_processes}

    def _log(self, m: dict) -> None:
        if not self.acc.is_main_process:
            return
        if self.wandb_run is not None:
            self.wandb_run.log(M.wandb_keys("grpo", m), step=m["step"])
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
            (path / "grpo_config.json").write_text(self.cfg.model_dump_json(indent=2))
        return path
