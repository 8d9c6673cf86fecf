"""Peak GPU memory per training process, estimated from the model's shape and a recipe's
declared hardware, so that `kit run --validate` can refuse a recipe that cannot fit its GPUs.

A GPU recipe declares its hardware as a mapping:

    hardware: {kind: gpu, gpus: 8, gpu_memory_gib: 140, zero_stage: 2, rollout: server, rollout_gpus: 8,
               model_family: qwen3-30b-a3b}

The estimate, per training stage (a stage whose CONTRACT has a `memory` hook, kit/stages/contract.py:
the SFT stages and GRPO) and per process (one process per GPU):

    weights      P x dtype bytes                       (/ gpus under ZeRO-3)
    gradients    full: P x dtype bytes                 (/ gpus under ZeRO-2, 3)
                 LoRA: A x 4 (fp32 adapter)
    optimizer    AdamW m and v in fp32, plus an fp32 master copy when the weights are 16-bit:
                 full: P x 12 (bf16/fp16) or P x 8 (fp32); LoRA: A x 12 (fp32 adapter copy + m + v)
                                                       (/ gpus under ZeRO-1, 2, 3)
    activations  tokens = rows per forward x row length (the stage's `memory` hook says which parameters:
                 SFT: batch_size x max_seq_len; GRPO: micro_batch_size x max_seq_tokens, else the
                 model's context length; capped by the hook's max_tokens, GRPO's micro_batch_tokens);
                 no checkpointing: tokens x hidden x layers x 34 bytes (Korthikanti et al. 2022,
                 "Reducing Activation Recomputation", 34·s·b·h per layer in 16-bit with the attention
                 score term dropped: flash/SDPA attention); checkpointing: each layer's input kept
                 (tokens x hidden x 2 x layers) plus one layer recomputed (tokens x hidden x 34);
                 plus the logits in fp32 for the loss (tokens x vocab x 4).
    rollout      an in-process vLLM engine on the same card: vLLM's gpu_memory_utilization (0.85) of
                 the card. For a recipe's stage that samples (GRPO) it is read from its user simulator
                 (`user_engine`): a local folder run by vLLM (`backend: vllm` or 'vllm:PATH') is an
                 engine on the training GPU; 'openai:URL#MODEL' (a `vllm serve` elsewhere, on
                 `rollout_gpus` other GPUs) is 0. `hardware.rollout: server` with an in-process
                 user engine is refused by `kit run --validate`.
    overhead     2 GiB: CUDA context, NCCL buffers, allocator fragmentation.

P = all parameters, A = the LoRA adapter's (r x (in + out) per targeted linear layer, every expert's).
A MoE model keeps every expert in memory: P is the total, not the active count. Rough by design:
a recipe that this says cannot fit will not; one that fits still may not (KV cache of GRPO's
policy sampling, allocator peaks and kernels' workspaces are not modelled).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

GIB = 1024 ** 3
ACT_BYTES_PER_TOKEN_LAYER_HIDDEN = 34   # Korthikanti et al. 2022, 16-bit, flash attention
OVERHEAD_GIB = 2.0
VLLM_GPU_MEMORY_UTILIZATION = 0.85      # kit.llm.vllm_backend.VLLMBackend's default
_DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "auto": 2,  # auto: bf16 on CUDA
                "float32": 4, "fp32": 4, "float": 4}

# Architectures by name, for when the model folder is not on this machine at validation time: the
# fields of their published config.json (huggingface.co/Qwen/<name>/blob/main/config.json).
# Qwen3-30B-A3B(-Instruct-2507): 30.5B parameters, 3.3B active (its model card); the formula below
# gives 30.53B / 3.34B from these fields.
KNOWN_MODELS: dict[str, dict] = {
    "qwen3-30b-a3b": {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
                      "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
                      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                      "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 262144},
    "qwen3-235b-a22b": {"hidden_size": 4096, "num_hidden_layers": 94, "num_attention_heads": 64,
                        "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 12288,
                        "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8,
                        "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 262144},
}


class Hardware(BaseModel):
    """What a GPU recipe is sized for; `kit run --validate` checks every training stage against it."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["cpu", "gpu"] = "gpu"
    gpus: int = Field(default=1, ge=1, description="Training processes, one per GPU (data parallel).")
    gpu_memory_gib: float = Field(default=140.0, gt=0, description="Memory of one GPU (H200: 143771 MiB "
                                  "= 140 GiB as nvidia-smi reports it).")
    zero_stage: Literal[0, 1, 2, 3] = Field(default=0, description="DeepSpeed ZeRO stage of the accelerate "
                                            "launch: 1 shards the optimizer, 2 also gradients, 3 also weights.")
    rollout: Literal["in_process", "server"] = Field(
        default="in_process", description="Where GRPO's sampling engine (the user simulator) runs: on the "
        "training GPU (in_process: vLLM takes its gpu_memory_utilization of the card) or on other GPUs "
        "behind an OpenAI-compatible server (the stages' models given as openai:URL#MODEL).")
    rollout_gpus: int = Field(default=0, ge=0, description="GPUs the rollout servers use, besides `gpus`.")
    model_family: Optional[str] = Field(default=None, description="Architecture to size by when a model "
                                        "folder's config.json is absent: " + ", ".join(KNOWN_MODELS))
    model_params_b: Optional[float] = Field(default=None, gt=0, description="Or: parameters in billions "
                                            "(dense shape assumed for LoRA and activations: less exact).")


