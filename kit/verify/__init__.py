"""Verification of τ² tasks: `verify` (kit, fast) and `tau2_verdict` (the referee).

The referee imports tau2's evaluator, and with it litellm (seconds of startup): it loads on first use.
"""

from kit.verify.verifier import Verdict, verify

__all__ = ["Verdict", "verify", "tau2_verdict", "same_verdict"]


def __getattr__(name: str):
    if name in ("tau2_verdict", "same_verdict"):
        from kit.verify import reference

        return getattr(reference, name)
    raise AttributeError(name)
