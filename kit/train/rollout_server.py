"""GRPO rollouts served by an OpenAI-compatible server whose weights follow the trainer.

    policy = ServerPolicy(cfg, tool_mode="native", accelerator=acc, sync_dir="runs/<id>/grpo/sync")
    trajs = run_episodes(domain, tasks, policy.backend, user, rc)   # sampled by the server
    ... optimizer step ...
    policy.push(trained_model, tokenizer, step)                     # the server samples the new policy

The server (vLLM: `make vllm-serve`, its own environment) serves the starting policy. After each
optimizer step the main process writes the new weights where the server can read them and tells
it to use them; every later request names them (`model`), so no rollout ever mixes two policies:
- `lora_adapter` (GRPO with `lora`): the adapter alone (a few MB to a few hundred) goes to
  `sync_dir/step-N/` and is loaded with vLLM's `POST /v1/load_lora_adapter` (the server runs
  with `--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`); the previous one is unloaded.
- `folder`: the whole model (adapters merged) goes to `sync_dir/step-N/` and is requested by its
  path: for servers that load a model by name on request (`transformers serve`, which the CPU
  test uses). The folder before the previous one is deleted. For full-weight GRPO on vLLM, NCCL
  weight transfer (vLLM's weight-transfer API) would avoid the disk: not done here.

Token ids and log-probs come from the server's response (`server_token_ids`: vLLM's
`logprobs` + `return_tokens_as_token_ids`), so the loss scores exactly the sampled tokens, and the
server's log-probs are the behaviour policy's in the PPO ratio (kit.train.sequences.sampler_logprobs).
vLLM reports log-probs before temperature unless served with `--logprobs-mode processed_logprobs`:
at the paper's rollout temperature 1.0 the two are the same.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from kit.errors import BadInput


def sync_mode(cfg: Any) -> str:
    """'lora_adapter' or 'folder' for a GRPOConfig (its `weight_sync`, resolved)."""
    mode = cfg.weight_sync
    if mode == "auto":
        mode = "lora_adapter" if cfg.lora else "folder"
    if mode == "lora_adapter" and not cfg.lora:
        raise BadInput("grpo: weight_sync 'lora_adapter' needs lora: true (only adapters can be pushed that way)",
                       "set lora: true, or weight_sync: folder for a server that loads models by path")
    return mode


class ServerPolicy:
    """The policy as seen by rollouts: an OpenAIBackend on `cfg.rollout_server`, plus `push`."""

    def __init__(self, cfg: Any, tool_mode: str, accelerator: Any, sync_dir: str | Path):
        from kit.llm.openai_backend import OpenAIBackend

        if not cfg.rollout_server:
            raise BadInput("grpo: rollout 'server' needs rollout_server (the server's URL with /v1)",
                           "start one with `make vllm-serve MODEL=<policy folder>` and give its URL, "
                           "or use rollout: local")
        self.mode = sync_mode(cfg)
        self.acc = accelerator
        self.sync_dir = Path(sync_dir).resolve()
        extra = {"logprobs": True, "return_tokens_as_token_ids": True} if cfg.server_token_ids else {}
        self.backend = OpenAIBackend(cfg.rollout_server, cfg.rollout_server_model, tool_mode=tool_mode,
                                     extra_body=extra)
        self.url = self.backend.base_url
        self.loaded: list[str] = []  # adapters loaded by us, oldest first

    def _post(self, path: str, body: dict) -> str:
        import httpx

        from kit.llm.openai_backend import EndpointError, bearer

        url = f"{self.url}{path}"
        try:  # vLLM guards /v1/load_lora_adapter with the server's API key, when it has one
            r = httpx.post(url, json=body, timeout=600, headers=bearer(self.backend.api_key))
        except httpx.HTTPError as exc:
            raise EndpointError(f"rollout server {url}: {type(exc).__name__}: {exc}", url=self.url,
                                unreachable=isinstance(exc, httpx.TransportError)) from None
        if r.status_code >= 400:
            raise EndpointError(f"rollout server {url} refused {body}: HTTP {r.status_code}: {r.text[:500]}",
                                "vLLM needs --enable-lora (and --max-lora-rank >= lora_r) and "
                                "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True to load adapters at run time", url=self.url)
        return r.text

    def push(self, model: Any, tokenizer: Any, step: int) -> str:
        """Write the trained weights for step `step` and make the server sample them; returns the
        name later requests use. Collective under accelerate: every process calls it."""
        from kit.train.lora import merged_copy_state

        path = self.sync_dir / f"step-{step}"
        name = f"kit-policy-step-{step}" if self.mode == "lora_adapter" else str(path)
        if self.acc.is_main_process:
            path.mkdir(parents=True, exist_ok=True)
            if self.mode == "lora_adapter":
                model.save_pretrained(path)  # a PeftModel writes its adapter alone
                self._post("/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
                for old in self.loaded:
                    try:
                        self._post("/unload_lora_adapter", {"lora_name": old})
                    except Exception:  # noqa: BLE001 -- an adapter left loaded costs memory, not correctness
                        pass
                self.loaded = [name]
            else:
                merged_copy_state(model).save_pretrained(path)
                tokenizer.save_pretrained(path)
                stale = self.sync_dir / f"step-{step - 2}"
                if stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
        self.acc.wait_for_everyone()
        self.backend.model = name
        return name
