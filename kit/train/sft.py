"""Supervised fine-tuning of the agent or the user model on SFT samples (PAPER.md, recipe steps 1-2).

    agent, user = gold_sft_samples(domain, tasks, tokenizer)        # or build_sft_samples(trajs, ...)
    metrics = run_sft(agent, SFTConfig(output_dir="runs/<id>/sft_agent", lora=True))
    HFBackend(metrics["output_dir"])          # a plain HF folder: hf backend, `transformers serve`, vLLM
    # multi-GPU: the same script under `accelerate launch --num_processes 8 script.py` (or a recipe
    # stage's `launch:`): every process trains its share of each batch, the main one saves

Built on TRL's SFTTrainer with a prompt-completion dataset and `completion_only_loss=True`: the loss
covers the completion tokens only (the turn and its end-of-turn token), never the prompt.

What this module does itself, and why:
- It tokenizes. The prompt is tokenized alone (`add_special_tokens=False`), exactly as the hf
  backend tokenizes what it samples from and as GRPO builds its rows (kit/train/sequences.py), and
  the completion is tokenized alone after it: the model learns to continue the very token ids it
  will see at inference. (TRL would tokenize prompt + completion jointly, which can merge tokens
  across the boundary.) TRL gets `input_ids` + `completion_mask` and builds the labels (-100 on
  every prompt token) from them; tests/test_sft.py checks a collated batch.
- It trains whole dialogues (`whole_dialogues`, default on). The exported format stays one sample
  per turn (kit/train/sft_data.py); the trainer groups them: the turns of one dialogue share one
  row wherever the next turn's prompt ids begin with the row so far, so every trained token keeps
  the exact context of its own per-turn row and the loss and gradients are the per-turn rows'
  (tests/test_sft.py), while the dialogue's prefix is read once instead of once per turn. Rows of a
  micro-batch also share their common prefix (the system prompt with the tools, `completion_loss`).
  Dialogues are not packed side by side into one row: the shared system prompt would then be computed
  once per dialogue instead of once per micro-batch.
- It truncates prompts from the left. A row longer than `max_seq_len` keeps its whole completion
  and the last prompt tokens (the most recent dialogue), losing the start of the system prompt
  first; TRL's own left truncation ("keep_end") is deprecated. A completion that alone fills
  `max_seq_len` is dropped (counted in `dropped_too_long`). Set `max_seq_len` above your longest
  prompt for real runs (τ² telecom agent prompts are ~8k tokens with SmolLM2's tokenizer).
- LoRA adapters are merged into the weights on save, so the output is a plain HF folder.
- It resumes after a crash with transformers' own checkpoints (`save_every`: a checkpoint-N of
  weights, optimizer, scheduler and every process's RNG in `checkpoint_dir`); rerun, it continues
  from the newest complete one of the same `checkpoint_tag` (the Trainer restores the RNG and skips
  the batches already trained, so the run ends with the uninterrupted run's weights:
  tests/test_resume.py), its token counts saved beside the RNG. The checkpoints are removed once
  the final model is written, and none is written after the last step.

Unsloth: with `use_unsloth="auto"` (default), on CUDA with the optional `unsloth` package
installed, the model is loaded and wrapped with Unsloth's FastLanguageModel (faster kernels, LoRA
via its get_peft_model, merged save via save_pretrained_merged). Unsloth cannot train on CPU and is
never required, and not in the `gpu` extra: unsloth 2026.10.9 (the latest on PyPI when this was
written) requires `trl<=1.15.0`, `transformers<=5.17.0` and `datasets<5.0.0`, so pip's resolver
refuses it beside the kit's pins (TRL 1.16.0, transformers 5.24.0, datasets 5.2.0; README: GPU
install); installed by hand it runs on versions it was not released for. Unsloth must be imported before transformers/trl to patch them, which a
kit import chain may not guarantee. This path is untested here (no GPU in this project's CI).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import ConfigDict, Field

from kit.files import atomic_write
from kit.llm import precision
from kit.train.lora import LoRAKnobs, peft_config, target_modules


class SFTKnobs(LoRAKnobs):
    """SFT's recipe knobs, each declared once (the `sft_user` / `sft_agent` stages' Config inherits
    them). Defaults suit a small dense model; the paper publishes no SFT hyperparameters."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(default=2e-5, gt=0, description="Peak learning rate (AdamW). Full fine-tuning ~1e-5..2e-5; "
                      "LoRA usually wants ~1e-4..2e-4.")
    lr_scheduler: str = Field(default="linear", description="transformers scheduler name: linear, cosine, constant, ...")
    warmup_steps: int = Field(default=0, ge=0, description="Linear warm-up steps.")
    epochs: float = Field(default=1.0, gt=0, description="Passes over the data (ignored when train_steps > 0).")
    train_steps: int = Field(default=-1, description="Optimizer steps to run; > 0 overrides `epochs`.")
    batch_size: int = Field(default=4, ge=1, description="Sequences (rows) per device per batch.")
    micro_batch_size: Optional[int] = Field(default=None, ge=1, description="Rows per forward/backward inside a "
                                            "batch: the batch's common prefix (the system prompt with the tools) "
                                            "runs once for the whole batch and its rows run in chunks of this many "
                                            "(kit.train.prefix.PrefixStates: the same gradients, less memory than "
                                            "the whole batch at once). None: the whole batch in one pass.")
    grad_accum: int = Field(default=1, ge=1, description="Forward passes per optimizer step (effective batch = "
                            "batch_size x grad_accum x devices).")
    max_seq_len: int = Field(default=4096, ge=16, description="Longest training sequence in tokens; longer "
                             "prompts are truncated from the left (see the module doc).")
    whole_dialogues: bool = Field(default=True, description="One training row per dialogue: every turn of the "
                                  "role trained in one sequence (a dialogue longer than max_seq_len is cut into "
                                  "windows), instead of one row per turn that re-reads its prefix. The same loss and "
                                  "gradients (tests/test_sft.py), a fraction of the compute; batch_size then counts "
                                  "dialogues (rows).")
    dtype: str = Field(default="auto", description="'auto' = bfloat16 on CUDA when supported, float32 otherwise; "
                       "or float32 / bfloat16 / float16.")
    logging_steps: int = Field(default=1, ge=1, description="Log the training loss every this many optimizer "
                               "steps (the loss curve's resolution).")
    use_unsloth: Literal["auto", True, False] = Field(default="auto", description="'auto': Unsloth when CUDA and "
                                                      "the package are there; True: require it; False: never.")
    save_every: int = Field(default=25, ge=0, description="Write a transformers checkpoint (weights, optimizer, "
                            "scheduler, RNG, data position) every this many optimizer steps; a rerun after a "
                            "crash resumes from the newest one. 0 = never.")
    keep_checkpoints: int = Field(default=1, ge=1, description="Checkpoints kept (transformers' "
                                  "save_total_limit); removed once the final model is written.")