@dataclass
class Shape:
    params: float            # all parameters
    active: float            # per token (MoE: the routed experts only)
    hidden: int
    layers: int
    vocab: int
    context: int
    lora_per_rank: dict      # module name -> sum of (in + out) over layers (and experts)
    source: str


def shape_from_config(cfg: dict, source: str) -> Shape:
    """Parameter counts of a decoder-only transformer (Llama/Qwen2/Qwen3/Qwen3-MoE layout) from its
    config.json fields."""
    h, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    nh = cfg.get("num_attention_heads", 1)
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or h // nh
    q, kv = nh * hd, nkv * hd
    attn = h * q + 2 * h * kv + q * h
    experts = cfg.get("num_experts") or cfg.get("n_routed_experts") or 0
    if experts:
        ff = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
        mlp_one = 3 * h * ff
        mlp, mlp_active = experts * mlp_one + h * experts, cfg.get("num_experts_per_tok", 1) * mlp_one + h * experts
        n_mlp = experts
    else:
        ff = cfg["intermediate_size"]
        mlp = mlp_active = 3 * h * ff
        n_mlp = 1
    norms = 2 * h + (2 * hd if cfg.get("model_type", "qwen3").startswith("qwen3") else 0)
    embed = V * h * (1 if cfg.get("tie_word_embeddings", False) else 2) + h
    lora = {"q_proj": L * (h + q), "k_proj": L * (h + kv), "v_proj": L * (h + kv), "o_proj": L * (q + h),
            "gate_proj": L * n_mlp * (h + ff), "up_proj": L * n_mlp * (h + ff), "down_proj": L * n_mlp * (ff + h)}
    if experts:
        lora["gate"] = L * (h + experts)  # the router
    return Shape(params=L * (attn + mlp + norms) + embed, active=L * (attn + mlp_active + norms) + embed,
                 hidden=h, layers=L, vocab=V, context=cfg.get("max_position_embeddings", 32768),
                 lora_per_rank=lora, source=source)


def model_shape(folder: Optional[str], hw: Hardware) -> Optional[Shape]:
    """The model's shape: its folder's config.json when there is one with the fields, else the
    recipe's model_family, else model_params_b (a dense shape guessed from the count), else None."""
    if folder:
        f = Path(folder).expanduser() / "config.json"
        try:
            cfg = json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {}
        except (OSError, ValueError):
            cfg = {}
        cfg = cfg.get("text_config", cfg)
        if all(k in cfg for k in ("hidden_size", "num_hidden_layers", "vocab_size")) and \
                ("intermediate_size" in cfg or "moe_intermediate_size" in cfg):
            return shape_from_config(cfg, f"{f}")
    if hw.model_family:
        return shape_from_config(KNOWN_MODELS[hw.model_family], f"model_family {hw.model_family}")
    if hw.model_params_b:
        p = hw.model_params_b * 1e9
        h = 5120 if p > 2e10 else 4096 if p > 5e9 else 2048  # a typical width for the size: rough
        layers = max(1, round(p / (12 * h * h)))
        per = {k: layers * 2 * h for k in ("q_proj", "k_proj", "v_proj", "o_proj")}
        per.update({k: layers * 3.7 * h for k in ("gate_proj", "up_proj", "down_proj")})
        return Shape(params=p, active=p, hidden=h, layers=layers, vocab=151936, context=32768,
                     lora_per_rank=per, source=f"model_params_b {hw.model_params_b:g} (dense shape guessed)")
    return None


