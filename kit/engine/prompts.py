"""The engine's prompt templates: plain files, one per LLM role and step.

Every role of the engine (meta-planner, synthesizer, validator's judge, reflector) renders
its prompt from kit/engine/templates/<name>.md, so a user can read them and evolution can
change them: a plan's `hints` (written by the reflector) are pasted into the `{hints}` slot
of the synthesizer's templates, and each round's effective prompts are saved under
runs/<id>/prompts/round_<k>/ so `diff -r` shows what evolution changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

TEMPLATES = Path(__file__).parent / "templates"


class Prompts:
    def __init__(self, templates_dir: Optional[str | Path] = None):
        self.dir = Path(templates_dir) if templates_dir else TEMPLATES
        self._cache: dict[str, str] = {}

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.dir.glob("*.md"))

    def text(self, name: str) -> str:
        if name not in self._cache:
            path = self.dir / f"{name}.md"
            if not path.exists():
                raise FileNotFoundError(f"prompt template {path} is missing (templates dir {self.dir})")
            self._cache[name] = path.read_text(encoding="utf-8")
        return self._cache[name]

    def render(self, name: str, **values) -> list[dict]:
        """The template as a one-message chat (the user turn), placeholders filled."""
        hints = values.pop("hints", None) or []
        values["hints"] = "".join(f"Note: {h}\n" for h in hints)
        try:
            content = self.text(name).format(**values)
        except KeyError as e:
            raise KeyError(f"template {self.dir / (name + '.md')} uses {{{e.args[0]}}}, which this step does not fill") from None
        return [{"role": "user", "content": content.strip()}]

    def save(self, out_dir: Path, plans: list) -> None:
        """Snapshot the templates plus every plan's hints (the per-plan prompt edits)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in self.names():
            (out_dir / f"{name}.md").write_text(self.text(name), encoding="utf-8")
        hints = {p.id: p.hints for p in plans}
        (out_dir / "plan_hints.json").write_text(json.dumps(hints, indent=1, ensure_ascii=False), encoding="utf-8")