class SFTConfig(SFTKnobs):
    """One SFT run: the knobs plus what the caller resolves (start model, output folder, W&B)."""

    model_path: Optional[str] = Field(default=None, description="HF model folder to start from; None = the "
                                      "embedded SmolLM2-135M-Instruct (kit.llm).")
    output_dir: str = Field(default="runs/sft", description="Where the final HF folder (merged weights + "
                            "tokenizer), loss_curve.json and sft_metrics.json go.")
    seed: int = Field(default=0, description="Seed for data order, LoRA init and dropout.")
    report_to: str = Field(default="none", description="'none' or 'wandb' (offline unless WANDB_MODE says otherwise).")
    run_name: Optional[str] = Field(default=None, description="Name of the W&B run.")
    checkpoint_dir: Optional[str] = Field(default=None, description="Where checkpoint-N folders go while training "
                                          "(None: <output_dir>/checkpoints).")
    checkpoint_tag: Optional[str] = Field(default=None, description="Whose checkpoints checkpoint_dir holds (a "
                                          "stage: its fingerprint): another tag's are removed, not resumed from. "
                                          "None: any found there are resumed from.")

    def checkpoints(self) -> Path:
        return Path(self.checkpoint_dir) if self.checkpoint_dir else Path(self.output_dir) / "checkpoints"


# ----- data --------------------------------------------------------------------------------------


