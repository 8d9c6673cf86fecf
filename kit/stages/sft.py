"""Stages `sft_user` and `sft_agent`: supervised fine-tuning of the user simulator or the agent
(kit.train.sft.run_sft: TRL's SFTTrainer, full weights or LoRA, completion-only loss) on the
engine's sft_user.jsonl / sft_agent.jsonl.

The paper fine-tunes the user simulator on the same dialogues so that it follows its scenario and
uses its own tools correctly; GRPO then trains the agent against that user. The agent learns every
assistant turn of the accepted dialogues.

If the engine produced no samples for the role (a 135M model accepts few tasks), the stage trains
on the gold dialogues of the domain's tasks (kit.train.sft_data.gold_sft_samples) and says so
loudly: in the notebook, stage.json, the run manifest and the report (`fallback: fail` stops
instead). Every sample passes the grounding check (kit/grounding.py) inside run_sft; the dropped
ones are counted.

Output: model/, a plain HF folder (merged weights + tokenizer, loss_curve.json, sft_metrics.json),
and sft_<role>.train.jsonl, the samples it trained on. While it trains, checkpoints/ holds
transformers' checkpoint every `save_every` steps: a rerun after a crash resumes from the newest one
of the same fingerprint (kit.train.sft.run_sft); it is removed once model/ is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import Field

from kit import metrics as M
from kit.stages.base import ModelStageConfig, StageOutputs, mechanism_kwargs
from kit.stages.contract import (
    BASE_MODEL,
    Contract,
    MemoryUse,
    Problem,
    Produces,
    Reference,
    ReportPart,
    SectionContext,
)
from kit.train.sft import SFTConfig, SFTKnobs


class Config(ModelStageConfig, SFTKnobs):
    """What the SFT stages take: the data, the start model; every training knob is
    kit.train.sft.SFTKnobs' (declared there once, inherited here)."""

    data: Optional[str] = Field(default=None, description="'@<synthesize stage>', a folder with sft_*.jsonl, "
                                "or 'gold' (the domain's gold dialogues only). None: the latest synthesize stage.")
    model: Optional[str] = Field(default=None, description="HF folder (or 'embedded') to start from. "
                                 "None: the recipe's base_model.")
    fallback: Literal["gold", "fail"] = Field(default="gold", description="No engine samples: train on the "
                                              "domain's gold dialogues (said loudly) or fail the stage.")
    gold_split: Optional[str] = Field(default="train", description="Split whose gold dialogues the fallback "
                                      "uses; a domain without it (mock) uses its default set (flagged).")
    gold_limit: Optional[int] = Field(default=None, ge=1, description="Use at most this many gold tasks.")
    max_samples: Optional[int] = Field(default=None, ge=1, description="Use at most this many samples.")
    max_tasks: Optional[int] = Field(default=None, ge=1, description="Engine data: the samples of at most this "
                                     "many tasks, the first in the data's order (arms compared at the same task "
                                     "count).")
    validated_only: bool = Field(default=False, description="Engine data: only the samples its validation keeps "
                                 "(each sample's meta `validated`): the full engine's SFT data out of an engine run "
                                 "with `validation: false`, so both arms of the no_validation ablation train on the "
                                 "same run's tasks and rollouts. Samples without the mark (engine runs before "
                                 "2026-12-06) are an error.")


class Outputs(StageOutputs):
    data_source: str = Field(description="'engine', 'gold' (by choice) or 'gold-fallback' (no engine samples).")
    samples: int = Field(description="Samples trained on.")
    steps: int = Field(description="Optimizer steps run.")
    first_loss: Optional[float] = None
    final_loss: Optional[float] = None
    tokens_trained: Optional[int] = Field(default=None, description="Tokens that reached the loss.")
    wall_time_s: Optional[float] = Field(default=None, description="Training wall time (of the last attempt).")
    resumed_from: int = Field(default=0, description="Step of the checkpoint a crashed attempt left, resumed "
                              "from (0: trained in one go).")

    def loss_curve(self) -> list:
        """[(optimizer step, loss)] as logged."""
        from kit.files import read_json

        return read_json(self.files["loss_curve"]) or []


def first_tasks(samples: list, n: int) -> list:
    """The samples of the first `n` distinct tasks, in the order the samples come."""
    keep = set(list(dict.fromkeys(s.task_id for s in samples))[:n])
    return [s for s in samples if s.task_id in keep]


def validated(samples: list, where: Path) -> list:
    """The samples the engine's validation keeps (meta `validated`, kit/engine/run.py `_sft`)."""
    unmarked = sum("validated" not in s.meta for s in samples)
    if unmarked:
        raise ValueError(f"validated_only: {unmarked} of {len(samples)} samples in {where} carry no `validated` mark "
                         "(an engine run older than the mark): rerun that synthesize stage, or set validated_only "
                         "false")
    return [s for s in samples if s.meta["validated"]]


