"""What a backend can do beyond `generate_batch`, declared once per backend class.

Callers read `backend.caps` instead of probing attributes (`hasattr(backend, "model")`): a
capability is a promise that the methods or fields it names exist and work.

    if chooser.backend.caps.scores:
        scores = backend.score_options(messages, options)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """Each field says one thing a caller may rely on; the defaults suit a plain remote backend."""

    parallel: bool = True
    """Calls from several threads at once are fine (HTTP clients, scripted backends). False for a
    model in this process that runs one forward pass at a time."""
    tokenizer: bool = False
    """`backend.tokenizer` is the tokenizer the backend renders and encodes prompts with."""
    scores: bool = False
    """`backend.score_options(messages, options)` gives each option's mean log-probability as the
    continuation of the conversation."""
    token_ids: bool = False
    """Completions carry `token_ids`: the ids the model sampled (with the end-of-turn id)."""
    logprobs: bool = False
    """Completions carry `logprobs`: the log-probability the backend reports for each of their
    `token_ids`."""
    stats: bool = False
    """`backend.stats` accounts for generation time (kit.llm.fast.generate.GenStats: `summary()`)."""