def _pairs(source: Any) -> tuple[list[tuple[str, str, Any]], int]:
    """(prompt, completion, dialogue) of every grounded sample (a JSONL path, SFTSamples, dicts or a
    datasets.Dataset) and how many were dropped by the grounding check (kit/grounding.py; samples that carry
    their `messages` and `role` are checked, bare prompt/completion pairs cannot be). `dialogue` names the
    dialogue and role a sample's turn belongs to ((trajectory_id, role); None for a bare pair): the turns of
    one dialogue can share a training row (`tokenize_samples`)."""
    from kit.grounding import sample_problems
    from kit.train.sft_data import SFTSample, read_samples

    if isinstance(source, (str, Path)):
        items: list[Any] = read_samples(source)
        where = f" in {source}"
    else:
        items, where = list(source), ""
    pairs, dropped = [], 0
    for k, s in enumerate(items):
        checkable = isinstance(s, SFTSample) or (isinstance(s, dict) and s.get("role") and s.get("messages"))
        if checkable and sample_problems(s):
            dropped += 1
            continue
        if isinstance(s, SFTSample):
            pairs.append((s.prompt, s.completion, (s.trajectory_id, s.role)))
        elif isinstance(s, dict) and isinstance(s.get("prompt"), str) and isinstance(s.get("completion"), str):
            key = (s["trajectory_id"], s.get("role")) if s.get("trajectory_id") else None
            pairs.append((s["prompt"], s["completion"], key))
        else:
            raise ValueError(f"SFT sample {k}{where} has no string 'prompt' and 'completion'")  # noqa: TRY004
    if not pairs:
        raise ValueError(f"no SFT samples{where}: nothing to train on"
                         + (f" ({dropped} dropped as ungrounded, kit/grounding.py)" if dropped else ""))
    return pairs, dropped


def tokenize_samples(pairs: list[tuple], tokenizer: Any, max_seq_len: int,
                     whole_dialogues: bool = False) -> tuple[dict, dict]:
    """{"input_ids", "completion_mask"} columns and counts (rows, turns, truncated prompts, dropped samples).

    `pairs`: (prompt, completion) or (prompt, completion, dialogue key) in dialogue order (`_pairs`).
    One row per turn, or (`whole_dialogues`) the turns of one dialogue in one row wherever that is exact:
    a turn joins its dialogue's row when its prompt's token ids begin with the row's ids (the earlier
    prompt, the earlier completion, then the replies that followed), so every trained token keeps exactly
    the context (ids and positions) it has in its own per-turn row, and a causal model gives it the same
    logits: the same loss and gradients as the per-turn rows, at the cost of one row. Where the next
    prompt does not extend the row (a template that re-renders history, a row cut from the left, a row
    that would pass `max_seq_len`), a new row (window) starts: never an inexact context. The same rule as
    GRPO's packed rows (kit/train/sequences.py)."""
    ids, masks = [], []
    truncated = dropped = joined = 0
    open_row: dict = {}  # dialogue key -> index of its latest row
    for item in pairs:
        prompt, completion = item[0], item[1]
        key = item[2] if whole_dialogues and len(item) > 2 else None
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(completion, add_special_tokens=False)["input_ids"]
        if not c or len(c) >= max_seq_len:
            dropped += 1
            continue
        j = open_row.get(key) if key is not None else None
        if j is not None and len(p) + len(c) <= max_seq_len and p[:len(ids[j])] == ids[j]:
            masks[j] = masks[j] + [0] * (len(p) - len(ids[j])) + [1] * len(c)
            ids[j] = p + c
            joined += 1
            continue
        if len(p) + len(c) > max_seq_len:
            p = p[len(p) + len(c) - max_seq_len:]  # keep the end of the prompt: the latest turns
            truncated += 1
        ids.append(p + c)
        masks.append([0] * len(p) + [1] * len(c))
        if key is not None:
            open_row[key] = len(ids) - 1
    if not ids:
        raise ValueError(f"every SFT sample's completion is at least max_seq_len={max_seq_len} tokens: nothing to train on")
    return {"input_ids": ids, "completion_mask": masks}, {
        "rows": len(ids), "turns": len(ids) + joined, "truncated_prompts": truncated, "dropped_too_long": dropped}


