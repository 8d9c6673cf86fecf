"""Constrained decisions: the model picks among options the environment offers.

A 135M model cannot be trusted to spell an order id; it can be asked *which* of the ids
the environment showed it fits the plan. `Chooser.choose(messages, options)` returns the
index of one option:

  scoring backends (caps.scores: hf) every option is scored by the model's own log-likelihood
                   as the continuation of the prompt (mean log-prob per token,
                   `backend.score_options`), then one is sampled from
                   softmax(score / temperature) — constrained decoding over a finite set, so
                   the answer is always valid.
  other backends   (endpoints, vLLM) the options are numbered in the prompt and the model
                   answers with a number; an unusable answer falls back to a uniform draw,
                   counted in `Chooser.fallbacks`.

`Chooser.write(messages, max_new_tokens)` is free text (titles, scenario prose), cleaned.
Every decision is logged in `Chooser.log` so a proposal can show what the model chose.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any, Optional, Sequence

from kit.llm.types import Backend, SamplingParams


class Chooser:
    def __init__(self, backend: Backend, temperature: float = 1.0, seed: int = 0,
                 text_params: Optional[SamplingParams] = None):
        self.backend = backend
        self.temperature = temperature
        self.rng = random.Random(seed)
        self.seed = seed
        self.calls = 0
        self.fallbacks = 0
        self.log: list[dict] = []
        self.text_params = text_params or SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=48)
        self._scorable = backend.caps.scores

    def reseed(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed

    # ----- choices ---------------------------------------------------------------------------

    def choose(self, messages: list[dict], options: Sequence[str], what: str = "") -> int:
        options = [str(o) for o in options]
        if not options:
            raise ValueError(f"choose({what!r}): no options")
        if len(options) == 1:
            return 0
        self.calls += 1
        if self._scorable:
            scores = self.backend.score_options(messages, options)
            idx = self._sample(scores)
            self.log.append({"what": what, "options": options[:12], "chosen": options[idx],
                             "scores": [round(s, 3) for s in scores[:12]]})
            return idx
        return self._numbered(messages, options, what)

    def probabilities(self, messages: list[dict], options: Sequence[str], what: str = "") -> list[float]:
        """The model's probability of each option (softmax of the scores; no sampling).

        For hf backends these are log-likelihood based; other backends have no scores, so
        the model answers once and the answer gets probability 1."""
        options = [str(o) for o in options]
        self.calls += 1
        if not self._scorable:
            idx = self._numbered(messages, options, what)
            return [1.0 if i == idx else 0.0 for i in range(len(options))]
        scores = self.backend.score_options(messages, options)
        m = max(scores)
        w = [math.exp(s - m) for s in scores]
        probs = [x / sum(w) for x in w]
        self.log.append({"what": what, "options": options[:12], "probs": [round(p, 3) for p in probs[:12]]})
        return probs

    def _sample(self, scores: list[float]) -> int:
        if self.temperature <= 0:
            return max(range(len(scores)), key=scores.__getitem__)
        m = max(scores)
        weights = [math.exp((s - m) / self.temperature) for s in scores]
        return self.rng.choices(range(len(scores)), weights=weights)[0]

    def _numbered(self, messages: list[dict], options: list[str], what: str) -> int:
        listing = "\n".join(f"{i + 1}. {o}" for i, o in enumerate(options))
        msgs = list(messages[:-1]) + [{
            "role": messages[-1]["role"],
            "content": f"{messages[-1]['content']}\n\nOptions:\n{listing}\n\nAnswer with the number of one option only.",
        }]
        comp = self.backend.chat(msgs, params=SamplingParams(temperature=self.temperature, max_new_tokens=6,
                                                            seed=self.rng.randrange(1 << 30)))[0]
        m = re.search(r"\d+", comp.text or comp.raw or "")
        idx = int(m.group()) - 1 if m else -1
        if not 0 <= idx < len(options):
            self.fallbacks += 1
            idx = self.rng.randrange(len(options))
        self.log.append({"what": what, "options": options[:12], "chosen": options[idx], "answer": comp.raw[:40]})
        return idx

    # ----- free text -------------------------------------------------------------------------

    def write(self, messages: list[dict], max_new_tokens: Optional[int] = None, what: str = "",
              one_line: bool = False) -> str:
        self.calls += 1
        p = self.text_params.model_copy(update={"seed": self.rng.randrange(1 << 30),
                                                **({"max_new_tokens": max_new_tokens} if max_new_tokens else {})})
        comp = self.backend.chat(messages, params=p)[0]
        text = clean_text(comp.text or "", one_line=one_line)
        self.log.append({"what": what, "text": text[:200]})
        return text


_LEAD_IN = re.compile(
    r"""^\s*(?:the\s+)?(?:value|title|name|text)\s+(?:of\s+)?(?:the\s+)?(?:["'`]?\w+["'`]?\s+)?"""
    r"""(?:(?:of\s+the\s+)?task\s+)?(?:is|should\s+be|would\s+be|will\s+be|=|:)\s*""", re.I)


def strip_lead_in(value: str) -> str:
    """'The value of "title" is "Quarterly budget' -> 'Quarterly budget' (a 135M model often answers
    with the question's own words around the value)."""
    out = _LEAD_IN.sub("", value or "", count=1)
    return out.strip(" \"'`*.,:;")


def clean_text(text: str, one_line: bool = False) -> str:
    """Strip chat debris: tool-call tags, quotes, markdown, trailing half sentences."""
    text = re.sub(r"<tool_call>.*?(</tool_call>|$)", "", text, flags=re.S)
    text = text.replace("###STOP###", "").strip()
    if one_line:
        text = next((ln for ln in text.splitlines() if ln.strip()), "")
        text = re.sub(r"^[\w ]{1,20}:\s*", "", text.strip())  # "Title: ..." -> "..."
        text = re.split(r"(?<=[a-z0-9])[.!?;](\s|$)", text)[0]  # first sentence
        text = " ".join(text.split()[:8])  # a value, not a paragraph
        return strip_lead_in(text.strip(" \"'*`.#-,"))
    text = re.sub(r"\s+", " ", text).strip(" \"'*`#")
    if len(text) > 400:
        text = text[:400]
    cut = max(text.rfind("."), text.rfind("!"), text.rfind("?"))
    if cut > 40:
        text = text[:cut + 1]
    return text


def option_text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)
