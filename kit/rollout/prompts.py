"""System prompts of the two roles, rendered from template files (kit/rollout/templates).

Templates are plain files so a user can read them and the data engine's reflector can
rewrite them; pass `templates_dir` to use another set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

TEMPLATES = Path(__file__).parent / "templates"

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
USER_STOP_SIGNALS = {STOP: "stop", TRANSFER: "transfer", OUT_OF_SCOPE: "out_of_scope"}
FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"  # tau2's default opening


def _template(name: str, templates_dir: Optional[Path]) -> str:
    return ((templates_dir or TEMPLATES) / name).read_text(encoding="utf-8")


def agent_system_prompt(policy: str, templates_dir: Optional[Path] = None) -> str:
    return _template("agent_system.md", templates_dir).format(policy=policy.strip())


def user_system_prompt(task, has_tools: bool, templates_dir: Optional[Path] = None) -> str:
    tool_rules = (
        "- You have tools for your own device. Use them when the agent asks you to check or\n"
        "  change something on it, and tell the agent what you saw.\n"
        if has_tools else ""
    )
    scenario = str(task.user_scenario) if task.user_scenario is not None else ""
    return _template("user_system.md", templates_dir).format(tool_rules=tool_rules, scenario=scenario.strip())