def _shared_prefix(ids: Any, mask: Any, limit: int) -> int:
    """Length of the token prefix every row of the batch starts with (at most `limit`)."""
    same = (ids == ids[:1]) & (mask == 1)
    differs = (~same.all(dim=0)).nonzero()
    n = int(differs[0]) if len(differs) else ids.shape[1]
    return min(n, limit)


def completion_loss(model: Any, inputs: dict, num_items_in_batch: Any = None, min_prefix: int = 64,
                    chunk: Optional[int] = None) -> Any:
    """Cross-entropy over the completion tokens, computed the cheap way, with the same value and
    gradients as the plain forward pass (tests/test_sft.py checks both):

    - logits only where a label is predicted: a causal LM's head over a 49k vocabulary at every
      position of a 900-token row is a ~700 MB float32 tensor per batch of four on CPU, while the
      loss needs the few positions that predict completion tokens (their union over the batch goes
      to the model as `logits_to_keep`);
    - a prefix every row shares (the agent's system prompt with its tools, ~750 of ~1000 tokens) is
      run once, and its key/value cache, repeated for every row, is attended by each row's own
      suffix; gradients flow back into the prefix through the repeated cache;
    - with `chunk` (and gradients on), the rows run `chunk` at a time after that one prefix pass, each
      chunk's backward pass done here (kit.train.prefix.PrefixStates) and the prefix's once after them:
      the returned loss then carries no graph (its value is the batch's loss; a backward on it does
      nothing more). The caller must not rescale the gradients afterwards (the Trainer does not when
      the loss is normalised by `num_items_in_batch`).
    """
    import torch

    ids, labels = inputs["input_ids"], inputs["labels"]
    mask = inputs.get("attention_mask")
    if mask is None:
        mask = torch.ones_like(ids)
    wanted = (labels[:, 1:] != -100).any(dim=0).nonzero().flatten()  # position t predicts token t + 1
    base = getattr(model, "module", model)  # under accelerate launch: the model inside DistributedDataParallel
    # gradient checkpointing turns the cache off, so the prefix cannot be shared then
    share = len(wanted) and ids.shape[0] > 1 and not getattr(base, "is_gradient_checkpointing", False)
    p = _shared_prefix(ids, mask, int(wanted.min())) if share else 0
    n_items = num_items_in_batch if num_items_in_batch is not None else (labels[:, 1:] != -100).sum()
    if p >= min_prefix and chunk and ids.shape[0] > chunk and torch.is_grad_enabled():
        from kit.train.prefix import PrefixStates

        prefix = PrefixStates(model, ids[0, :p].tolist())
        total = torch.zeros((), dtype=torch.float32, device=ids.device)
        for rows in _chunks_by_length(mask, labels, chunk):
            at = (labels[rows, 1:] != -100).any(dim=0).nonzero().flatten()
            if not len(at):
                continue
            end = _used_columns(mask[rows], labels[rows])
            out = model(input_ids=ids[rows, p:end], attention_mask=mask[rows, :end],
                        cache=prefix.cache(len(rows)), use_cache=True, logits_to_keep=at - p)
            part = _ce_sum(out.logits, labels[rows][:, at + 1]) / n_items
            part.backward()
            total += part.detach()
        prefix.backward()
        return total.requires_grad_()
    if p >= min_prefix:
        from transformers import DynamicCache

        cache = DynamicCache(config=base.config.get_text_config(decoder=True))
        model(input_ids=ids[:1, :p], cache=cache, use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(ids.shape[0])
        out = model(input_ids=ids[:, p:], attention_mask=mask, cache=cache, use_cache=True, logits_to_keep=wanted - p)
    else:
        out = model(input_ids=ids, attention_mask=mask, logits_to_keep=wanted)
    return _ce_sum(out.logits, labels[:, wanted + 1]) / n_items


def _chunks_by_length(mask: Any, labels: Any, chunk: int) -> list[Any]:
    """The batch's row indices in chunks of `chunk`, shortest rows first: rows of similar length share a
    chunk, so a chunk cut to its own used columns (`_used_columns`) computes little padding. The loss is a
    sum over rows, so the order changes nothing but the floating-point order of the sum."""
    import torch

    used = [_used_columns(mask[i : i + 1], labels[i : i + 1]) for i in range(mask.shape[0])]
    order = sorted(range(mask.shape[0]), key=lambda i: used[i])
    return [torch.tensor(order[s : s + chunk], device=mask.device) for s in range(0, len(order), chunk)]


def _used_columns(mask: Any, labels: Any) -> int:
    """One past the last column any of these rows attends to or is trained on: the columns after it are
    padding for all of them (right padding), and a causal model's outputs before a column do not depend
    on it, so they can be left out of the forward pass."""
    used = (mask != 0).any(dim=0) | (labels != -100).any(dim=0)
    cols = used.nonzero().flatten()
    return int(cols[-1]) + 1 if len(cols) else 0


def _ce_sum(logits: Any, target: Any) -> Any:
    """Summed cross-entropy of `target` (-100: not trained) under `logits` [rows, positions, vocab]."""
    import torch

    logits = logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                             ignore_index=-100, reduction="sum")


