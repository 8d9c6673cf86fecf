"""kit: post-train multi-turn, tool-using agents the AReaL-SEA way.

Read in this order to follow one task from environment to reward:
  kit/envs/      τ² domains as forkable episode environments
  kit/trajectory.py   the message/trajectory records every stage writes
  kit/verify/    the fast verifier (same verdict as tau2's evaluator)
  kit/mutate.py  near-miss trajectories that a verifier must reject
"""

__version__ = "0.1.0"
