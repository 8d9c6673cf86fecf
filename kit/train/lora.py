"""LoRA adapters and gradient checkpointing: the knobs SFT and GRPO share, declared once.

    class SFTKnobs(LoRAKnobs): ...          # kit/train/sft.py
    class GRPOKnobs(LoRAKnobs): ...         # kit/train/grpo_config.py
    model = prepare_for_training(model, cfg)  # GRPO; SFT hands `peft_config(cfg)` to TRL instead

With `lora`, only the adapters train (the base weights stay frozen, the optimizer holds the
adapters' states alone: that is what makes a 30B policy fit, see kit/runner/memory.py); the saved
model is merged (one plain HF folder that every backend loads), and GRPO's server rollouts push
the adapter alone to a vLLM server after each step (kit/train/rollout_server.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoRAKnobs(BaseModel):
    """What is trained, and how activations are kept: full weights or LoRA adapters."""

    model_config = ConfigDict(extra="forbid")

    lora: bool = Field(default=False, description="Train LoRA adapters (PEFT) instead of all weights; they are "
                       "merged into the saved weights.")
    lora_r: int = Field(default=16, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(default=32, ge=1, description="LoRA scaling numerator (the update is scaled by alpha / r).")
    lora_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA branch.")
    lora_target_modules: str | list[str] = Field(default="all-linear", description="Modules that get adapters: a "
                                                 "list of names, or 'all-linear' (every linear layer but the head).")
    gradient_checkpointing: bool = Field(default=False, description="Recompute activations in the backward pass: "
                                         "less memory, ~30% more time (TRL's default is on).")


def target_modules(knobs: LoRAKnobs) -> list[str] | str:
    return ALL_LINEAR if knobs.lora_target_modules == "all-linear" else list(knobs.lora_target_modules)


def peft_config(knobs: LoRAKnobs) -> Any:
    """PEFT's LoraConfig for these knobs (None without `lora`)."""
    if not knobs.lora:
        return None
    from peft import LoraConfig

    return LoraConfig(r=knobs.lora_r, lora_alpha=knobs.lora_alpha, lora_dropout=knobs.lora_dropout,
                      target_modules=knobs.lora_target_modules, task_type="CAUSAL_LM")


def prepare_for_training(model: Any, knobs: LoRAKnobs) -> Any:
    """The model wrapped in LoRA adapters (a PeftModel) when `lora`, with gradient checkpointing on
    when asked (non-reentrant: it works with frozen base weights and with DDP)."""
    if knobs.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if knobs.lora:
        from peft import get_peft_model

        model = get_peft_model(model, peft_config(knobs))
        if knobs.gradient_checkpointing:
            model.enable_input_require_grads()
    return model


def trainable_parameters(model: Any) -> list:
    return [p for p in model.parameters() if p.requires_grad]


def merged_copy_state(model: Any) -> Any:
    """The plain model to save: a PeftModel's adapters merged into a copy of its base weights (the
    training model keeps its adapters); any other model as it is."""
    if not hasattr(model, "merge_and_unload"):
        return model
    import copy

    return copy.deepcopy(model).merge_and_unload()
