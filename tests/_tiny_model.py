"""A small random-weight Llama with the embedded model's tokenizer and chat template, saved as an HF folder,
for the tests about plumbing (servers, launches, weight sync, run folders) rather than about a model: the
same prompts, tool-call format and token ids as SmolLM2-135M at a fraction of its cost. The tests that
claim something of the embedded model itself (its episodes, SFT lowering its loss, GRPO raising its
reward) keep the embedded model."""

from __future__ import annotations

from pathlib import Path


def tiny_model_folder(path: Path, seed: int = 0) -> Path:
    """Its generation config keeps it talking: random weights often end a reply at its first token or
    write only newlines, and tau2's orchestrator stops an episode whose message is empty once stripped (a
    ValueError, as in `tau2 run`); with the special and the whitespace-only tokens suppressed, a served
    reply is `max_new_tokens` of visible text unless a request sets max_tokens."""
    from test_grpo_learning import tiny_llama
    from transformers import AutoTokenizer, GenerationConfig

    from kit.llm import ensure_embedded_model

    tok = AutoTokenizer.from_pretrained(ensure_embedded_model())
    model = tiny_llama(tok, seed=seed)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        suppress_tokens=sorted(set(tok.all_special_ids) | {i for i in range(len(tok)) if not tok.decode([i]).strip()}),
        max_new_tokens=24)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
