"""An evaluation's settings (kit.eval.evaluate), in a module of its own so that reading them (the
`evaluate` stage's Config, recipe validation) does not import tau2 or a model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class EvalConfig:
    domain: str
    """τ² domain (mock, airline, retail, telecom) or a registered one."""
    model: str = "embedded"
    """Agent: 'embedded', 'hf:PATH', 'openai:URL#MODEL', 'vllm:PATH' (see kit.llm.make_backend)."""
    user_model: str = "embedded"
    """User simulator backend spec, same forms as `model`."""
    split: Optional[str] = "default"
    """τ² split: train / test / base, 'default' (tau2's default set) or None (all)."""
    tasks_file: Optional[str] = None
    """JSON list or JSONL of tau2 Task objects; replaces `split`."""
    trials: int = 4
    """Episodes per task (pass^k needs k <= trials)."""
    temperature: float = 0.0
    """Agent sampling temperature (the paper evaluates at 0.6; tau2's papers often at 0)."""
    user_temperature: float = 0.0
    max_new_tokens: int = 192
    """Most tokens per agent turn."""
    user_max_new_tokens: int = 192
    """Most tokens per user turn."""
    max_messages: int = 50
    """Messages per episode (tau2's max_steps)."""
    max_errors: int = 10
    seed: int = 0
    batch_size: int = 16
    """Episodes advanced together (one batched forward pass per turn)."""
    limit: Optional[int] = None
    """First N tasks only."""
    cross_check: bool = False
    """Also score every episode with tau2's evaluator and report agreement."""
    training_data: Optional[list[str]] = None
    """What the agent trained on (kit.eval.leak): task / rl_tasks / SFT sample files, folders holding
    them, or 'split:<name>' of this domain. Checked against the evaluation tasks' gold actions."""
    allow_overlap: bool = False
    """Evaluate even when some evaluation tasks' gold actions are all in the training data."""
    out_dir: Optional[str] = None
    protocol: str = "kit"
    """'kit' (kit loop + kit verifier) or 'tau2' (tau2's own orchestrator, agent, user simulator and
    evaluator through litellm; needs openai: specs, see kit.eval.tau2_native)."""
