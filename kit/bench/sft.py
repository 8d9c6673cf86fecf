"""`kit bench sft`: what SFT optimizer steps cost per trained token, on the embedded model.

    kit bench sft --steps 4 --batch-size 4 --out bench_sft.json         # the mock domain's gold dialogues
    kit bench sft --data runs/<id> --steps 5 --against b7d8fc2 --repeats 5   # <id>/synthesize/sft_agent.jsonl
    res = bench_sft(steps=2, max_seq_len=1024, dialogues=2, threads=1); print(res.line())

The trainer is the SFT stages' (kit.train.sft.prepare_sft: TRL's SFTTrainer with the kit's token counts
and completion-only loss) on the embedded model, its output in a temporary folder that is removed
afterwards (nothing is saved). Data: an SFT JSONL (SFTSample lines, e.g. a run's
synthesize/sft_agent.jsonl), else the agent samples of the τ² mock domain's gold dialogues
(kit.train.sft_data.gold_sft_samples with the embedded tokenizer); `dialogues` keeps the first N.

Measured (SFTBench), all for one `trainer.train()` of `steps` optimizer steps:
  seconds            wall time of trainer.train() alone: the model load, tokenizing and the trainer's
                     set-up are `load_s`, not in it
  rows, turns        training rows of the data set and the assistant turns (samples) in them: one row
                     per turn, or (whole_dialogues) one per dialogue window
  tokens trained     completion tokens that reached the loss (trainer.tokens_trained)
  tokens seen        non-pad tokens of the rows trained on (trainer.tokens_seen)
  tokens computed    non-pad tokens the forward passes ran: where completion_loss runs a prefix every
                     row of a micro-batch shares once (its shared-prefix path), that prefix counts once.
                     Counted by a forward pre-hook on the model (the input ids and mask each forward
                     call gets), so the loss's code path is untouched
  positions computed the same with padding: every position of every forward call's input
  s per trained token  seconds / tokens trained: the number to compare between revisions
  peak RSS           the process's peak resident memory (ru_maxrss), model load included
The first step pays one-time costs (kernels chosen, allocator warmed): compare runs of the same steps.

This file is also the benchmark's child under `--against` (kit/bench/against.py): loaded by path into
a process whose `kit` is another revision's, so it imports only the standard library at the top and,
from kit, only what revision b7d8fc2 has too (SFTConfig fields filtered by that tree's model_fields).
"""

from __future__ import annotations

import os
import platform
import resource
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

AGENT_SAMPLES = "synthesize/sft_agent.jsonl"  # a run folder's agent SFT data


@dataclass
class SFTBench:
    """One benchmark run's numbers (see the module doc)."""

    settings: dict
    seconds: float
    steps: int
    rows: int
    turns: int
    tokens_trained: int
    tokens_seen: int
    tokens_computed: int | None
    positions_computed: int | None
    forward_calls: int
    peak_rss_gib: float
    load_s: float
    machine: dict = field(default_factory=dict)

    @property
    def s_per_trained_token(self) -> float:
        return self.seconds / self.tokens_trained if self.tokens_trained else 0.0

    def line(self) -> str:
        computed = "—" if self.tokens_computed is None else str(self.tokens_computed)
        return (f"{self.steps} steps in {self.seconds:.2f} s: {self.tokens_trained} tokens trained, "
                f"{self.tokens_seen} seen, {computed} computed; {self.turns} turns in {self.rows} rows; "
                f"{1000 * self.s_per_trained_token:.3f} ms per trained token; peak RSS {self.peak_rss_gib:.2f} GiB")

    def to_json(self) -> dict:
        return {**asdict(self), "s_per_trained_token": self.s_per_trained_token}