def _counting(trainer_cls: type) -> type:
    """`trainer_cls` counting the tokens of every micro-batch it trains on (the dataloader may
    prefetch batches it never trains on, so the collator is the wrong place to count), with the
    loss computed on completion positions only (`completion_loss`) where the model allows it."""

    class Counting(trainer_cls):
        tokens_trained = 0
        tokens_seen = 0
        sparse_logits = True
        micro_batch_size = None

        # the counts travel with each process's RNG state in a checkpoint (transformers saves and
        # restores that per process, before trainer_state.json marks the checkpoint complete)
        def _save_rng_state(self, output_dir):
            super()._save_rng_state(output_dir)
            counts = {"tokens_trained": self.tokens_trained, "tokens_seen": self.tokens_seen}
            (Path(output_dir) / f"kit_tokens_{self.args.process_index}.json").write_text(json.dumps(counts))

        def _load_rng_state(self, checkpoint):
            super()._load_rng_state(checkpoint)
            f = Path(checkpoint or "") / f"kit_tokens_{self.args.process_index}.json"
            if checkpoint and f.is_file():
                counts = json.loads(f.read_text())
                self.tokens_trained, self.tokens_seen = counts["tokens_trained"], counts["tokens_seen"]

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            with precision.autocast(model):  # bf16 matmuls where the stage asked (cpu_bf16) and the CPU can
                return self._loss(model, inputs, return_outputs, num_items_in_batch)

        def _loss(self, model, inputs, return_outputs, num_items_in_batch):
            if model.training:
                self.tokens_trained += int((inputs["labels"][:, 1:] != -100).sum())  # token 0 is never predicted
                mask = inputs.get("attention_mask")
                self.tokens_seen += int(mask.sum()) if mask is not None else int(inputs["input_ids"].numel())
                if self.sparse_logits and not return_outputs:
                    # chunks run their own backward passes: only where the Trainer then adds nothing (one
                    # process, a loss normalised by num_items_in_batch, which it does not rescale)
                    chunk = self.micro_batch_size if (num_items_in_batch is not None and self.model_accepts_loss_kwargs
                                                      and self.args.world_size == 1) else None
                    return completion_loss(model, inputs, num_items_in_batch, chunk=chunk)
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)

    return Counting


def _dtype(cfg: SFTConfig, cuda: bool):
    import torch

    if cfg.dtype != "auto":
        return getattr(torch, cfg.dtype)
    return torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32


def _want_unsloth(cfg: SFTConfig, cuda: bool) -> bool:
    import importlib.util

    available = cuda and importlib.util.find_spec("unsloth") is not None
    if cfg.use_unsloth is True and not available:
        raise RuntimeError("use_unsloth=True needs CUDA and the `unsloth` package (pip install unsloth)")
    return bool(cfg.use_unsloth) and available