def training_samples(config: Config, role: str, st) -> tuple[list, str]:
    """(samples, where they came from): the engine's sft_<role>.jsonl, else the gold dialogues."""
    from transformers import AutoTokenizer

    from kit.envs import load_domain
    from kit.llm.spec import ModelSpec
    from kit.runner.stage import split_tasks
    from kit.train.sft_data import gold_sft_samples, read_samples

    source = config.data or "gold"
    samples, data_source = [], "gold"
    if source != "gold":
        engine_file = Path(source) / f"sft_{role}.jsonl"
        samples = read_samples(engine_file) if engine_file.exists() else []
        data_source = "engine"
        print(f"{len(samples)} {role} samples from the engine ({engine_file})")
        if config.validated_only and samples:
            samples = validated(samples, engine_file)
            print(f"validated_only: {len(samples)} samples that the engine's validation keeps")
        if config.max_tasks and samples:
            samples = first_tasks(samples, config.max_tasks)
            print(f"max_tasks {config.max_tasks}: {len(samples)} samples of "
                  f"{len({s.task_id for s in samples})} tasks kept")
    if not samples:
        if source != "gold" and config.fallback == "fail":
            raise RuntimeError(f"the engine produced no {role} SFT samples in {source} and fallback is 'fail'")
        dom = load_domain(config.domain)
        tasks, used_split = split_tasks(dom, config.gold_split, st, f"the gold {role} SFT data")
        tasks = tasks[: config.gold_limit or None]
        start = ModelSpec.parse(config.model or "embedded", folder_kind="hf").folder()
        tokenizer = AutoTokenizer.from_pretrained(start)
        agent_samples, user_samples = gold_sft_samples(dom, tasks, tokenizer)
        samples = agent_samples if role == "agent" else user_samples
        if source == "gold":
            print(f"data: gold dialogues by choice: {len(samples)} {role} samples from {len(tasks)} tasks")
        else:
            data_source = "gold-fallback"
            st.warn(f"NO ENGINE DATA: the engine produced no {role} SFT samples ({source}); this SFT trains on "
                    f"{len(samples)} GOLD {role} samples from {len(tasks)} tasks ({used_split}) of "
                    f"{config.domain} instead")
    return samples[: config.max_samples or None], data_source


def run(config: Config, st, role: Optional[str] = None) -> Outputs:
    """Train the `role` model ('user' or 'agent'; default: from the stage name) into model/."""
    from kit.llm.spec import ModelSpec
    from kit.train.sft import run_sft
    from kit.train.sft_data import write_samples

    role = role or st.stage.removeprefix("sft_")
    if role not in ("user", "agent"):
        raise ValueError(f"SFT role must be 'user' or 'agent', not {role!r}")
    samples, data_source = training_samples(config, role, st)
    if getattr(st, "is_main", True):  # under accelerate launch every process reads the same samples
        write_samples(samples, st.out_dir / f"sft_{role}.train.jsonl")
    if samples and getattr(st, "is_main", True):
        print("...", samples[0].prompt[-600:], "\n---- completion (what the loss covers) ----\n",
              samples[0].completion)
    cfg = SFTConfig(**mechanism_kwargs(
        config, SFTConfig, model_path=ModelSpec.parse(config.model or "embedded", folder_kind="hf").folder(),
        output_dir=str(st.out_dir / "model"), report_to="none", run_name=f"{st.run_id}/{st.key}",
        checkpoint_dir=str(st.out_dir / "checkpoints"), checkpoint_tag=st.checkpoint_tag))
    metrics = run_sft(samples, cfg)
    for step, loss in metrics["loss_curve"]:
        st.log(f"sft_{role}", {M.SFT_LOSS: loss}, step=step)
    return Outputs(files={"model": str(st.out_dir / "model"),
                          "loss_curve": str(st.out_dir / "model" / "loss_curve.json")},
                   data_source=data_source, samples=metrics["samples"], steps=metrics["steps"],
                   first_loss=metrics["first_loss"], final_loss=metrics["final_loss"],
                   tokens_trained=metrics.get("tokens_trained"), wall_time_s=metrics.get("wall_time_s"),
                   resumed_from=metrics.get("resumed_from", 0))


# ----- the contract (kit/stages/contract.py) ------------------------------------------------------


def check(ps, plan: list, budgets: bool) -> list[Problem]:
    """`data` is a reference, 'gold' or a folder that exists."""
    from kit.sources import PathRef, SplitRef, parse_source

    src = parse_source(ps.params["data"]) if isinstance(ps.params.get("data"), str) else None
    if isinstance(src, SplitRef) or (isinstance(src, PathRef) and not src.is_dir()):
        return [("data", f"'{src}' is neither '@<stage id>', 'gold' nor an existing folder")]
    return []


def memory(p: dict, context: int) -> MemoryUse:
    """batch_size rows of max_seq_len tokens per forward pass."""
    return MemoryUse(rows=p.get("batch_size", 4), length=p.get("max_seq_len", 4096),
                     checkpointing=p.get("gradient_checkpointing"),
                     field="lora" if not p.get("lora", False) else "max_seq_len")


def report_entry(common: dict, out: Outputs, stage: str) -> dict:
    return {**common, "role": stage.removeprefix("sft_"), "curve": out.loss_curve(), "outputs": out}


def report_sections(data: dict, ctx: SectionContext) -> list:
    from kit.report.build import sft_section

    return [sft_section(data, ctx.out, ctx.figures, ctx.root)]


def provenance(info: dict, folder: Path):
    """The report's words for a model folder this stage wrote: its steps (flagged when none ran)."""
    from kit.report.run_data import AgentProvenance

    stage, sid, steps = info.get("stage"), info.get("id"), (info.get("summary") or {}).get("steps") or 0
    return AgentProvenance(f"SFT: {steps} steps ({sid})", stage, sid, None if steps else "SFT ran no step")


CONTRACT = Contract(
    names=("sft_user", "sft_agent"), produces=Produces.MODEL, launchable=True, training_data=True,
    references={"data": Reference(Produces.DATA, wire_from=("synthesize",), fallback="gold"),
                "model": Reference(Produces.MODEL, fallback=BASE_MODEL)},
    check=check, memory=memory, report=ReportPart(bucket="sft_runs", read=report_entry, sections=report_sections, rank=2),
    provenance=provenance)