@dataclass
class Estimate:
    stage: str
    key: str
    index: int
    shape: Shape
    trainable: float
    weights: float           # GiB each
    grads: float
    optimizer: float
    activations: float
    rollout: float
    overhead: float = OVERHEAD_GIB
    field: str = ""          # the knob most to blame, for the error location
    user: str = ""           # grpo: where its user simulator samples (`user_engine`)

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.rollout + self.overhead


def lora_params(shape: Shape, r: int, targets) -> float:
    names = shape.lora_per_rank if targets in ("all-linear", None) else \
        [t for t in ([targets] if isinstance(targets, str) else targets) if t in shape.lora_per_rank]
    return r * sum(shape.lora_per_rank[n] for n in names)


def user_engine(p: dict) -> str:
    """Where a GRPO stage's user simulator samples, from its validated params: 'server' (an
    'openai:' endpoint), 'vllm' (a local folder run by an in-process vLLM engine on the training
    GPU) or 'hf' (a local folder run by transformers in the training process; not modelled)."""
    v = p.get("user_model")
    if isinstance(v, str) and v.strip().startswith("openai:"):
        return "server"
    if isinstance(v, str) and v.strip().startswith("vllm:"):
        return "vllm"
    if isinstance(v, str) and v.strip().startswith("hf:"):
        return "hf"
    return "vllm" if p.get("backend") == "vllm" else "hf"


def estimate_stage(stage: str, p: dict, shape: Shape, hw: Hardware, key: str = "", index: int = 0,
                   engine: Optional[bool] = None) -> Estimate:
    """Per-process peak of one training stage with params `p` (validated stage params). `engine`:
    whether the sampling engine of a stage that samples (GRPO) shares the card (None: as `hw.rollout`
    declares). The stage's CONTRACT.memory hook says which parameters size its activations."""
    from kit.stages import contract

    memory = contract(stage).memory
    if memory is None:
        raise ValueError(f"stage {stage!r} has no memory estimate: its CONTRACT declares no `memory` hook")
    use = memory(p, shape.context)
    n = hw.gpus
    wb = _DTYPE_BYTES.get(str(p.get("dtype", "auto")).replace("torch.", ""), 2)
    P = shape.params
    lora = p.get("lora", False)
    if lora:
        A = lora_params(shape, p.get("lora_r", 16), p.get("lora_target_modules", "all-linear"))
        weights, grads, opt = P * wb + A * 4, A * 4, A * 12  # adapter: fp32 copy, fp32 grads, m, v
        trainable = A
    else:
        weights, grads, opt = P * wb, P * wb, P * (12 if wb < 4 else 8)
        trainable = P
    if hw.zero_stage >= 1:
        opt /= n
    if hw.zero_stage >= 2:
        grads /= n
    if hw.zero_stage >= 3:
        weights /= n
    rows, length, ckpt, field = use.rows, use.length, use.checkpointing, use.field
    tokens = rows * length
    if use.max_tokens:
        tokens = min(tokens, max(use.max_tokens, length))  # a row longer than the budget runs alone
    per_layer = tokens * shape.hidden * ACT_BYTES_PER_TOKEN_LAYER_HIDDEN
    acts = (tokens * shape.hidden * 2 * shape.layers + per_layer) if ckpt else per_layer * shape.layers
    acts += tokens * shape.vocab * 4
    rollout = 0.0
    if engine is None:
        engine = hw.rollout == "in_process"
    if use.samples and engine:
        rollout = VLLM_GPU_MEMORY_UTILIZATION * hw.gpu_memory_gib * GIB
    return Estimate(stage=stage, key=key, index=index, shape=shape, trainable=trainable, weights=weights / GIB,
                    grads=grads / GIB, optimizer=opt / GIB, activations=acts / GIB, rollout=rollout / GIB,
                    field=field)


