"""Where a stage's data comes from, parsed once from the text a recipe, a CLI flag or a notebook
parameter holds, then passed typed:

    '@<stage id>'    StageRef   another stage's output (the runner replaces it by that stage's folder;
                                a model stage's `model/`)
    '@<id>/<folder>' StageRef   one of the model folders a stage declares (kit/stages/contract.py
                                Contract.models: GRPO's `@grpo/model_best`)
    'split:<name>'   SplitRef   a task split of the domain ('all': every task)
    'gold'           GoldRef    the domain's gold dialogues (the SFT stages' fallback data)
    anything else    PathRef    a file or a folder

    src = parse_source("split:train")      # SplitRef(name="train"); src.text() == "split:train"
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict


class _Source(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __str__(self) -> str:
        return self.text()


class StageRef(_Source):
    kind: Literal["stage"] = "stage"
    id: str
    output: Optional[str] = None  # a model folder of the stage other than its `model/`

    def text(self) -> str:
        return f"@{self.id}" + (f"/{self.output}" if self.output else "")


class SplitRef(_Source):
    kind: Literal["split"] = "split"
    name: str

    def text(self) -> str:
        return f"split:{self.name}"


class GoldRef(_Source):
    kind: Literal["gold"] = "gold"

    def text(self) -> str:
        return "gold"


class PathRef(_Source):
    kind: Literal["path"] = "path"
    path: str

    def text(self) -> str:
        return self.path

    def exists(self) -> bool:
        """False also where the OS cannot look the path up (a name longer than it allows: OSError)."""
        try:
            return Path(self.path).expanduser().exists()
        except OSError:
            return False

    def is_dir(self) -> bool:
        try:
            return Path(self.path).expanduser().is_dir()
        except OSError:
            return False


Source = Union[StageRef, SplitRef, GoldRef, PathRef]


def parse_source(text: str | Path | Source) -> Source:
    """The typed source a text stands for (a Source passes through)."""
    if isinstance(text, _Source):
        return text
    s = str(text)
    if s.startswith("@"):
        sid, _, output = s[1:].partition("/")
        return StageRef(id=sid, output=output or None)
    if s.startswith("split:"):
        return SplitRef(name=s[len("split:"):])
    if s == "gold":
        return GoldRef()
    return PathRef(path=s)
