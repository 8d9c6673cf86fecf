"""The self-evolving data engine (paper: "The data engine").

Read in this order: run.py (the loop) → plans.py (meta-planner) → synthesize.py (task
synthesizer) → validate.py (validator, checker) → reflect.py (reflector); choice.py is how
a small model makes valid decisions, store.py how a killed run resumes.
"""

from kit.engine.config import EngineConfig
from kit.engine.run import Engine, EngineResult, run_engine

__all__ = ["Engine", "EngineConfig", "EngineResult", "run_engine"]