def _load_unsloth(path: str, cfg: SFTConfig, dtype: Any):  # pragma: no cover -- needs CUDA + unsloth
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=path, max_seq_length=cfg.max_seq_len, dtype=dtype, load_in_4bit=False,
        full_finetuning=not cfg.lora, local_files_only=True,
    )
    if cfg.lora:
        targets = target_modules(cfg)
        model = FastLanguageModel.get_peft_model(
            model, r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
            target_modules=targets, random_state=cfg.seed,
            use_gradient_checkpointing="unsloth" if cfg.gradient_checkpointing else False,
        )
    return model, tokenizer


def _load(cfg: SFTConfig) -> tuple[Any, Any, Any, bool]:
    """(model, tokenizer, peft_config or None, unsloth used)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = cfg.model_path
    if path is None:
        from kit.llm import ensure_embedded_model

        path = str(ensure_embedded_model())
    if not Path(path).is_dir():
        from kit.errors import NotFound

        raise NotFound(f"HF model folder not found: {path} (hub ids are not downloaded)",
                       "give a local folder with config.json and the weights, or 'embedded'")
    cuda = torch.cuda.is_available()
    dtype = _dtype(cfg, cuda)
    if _want_unsloth(cfg, cuda):
        model, tokenizer = _load_unsloth(path, cfg, dtype)
        return model, tokenizer, None, True
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tokenizer, peft_config(cfg), False


# ----- the run -----------------------------------------------------------------------------------


def _no_save_at_the_end() -> Any:
    """A callback that cancels transformers' checkpoint after the last step: run_sft writes the
    final model right after, then removes the checkpoints."""
    from transformers import TrainerCallback

    class NoSaveAtTheEnd(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= state.max_steps:
                control.should_save = False
            return control

    return NoSaveAtTheEnd()


def prepare_sft(samples_or_path: Any, config: SFTConfig, callbacks: Optional[list] = None) -> tuple[Any, dict]:
    """A ready TRL SFTTrainer and data counts; `run_sft` trains it. Exposed so tests and notebooks
    can look at a collated batch before training. `callbacks`: more transformers TrainerCallbacks."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig as TRLSFTConfig
    from trl import SFTTrainer

    pairs, ungrounded = _pairs(samples_or_path)  # fail on bad data before loading any weights
    model, tokenizer, peft_config, unsloth = _load(config)
    columns, counts = tokenize_samples(pairs, tokenizer, config.max_seq_len, config.whole_dialogues)
    if config.report_to == "wandb":
        os.environ.setdefault("WANDB_MODE", "offline")
    cuda = torch.cuda.is_available()
    dtype = _dtype(config, cuda)
    # transformers 5.x renamed gradient_checkpointing (TRL's default: on) to activation_checkpointing
    ckpt = ("activation_checkpointing" if "activation_checkpointing" in TRLSFTConfig.__dataclass_fields__
            else "gradient_checkpointing")
    args = TRLSFTConfig(
        output_dir=str(config.checkpoints()),  # the Trainer's own files are its checkpoints alone
        learning_rate=config.lr,
        lr_scheduler_type=config.lr_scheduler,
        warmup_steps=config.warmup_steps,
        num_train_epochs=config.epochs,
        max_steps=config.train_steps,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accum,
        **{ckpt: config.gradient_checkpointing},
        max_length=config.max_seq_len,  # rows are already this short; TRL's truncation is a no-op
        completion_only_loss=True,
        packing=False,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu=not cuda,
        dataloader_pin_memory=cuda,
        seed=config.seed,
        data_seed=config.seed,
        logging_steps=config.logging_steps,
        save_strategy="steps" if config.save_every else "no",
        save_steps=config.save_every or 500,
        save_total_limit=config.keep_checkpoints,
        report_to=[] if config.report_to == "none" else [config.report_to],
        run_name=config.run_name,
        disable_tqdm=True,
    )
    trainer = _counting(SFTTrainer)(model=model, args=args, train_dataset=Dataset.from_dict(columns),
                                    processing_class=tokenizer, peft_config=peft_config,
                                    callbacks=[_no_save_at_the_end(), *(callbacks or [])])
    trainer.sparse_logits = not unsloth  # Unsloth patches the forward pass its own way
    trainer.micro_batch_size = config.micro_batch_size
    counts.update(samples=counts["turns"], unsloth=unsloth, ungrounded_dropped=ungrounded,
                  completion_tokens_per_epoch=sum(sum(m) for m in columns["completion_mask"]))
    return trainer, counts


