"""Multi-turn rollouts: assistant ⇄ user simulator ⇄ environment (kit/rollout/loop.py)."""

from kit.rollout.loop import RolloutConfig, run_episodes
from kit.rollout.scripted import ScriptedAgent, ScriptedUser

__all__ = ["RolloutConfig", "run_episodes", "ScriptedAgent", "ScriptedUser"]
