"""Multi-turn rollouts: assistant ⇄ user simulator ⇄ environment (kit/rollout/loop.py)."""

from kit.rollout.loop import RolloutConfig, min_episode_steps, run_episodes, step_budget_warning
from kit.rollout.scripted import ScriptedAgent, ScriptedUser

__all__ = ["RolloutConfig", "run_episodes", "min_episode_steps", "step_budget_warning", "ScriptedAgent", "ScriptedUser"]
