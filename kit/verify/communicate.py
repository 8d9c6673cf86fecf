"""COMMUNICATE check: each required fact appears in some assistant text.

Same rule as tau2's CommunicateEvaluator: case-insensitive substring match against the
assistant's message with commas removed ("1,000" in a message matches "1000").
"""

from __future__ import annotations

from kit.trajectory import Message


def check_communicate(infos: list[str], messages: list[Message]) -> list[dict]:
    texts = [m.content.lower().replace(",", "") for m in messages if m.role == "assistant" and m.has_text()]
    return [{"info": info, "met": any(info.lower() in t for t in texts)} for info in infos]