def resolve_data(data: str | None) -> str | None:
    """The SFT JSONL that `data` names: the file itself, or a run folder's synthesize/sft_agent.jsonl."""
    if data is None:
        return None
    p = Path(data)
    if p.is_dir():
        p = p / AGENT_SAMPLES
    if not p.is_file():
        from kit.errors import NotFound

        raise NotFound(f"no SFT data at {p}", f"give an SFT JSONL (SFTSample lines) or a run folder with {AGENT_SAMPLES}")
    return str(p.resolve())


def first_dialogues(samples: list, n: int | None) -> list:
    """The samples of the first `n` dialogues (trajectory ids in order of first appearance); all when n is None."""
    if n is None:
        return list(samples)
    keep: list = []
    for s in samples:
        if s.trajectory_id not in keep:
            keep.append(s.trajectory_id)
    keep = set(keep[:n])
    return [s for s in samples if s.trajectory_id in keep]


def gold_samples(dialogues: int | None = None, domain: str = "mock") -> list:
    """The agent samples of the domain's gold dialogues (the first `dialogues` tasks'), with the embedded tokenizer."""
    from transformers import AutoTokenizer

    from kit.envs import load_domain
    from kit.llm import ensure_embedded_model
    from kit.train.sft_data import gold_sft_samples

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_embedded_model()), local_files_only=True)
    dom = load_domain(domain)
    tasks = dom.tasks()
    agent, _ = gold_sft_samples(dom, tasks[:dialogues] if dialogues else tasks, tokenizer)
    return agent


class _ForwardCount:
    """Counts what the model's forward calls get while it trains: non-pad tokens and positions."""

    def __init__(self) -> None:
        self.tokens = self.positions = self.calls = 0

    def __call__(self, module: Any, args: tuple, kwargs: dict) -> None:
        if not module.training:
            return
        ids = kwargs.get("input_ids")
        if ids is None and args:
            ids = args[0]
        if ids is None:  # inputs_embeds: nothing here to count
            return
        mask = kwargs.get("attention_mask")
        self.calls += 1
        self.positions += int(ids.numel())
        # the mask covers a cached prefix too (the shared-prefix path): its last columns are this call's
        self.tokens += int(mask[:, -ids.shape[1]:].sum()) if mask is not None else int(ids.numel())


def _decoder(model: Any) -> Any:
    """The decoder stack inside the causal LM, inside a PEFT / DDP wrapper: the module every forward pass
    calls (PEFT calls the LM's `forward` directly, which no hook on the LM sees)."""
    inner = getattr(model, "module", model)
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    return inner.get_decoder() if hasattr(inner, "get_decoder") else inner


def recipe_params(recipe: str, root: Path) -> dict:
    """The params of one stage of a recipe, `FILE:STAGE_ID` (FILE relative to `root`, the tree whose kit runs:
    under --against each revision reads its own recipe)."""
    import yaml

    path, _, stage = recipe.rpartition(":")
    if not path or not stage:
        raise ValueError(f"--recipe takes FILE:STAGE_ID (the stage's id, e.g. recipes/quickstart-cpu.yaml:<id>), got {recipe!r}")
    f = Path(path) if Path(path).is_absolute() else root / path
    doc = yaml.safe_load(f.read_text(encoding="utf-8"))
    for entry in doc.get("stages") or []:
        if entry.get("id", entry.get("stage")) == stage:
            return {**(doc.get("defaults") or {}), **(entry.get("params") or {})}  # the recipe's defaults under them
    raise ValueError(f"{f} has no stage with id {stage!r}")


# what a recipe's stage params may set in the benchmark (the rest: steps, output, saving, are the benchmark's)
RECIPE_KNOBS = ("batch_size", "grad_accum", "micro_batch_size", "max_seq_len", "lr", "lora", "lora_r", "lora_alpha",
                "whole_dialogues", "gradient_checkpointing", "dtype", "cpu_bf16")


def _bf16_on() -> bool | None:
    """Whether this run's training ran bf16 matmuls (None: a tree without kit.llm.precision)."""
    try:
        from kit.llm import precision
    except ImportError:
        return None
    return precision.enabled()


