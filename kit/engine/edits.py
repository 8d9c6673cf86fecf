"""The reflector's edits to a plan (kit/engine/reflect.py), typed: one model per kind.

    Keep()                              nothing to fix
    Simplify()                          multi_change -> one write
    Harder()                            one write -> two writes
    SwitchTools(tools=["a", "b"])       another tool pattern of the domain
    Persona(persona="a polite ...")     another simulated user
    Hint(line="Mention every id ...")   a line added to the plan's synthesizer prompts

`text()` is what the reflector's constrained choice shows the model and what people read
("switch:a>b", "hint:..."); a plan's history stores the model's JSON ({"kind": "switch", "tools":
[...]}). `parse_edit` reads either, so plans/round_<k>.json of older runs, whose history holds the
text, load into the typed form (parsed there once).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Edit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def text(self) -> str:
        return self.kind  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return self.text()


class Keep(_Edit):
    kind: Literal["keep"] = "keep"


class Simplify(_Edit):
    kind: Literal["simplify"] = "simplify"


class Harder(_Edit):
    kind: Literal["harder"] = "harder"


class SwitchTools(_Edit):
    kind: Literal["switch"] = "switch"
    tools: tuple[str, ...]  # the tool pattern to switch to, in order

    def text(self) -> str:
        return "switch:" + ">".join(self.tools)


class Persona(_Edit):
    kind: Literal["persona"] = "persona"
    persona: str

    def text(self) -> str:
        return "persona:" + self.persona


class Hint(_Edit):
    kind: Literal["hint"] = "hint"
    line: str

    def text(self) -> str:
        return "hint:" + self.line


Edit = Annotated[Union[Keep, Simplify, Harder, SwitchTools, Persona, Hint], Field(discriminator="kind")]
_EDIT: TypeAdapter = TypeAdapter(Edit)


def parse_edit(value: Union[str, dict, _Edit]) -> Edit:
    """An edit from its JSON (this kit) or its text (older runs: "switch:a>b", "persona:...")."""
    if isinstance(value, _Edit):
        return value
    if isinstance(value, dict):
        return _EDIT.validate_python(value)
    kind, sep, arg = str(value).partition(":")
    if kind == "switch" and sep:
        return SwitchTools(tools=tuple(arg.split(">")))
    if kind == "persona" and sep:
        return Persona(persona=arg)
    if kind == "hint" and sep:
        return Hint(line=arg)
    if not sep and kind in ("keep", "simplify", "harder"):
        return _EDIT.validate_python({"kind": kind})
    raise ValueError(f"not a reflector edit: {value!r}")
