"""Verification of τ² tasks: `verify` (kit, fast) and `tau2_verdict` (the referee)."""

from kit.verify.reference import same_verdict, tau2_verdict
from kit.verify.verifier import Verdict, verify

__all__ = ["Verdict", "verify", "tau2_verdict", "same_verdict"]
