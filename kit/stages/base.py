"""What every stage shares: the base of its `Config`, the base of its `Outputs`, and the one place a
stage's config becomes a mechanism's config (`mechanism_kwargs`).

A stage's Config subclasses its mechanism's Knobs (kit.engine.config.EngineKnobs,
kit.train.sft.SFTKnobs, kit.train.grpo_config.GRPOKnobs, kit.eval.config.EvalKnobs): every knob
is declared once, there, with its default, bounds and description.

A stage's `Config` is what a recipe's `params:`, the stage notebook's parameters cell and the
matching `kit` command set, under the same names. Every model forbids unknown fields, so a
misspelt parameter is an error, never a silent default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class StageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, description="Seed of everything random in the stage.")
    threads: Optional[int] = Field(default=None, ge=1, description="torch CPU threads (None: torch's default).")


class ModelStageConfig(StageConfig):
    domain: str = Field(description="τ² domain (mock, airline, retail, telecom) or a registered kit domain.")
    backend: Literal["hf", "vllm"] = Field(default="hf", description="How a model *folder* is served for "
                                           "sampling: 'hf' (transformers) or 'vllm' (GPU offline engine).")
    kv_cache_gib: Optional[float] = Field(default=None, gt=0, description="Most GiB of key/value states each "
                                          "transformers sampler keeps to reuse prompt prefixes across turns (None: 4 "
                                          "on CPU, a tenth of the GPU's memory). A stage samples with up to two (agent "
                                          "and user): lower it where peak memory counts more than prefill time.")
    cpu_bf16: bool = Field(default=False, description="bfloat16 matmuls on a CPU with bf16 instructions (AVX512-BF16, "
                           "AMX; kit.llm.precision): training under autocast with float32 weights, sampling on bf16 "
                           "packed weights. ~1.7x faster training on such a CPU; results carry bf16 rounding. "
                           "Ignored (float32, said in the log) on other CPUs and on GPUs.")


class StageOutputs(BaseModel):
    """What a stage produced: `files` (name -> path, each checked to exist when the stage finishes)
    and the stage's numbers (the other fields), written to stage.json's `outputs` and `summary`."""

    model_config = ConfigDict(extra="forbid")

    files: dict[str, str] = Field(default_factory=dict, description="Output name -> path.")

    def summary(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"files"})

    @classmethod
    def from_stage_json(cls, info: dict) -> "StageOutputs":
        """The same model read back from a stage.json this class wrote."""
        return cls.model_validate({**(info.get("summary") or {}), "files": info.get("outputs") or {}})


def mechanism_kwargs(config: BaseModel, mechanism: type[BaseModel], **runtime: Any) -> dict[str, Any]:
    """Keyword arguments of `mechanism` (EngineConfig, SFTConfig, GRPOConfig, EvalConfig) from a
    stage config: every field the two share (the knobs the stage Config inherits from the
    mechanism's Knobs class, and `seed`), then `runtime` (values the stage resolves itself:
    folders, backend specs) on top. The only place a stage config becomes a mechanism config."""
    names = set(mechanism.model_fields)
    unknown = set(runtime) - names
    if unknown:
        raise TypeError(f"{mechanism.__name__} has no field(s) {sorted(unknown)}")
    return {**config.model_dump(include=names & set(type(config).model_fields)), **runtime}


def count_lines(path: Path) -> int:
    """Non-empty lines of a JSONL file (0 when it does not exist)."""
    if not path.exists():
        return 0
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


# ----- the `kit` command's flags, derived from the same Configs -----------------------------------


def add_config_arguments(parser: Any, config: type[BaseModel], skip: tuple[str, ...] = ()) -> None:
    """One `--flag-name` per Config field (bools: --x / --no-x; lists: several values), default
    None so that an unset flag leaves the Config's own default; pydantic converts the strings."""
    import argparse
    import typing

    for name, f in config.model_fields.items():
        if name in skip:
            continue
        flag = "--" + name.replace("_", "-")
        shown = "required" if f.is_required() else f"default: {f.default!r}"
        help_text = f"{f.description or ''} ({shown})".strip()
        args = typing.get_args(f.annotation)
        kinds = {f.annotation, *args}
        if bool in kinds and not any(k in kinds for k in (str, int, float)):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif any(typing.get_origin(k) is list for k in kinds):
            parser.add_argument(flag, nargs="*", default=None, help=help_text)
        elif typing.get_origin(f.annotation) is typing.Literal:
            parser.add_argument(flag, choices=[str(a) for a in args], default=None, help=help_text)
        else:
            parser.add_argument(flag, default=None, required=f.is_required(), help=help_text)


def config_from_args(config: type[BaseModel], args: Any, **fixed: Any) -> Any:
    """The Config from parsed flags (unset ones keep their defaults), `fixed` values on top; bad
    values are one kit.errors.BadInput naming each bad flag."""
    from pydantic import ValidationError

    from kit.errors import BadInput

    given = {name: getattr(args, name) for name in config.model_fields
             if getattr(args, name, None) is not None}
    try:
        return config.model_validate({**given, **fixed})
    except ValidationError as e:
        bad = [f"--{str(err['loc'][0]).replace('_', '-') if err.get('loc') else '?'}: "
               f"{err['msg'].removeprefix('Value error, ')} "
               f"(got {err.get('input')!r})" for err in e.errors()]
        raise BadInput("invalid value" + ("s" if len(bad) > 1 else "") + ":\n  " + "\n  ".join(bad),
                       "`kit <command> --help` lists each flag with its default") from None
