"""The self-evolving data engine (paper: "The data engine").

Read in this order: run.py (the loop) → plans.py (meta-planner) → synthesize.py (task
synthesizer) → validate.py (validator, checker) → reflect.py (reflector; its edits, typed, in
edits.py); records.py is what a unit hands on (and why a proposal was rejected), rounds.py the
round statistics (rounds.csv), choice.py how a small model makes valid decisions, store.py how a
killed run resumes. Importing kit.engine loads only the config.
"""

from kit.engine.config import EngineConfig

__all__ = ["Engine", "EngineConfig", "EngineResult", "run_engine"]


def __getattr__(name: str):  # the loop (and tau2) load when first used, not when a config is read
    if name in ("Engine", "EngineResult", "run_engine"):
        from kit.engine import run

        return getattr(run, name)
    raise AttributeError(f"module 'kit.engine' has no attribute {name!r}")