def save_merged(trainer: Any, output_dir: str | Path, unsloth: bool = False) -> Path:
    """Write a plain HF folder: LoRA adapters merged into the weights, tokenizer beside them."""
    out = Path(output_dir)
    model, tokenizer = trainer.model, trainer.processing_class
    if unsloth and hasattr(model, "save_pretrained_merged"):  # pragma: no cover -- needs CUDA + unsloth
        model.save_pretrained_merged(str(out), tokenizer, save_method="merged_16bit")
        return out
    if hasattr(model, "merge_and_unload"):  # a PeftModel
        model = model.merge_and_unload()
    model.config.use_cache = True  # gradient checkpointing switches it off; inference wants it
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def run_sft(samples_or_path: Any, config: SFTConfig | None = None, callbacks: Optional[list] = None) -> dict:
    """Train on SFT samples (a JSONL path, SFTSamples, dicts with prompt/completion, or a Dataset),
    from the newest checkpoint in `config.checkpoints()` when a crashed run of the same
    `checkpoint_tag` left one.

    Returns metrics: loss_curve [(step, loss)], first_loss, final_loss, steps, wall_time_s (this
    attempt's), tokens_trained (tokens that reached the loss), tokens_seen, samples,
    truncated_prompts, dropped_too_long, resumed_from (the checkpoint's step, 0: none), output_dir.
    loss_curve.json and sft_metrics.json are written into output_dir.
    """
    import shutil

    from kit.train import checkpoints as ck

    config = config or SFTConfig()
    start = time.perf_counter()
    trainer, counts = prepare_sft(samples_or_path, config, callbacks)
    if counts["truncated_prompts"]:
        print(f"sft: {counts['truncated_prompts']} prompts truncated from the left to fit max_seq_len={config.max_seq_len}")
    acc, main = trainer.accelerator, trainer.is_world_process_zero()
    checkpoints = config.checkpoints()
    if main and config.checkpoint_tag is not None:
        ck.claim(checkpoints, config.checkpoint_tag)
    acc.wait_for_everyone()
    last = ck.trl_checkpoint(checkpoints, clean=main)
    acc.wait_for_everyone()
    resumed = int(last.name.rsplit("-", 1)[1]) if last else 0
    if last and main:
        print(f"sft: resuming from step {resumed} ({last})")
    trainer.train(resume_from_checkpoint=str(last) if last else None)
    # the loss is logged averaged over processes, the same on each; token counts are per process
    tokens = [trainer.tokens_trained, trainer.tokens_seen]
    if acc.num_processes > 1:  # under accelerate launch: sum over processes
        import torch

        tokens = [int(x) for x in acc.reduce(torch.tensor(tokens, device=acc.device), reduction="sum").tolist()]
    curve = [(int(h["step"]), float(h["loss"])) for h in trainer.state.log_history
             if "loss" in h and math.isfinite(h["loss"])]
    out = Path(config.output_dir)
    metrics = {
        "loss_curve": curve,
        "first_loss": curve[0][1] if curve else None,
        "final_loss": curve[-1][1] if curve else None,
        "steps": int(trainer.state.global_step),
        "wall_time_s": round(time.perf_counter() - start, 2),
        "tokens_trained": tokens[0],
        "tokens_seen": tokens[1],
        **counts,
        "resumed_from": resumed,
        "processes": acc.num_processes,
        "output_dir": str(out),
        "config": config.model_dump(mode="json"),
    }
    if main:  # one writer (DDP: every process holds the same weights)
        save_merged(trainer, out, counts["unsloth"])
        write_loss_curve(out, curve)
        atomic_write(out / "sft_metrics.json", json.dumps(metrics, indent=1))
        shutil.rmtree(checkpoints, ignore_errors=True)  # the final model is written: nothing to resume
    acc.wait_for_everyone()
    return metrics


def write_loss_curve(folder: str | Path, curve: list) -> Path:
    """loss_curve.json in `folder`: [[optimizer step, loss], ...] (what the SFT stage's Outputs read)."""
    path = Path(folder) / "loss_curve.json"
    atomic_write(path, json.dumps(curve))
    return path