def bench_sft(data: str | None = None, steps: int = 4, batch_size: int = 4, max_seq_len: int = 4096,
              lora: bool = False, threads: int | None = None, dialogues: int | None = None, seed: int = 0,
              log: Any = None, micro_batch_size: int | None = None, recipe: str | None = None) -> SFTBench:
    """Train `steps` optimizer steps on `data` (an SFT JSONL; None: the mock domain's gold agent samples)
    and return the numbers of the module doc. `dialogues`: only the first N dialogues of the data.
    `recipe` ("FILE:STAGE_ID"): that stage's knobs (RECIPE_KNOBS) replace the arguments, read from the
    recipe file of the tree whose kit runs, so `--against REV` compares each revision as it configures
    its own stage."""
    import torch

    import kit
    from kit.train import sft as S
    from kit.train.sft_data import read_samples

    if threads:
        torch.set_num_threads(threads)
    samples = first_dialogues(read_samples(data), dialogues) if data else gold_samples(dialogues)
    tmp = Path(tempfile.mkdtemp(prefix="kit-bench-sft-"))
    try:
        wanted = {"output_dir": str(tmp / "out"), "train_steps": steps, "batch_size": batch_size,
                  "max_seq_len": max_seq_len, "lora": lora, "save_every": 0, "seed": seed, "report_to": "none"}
        if micro_batch_size:
            wanted["micro_batch_size"] = micro_batch_size
        from_recipe = {}
        if recipe:
            params = recipe_params(recipe, Path(kit.__file__).resolve().parent.parent)
            from_recipe = {k: params[k] for k in RECIPE_KNOBS if k in params}
            wanted.update(from_recipe)
        if from_recipe.get("cpu_bf16"):  # a stage param acting through the environment (kit/llm/precision.py)
            from kit.llm import precision

            os.environ[precision.ENV] = "1"
        known = S.SFTConfig.model_fields
        cfg = S.SFTConfig(**{k: v for k, v in wanted.items() if k in known})
        t0 = time.perf_counter()
        trainer, counts = S.prepare_sft(samples, cfg)
        hook = _ForwardCount()
        handle = _decoder(trainer.model).register_forward_pre_hook(hook, with_kwargs=True)
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - t0
        handle.remove()
        steps_done = int(trainer.state.global_step)
        tokens_trained, tokens_seen = int(trainer.tokens_trained), int(trainer.tokens_seen)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    config = cfg.model_dump(mode="json")
    settings = {"data": data or f"gold:mock ({len(samples)} samples)", "dialogues": dialogues, "steps": steps,
                "batch_size": config.get("batch_size"), "micro_batch_size": config.get("micro_batch_size"),
                "max_seq_len": config.get("max_seq_len"), "lora": config.get("lora"), "threads": threads, "seed": seed,
                "recipe": recipe, "from_recipe": from_recipe,
                "whole_dialogues": config.get("whole_dialogues"),  # None: the tree has no such knob (one row per turn)
                "config_dropped": sorted(set(wanted) - set(known) - {"cpu_bf16"}),
                "cpu_bf16": _bf16_on()}
    machine = {"device": str(trainer.args.device), "torch_threads": torch.get_num_threads(),
               "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
               "python": platform.python_version(), "torch": torch.__version__, "kit": kit.__file__,
               "pid": os.getpid()}
    res = SFTBench(settings, round(seconds, 3), steps_done, rows=int(counts.get("rows", counts["samples"])),
                   turns=int(counts.get("turns", counts["samples"])), tokens_trained=tokens_trained,
                   tokens_seen=tokens_seen, tokens_computed=hook.tokens if hook.calls else None,
                   positions_computed=hook.positions if hook.calls else None, forward_calls=hook.calls,
                   peak_rss_gib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
                   load_s=round(load_s, 2), machine=machine)
    if log is not None:
        log(res.line())
    return res