def _start_folder(ps, plan) -> Optional[str]:
    """The folder a training stage starts from, following @references back to a plain folder."""
    by_key = {q.key: q for q in plan}
    seen = set()
    while ps is not None and ps.key not in seen:
        seen.add(ps.key)
        m = ps.params.get("model")
        if isinstance(m, str) and not m.startswith("@"):
            for prefix in ("vllm:", "hf:"):
                m = m[len(prefix):] if m.startswith(prefix) else m
            return None if m == "embedded" or m.startswith("openai:") else m
        ps = by_key.get(ps.refs.get("model"))
    return None


def estimate_plan(plan, hw: Hardware) -> tuple[list[Estimate], list[tuple[int, str]]]:
    """(estimates of the plan's training stages, (stage index, why) of those that cannot be sized)."""
    from kit.stages import contract

    out, unsized, seen = [], [], set()
    for ps in plan:
        memory = contract(ps.stage).memory
        if memory is None or (ps.index, ps.stage) in seen:
            continue
        seen.add((ps.index, ps.stage))
        shape = model_shape(_start_folder(ps, plan), hw)
        if shape is None:
            unsized.append((ps.index, "cannot size the model: its folder has no config.json with the model's "
                            "shape here; declare hardware.model_family (" + ", ".join(KNOWN_MODELS) +
                            ") or hardware.model_params_b"))
            continue
        user = user_engine(ps.params) if memory(ps.params, shape.context).samples else ""
        e = estimate_stage(ps.stage, ps.params, shape, hw, ps.id, ps.index, engine=(user == "vllm") if user else None)
        e.user = user
        out.append(e)
    return out, unsized


def table(estimates: list[Estimate], hw: Hardware) -> list[str]:
    """The printout: one line per training stage, then where the numbers came from."""
    lines = [f"memory per process (GiB): {hw.gpus} GPU(s) x {hw.gpu_memory_gib:g} GiB, ZeRO-{hw.zero_stage}, "
             f"rollout {hw.rollout}" + (f" on {hw.rollout_gpus} other GPU(s)" if hw.rollout == "server" else ""),
             f"  {'stage':<12} {'params':>8} {'trainable':>10} {'weights':>8} {'grads':>7} {'optim':>7} "
             f"{'activ':>7} {'rollout':>8} {'total':>7} / cap"]
    for e in estimates:
        ok = "fits" if e.total <= hw.gpu_memory_gib else "DOES NOT FIT"
        lines.append(f"  {e.key:<12} {e.shape.params / 1e9:>7.2f}B {e.trainable / 1e9:>9.3f}B {e.weights:>8.1f} "
                     f"{e.grads:>7.1f} {e.optimizer:>7.1f} {e.activations:>7.1f} {e.rollout:>8.1f} "
                     f"{e.total:>7.1f} / {hw.gpu_memory_gib:g} {ok}")
    for src in dict.fromkeys(e.shape.source for e in estimates):
        lines.append(f"  model shape from {src}")
    for e in estimates:
        if e.user == "server":
            lines.append(f"  {e.key}: user simulator behind a server (openai:): no vLLM engine on the training GPU")
        elif e.user == "vllm":
            lines.append(f"  {e.key}: user simulator in-process on vLLM: its engine takes "
                         f"{VLLM_GPU_MEMORY_UTILIZATION:g} of the card (serve it with `vllm serve` and give "
                         "user_model: openai:URL#MODEL to free it)")
        elif e.user == "hf":
            lines.append(f"  {e.key}: user simulator run by transformers in the training process: its weights "
                         "are not counted")
    lines.append(f"  (+{OVERHEAD_GIB:g} GiB overhead each; AdamW fp32 m, v and master weights; kit/runner/memory.py "
                 "says what is modelled)")
    return lines
