"""An evaluation's settings (kit.eval.evaluate), in a module of its own so that reading them (the
`evaluate` stage's Config, recipe validation) does not import tau2 or a model.

`EvalKnobs` are what a recipe sets, each declared once (the `evaluate` stage's Config inherits
them); `EvalConfig` adds what the caller resolves (domain, agent and user specs, training data,
output folder).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class EvalKnobs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    split: Optional[str] = Field(default="default", description="τ² split: train / test / base, 'default' "
                                 "(tau2's default set), 'heldout' (the kit's own; 'heldout_val' / 'heldout_test' "
                                 "its fixed validation / test slices; 'heldout_confirm' a separate confirmation "
                                 "slice) or None (all).")
    tasks_file: Optional[str] = Field(default=None, description="JSON list or JSONL of tau2 Task objects; "
                                      "replaces `split`.")
    trials: int = Field(default=1, ge=1, description="Episodes per task (pass^k needs k <= trials; more than one "
                        "needs a sampling temperature).")
    temperature: float = Field(default=0.0, ge=0, validate_default=True, description="Agent sampling temperature "
                               "(the paper evaluates at 0.6; tau2's papers often at 0); above 0 when trials > 1.")
    user_temperature: float = Field(default=0.0, ge=0, description="User simulator sampling temperature.")
    max_new_tokens: int = Field(default=192, ge=1, description="Most tokens per agent turn.")
    user_max_new_tokens: int = Field(default=192, ge=1, description="Most tokens per user turn.")
    max_messages: int = Field(default=50, ge=2, description="Messages per episode (tau2's max_steps; the paper: "
                              "up to 50 orchestrator steps; tau2: 100).")
    max_errors: int = Field(default=10, ge=1, description="Failed tool calls before too_many_errors termination.")
    batch_size: int = Field(default=16, ge=1, description="Episodes advanced together (one batched forward pass "
                            "per turn).")
    limit: Optional[int] = Field(default=None, ge=1, description="First N tasks only.")
    cross_check: bool = Field(default=False, description="Also score every episode with tau2's evaluator and "
                              "report agreement.")
    allow_overlap: bool = Field(default=False, description="Evaluate even when some evaluation tasks' gold "
                                "actions are all in the training data (the report still shows the overlap); "
                                "off: the evaluation fails.")
    protocol: Literal["kit", "tau2"] = Field(default="kit", description="'kit' (kit loop + kit verifier) or "
                                             "'tau2' (tau2's own orchestrator, agent, user simulator and "
                                             "evaluator through litellm; needs openai: specs, see "
                                             "kit.eval.tau2_native).")

    @field_validator("temperature")
    @classmethod
    def _trials_sample(cls, v: float, info: ValidationInfo) -> float:
        # greedy trials are copies of one another: pass^k over them measures nothing new. A config read
        # back from an earlier evaluation's eval.json (context {"recorded": True}) is what ran, not a request.
        trials = info.data.get("trials")
        if isinstance(trials, int) and trials > 1 and v == 0 and not (info.context or {}).get("recorded"):
            raise ValueError(f"trials > 1 at temperature 0 repeats one greedy episode (trials is {trials}); set "
                             "temperature (the paper evaluates at 0.6: temperature: 0.6, user_temperature: 0.6) "
                             "or trials: 1")
        return v


class EvalConfig(EvalKnobs):
    domain: str = Field(description="τ² domain (mock, airline, retail, telecom) or a registered one.")
    model: str = Field(default="embedded", description="Agent: 'embedded', 'hf:PATH', 'openai:URL#MODEL', "
                       "'vllm:PATH' (see kit.llm.make_backend).")
    user_model: str = Field(default="embedded", description="User simulator backend spec, same forms as `model`.")
    seed: int = 0
    training_data: Optional[list[str]] = Field(default=None, description="What the agent trained on "
                                               "(kit.eval.leak): task / rl_tasks / SFT sample files, folders "
                                               "holding them, or 'split:<name>' of this domain. Checked against "
                                               "the evaluation tasks' gold actions.")
    out_dir: Optional[str] = None
