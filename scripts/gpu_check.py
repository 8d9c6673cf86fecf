"""One prepared check of the kit's GPU paths, on one CUDA machine, in a few minutes.

    python scripts/gpu_check.py --out gpu-check/          # every part; JSON + log in --out

What it runs, each part timed and recorded (a failure is recorded and the next part still runs):
  1. env       torch / CUDA / GPU, and whether the optional `vllm` and `unsloth` imports work;
  2. bench     `kit bench rollout`'s arms on CUDA: one group of G mock episodes through the kit's engine
               (batched, one at a time) and transformers' generate / generate_batch;
  3. eval      pass^k of the embedded model on the 9 τ² mock tasks (4 trials), user-deviation rate;
  4. sft       agent SFT (kit.train.sft, TRL's SFTTrainer; Unsloth's path if importable) on CUDA, bf16;
  5. grpo      GRPO steps (kit.train.grpo) on CUDA from the SFT checkpoint against the raw user
               simulator, mock tasks, checker (τ² criteria) rewards;
  6. grpo_lora the same with LoRA adapters and gradient checkpointing (kit.train.lora);
  7. grpo_server the path at scale: `vllm serve` (its own venv: `make vllm-env`, or --vllm) serves the
               embedded model with runtime LoRA; GRPO samples through it (`rollout: server`), takes
               the server's token ids and log-probs, and pushes its adapter after every step
               (POST /v1/load_lora_adapter); skipped, and said so, when no vllm executable is found;
  8. eval_grpo pass^1 of the GRPO checkpoint (same settings as 3).
Sizes are flags; the defaults fit in about eight minutes on one H100/H200.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="gpu-check")
    ap.add_argument("--json", default=None, help="where the results go (default: OUT/gpu_check.json)")
    ap.add_argument("--parts", default="env,bench,eval,sft,grpo,grpo_lora,grpo_server,eval_grpo")
    ap.add_argument("--vllm", default=None, help="the `vllm` executable (default: .venv-vllm/bin/vllm, else PATH)")
    ap.add_argument("--vllm-memory", type=float, default=0.3, help="grpo_server: vLLM's gpu_memory_utilization")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--bench-steps", type=int, default=16)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--max-messages", type=int, default=16)
    ap.add_argument("--sft-data", default=None, help="sft_agent.jsonl from an engine run (default: gold mock dialogues)")
    ap.add_argument("--sft-steps", type=int, default=60)
    ap.add_argument("--grpo-steps", type=int, default=4)
    ap.add_argument("--grpo-tasks", type=int, default=4)
    ap.add_argument("--limit", type=int, default=None, help="evaluate only the first N mock tasks")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--allow-cpu", action="store_true", help="run without CUDA (to try the script itself)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    results: dict = {"argv": sys.argv, "python": platform.python_version()}

    def record(name, fn):
        t0 = time.perf_counter()
        print(f"\n===== {name} =====", flush=True)
        try:
            res = fn() or {}
            results[name] = {"ok": "skipped" if "skipped" in res else True, **res}  # a skip is said, not passed
        except Exception as e:  # noqa: BLE001 -- recorded, and the next part still runs
            traceback.print_exc()
            results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        results[name]["wall_s"] = round(time.perf_counter() - t0, 1)
        print(f"{name}: {json.dumps(results[name], default=str)[:2000]}", flush=True)
        Path(args.json or out / "gpu_check.json").write_text(json.dumps(results, indent=2, default=str))

    import torch

    from kit.llm import ensure_embedded_model

    if args.threads:
        torch.set_num_threads(args.threads)

    state: dict = {}

    def env():
        info = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0)
                if torch.cuda.is_available() else None}
        import transformers

        info["transformers"] = transformers.__version__
        for mod in ("trl", "peft", "vllm", "unsloth"):
            try:
                m = __import__(mod)
                info[mod] = getattr(m, "__version__", "?")
            except Exception as e:  # noqa: BLE001 -- optional extras: report why not
                info[mod] = f"not importable: {type(e).__name__}: {str(e)[:200]}"
        t0 = time.perf_counter()
        state["base"] = str(ensure_embedded_model())
        info["embedded_model_s"] = round(time.perf_counter() - t0, 1)
        if not torch.cuda.is_available() and not args.allow_cpu:
            raise RuntimeError("no CUDA device: this check is for GPU machines")
        return info

    def bench():
        """`kit bench rollout`'s arms on CUDA: the kit's engine batched and one at a time, transformers'
        batched generate and its continuous batching (generate_batch), the same episodes and seeds."""
        from kit.bench.rollout import bench_arms, report_lines
        from kit.llm import make_backend

        results = bench_arms(make_backend("embedded"), ("kit", "kit-sequential", "hf-generate", "hf-generate-batch"),
                             "mock", 0, args.group, args.bench_steps, 64, 0)
        lines = report_lines(results)
        print("\n".join(lines))
        return {"lines": lines}

    def gen():
        """Time the hf backend's batched generation alone (no episode loop), then HF's own generate."""
        from kit.envs import load_domain
        from kit.llm import make_backend
        from kit.llm.types import Message, SamplingParams
        from kit.rollout.prompts import agent_system_prompt

        dom = load_domain("mock")
        backend = make_backend("embedded")
        conv = [Message(role="system", content=agent_system_prompt(dom.policy)),
                Message(role="user", content="Hi, I need to create a task called 'Buy milk' for user_1.")]
        params = SamplingParams(temperature=1.0, max_new_tokens=64, top_k=0)
        info = {"device": str(backend.device), "threads": torch.get_num_threads(), "calls": []}
        for i in range(3):
            backend.stats = type(backend.stats)()
            t0 = time.perf_counter()
            outs = backend.generate_batch([list(conv) for _ in range(args.group)], None, params)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            info["calls"].append({"s": round(time.perf_counter() - t0, 3), "stats": backend.stats.summary(),
                                  "tokens": sum(o[0].completion_tokens or 0 for o in outs)})
            print(info["calls"][-1], flush=True)
        ids = backend.tokenizer([backend.render(conv)] * args.group, return_tensors="pt").to(backend.device)
        t0 = time.perf_counter()
        backend.model.generate(**ids, max_new_tokens=64, min_new_tokens=64, do_sample=True)
        info["hf_generate_64_s"] = round(time.perf_counter() - t0, 3)
        return info

    def evaluate_model(model: str, label: str):
        from kit.eval import EvalConfig, evaluate

        cfg = EvalConfig(domain="mock", model=model, user_model="embedded", split="default", trials=args.trials,
                         temperature=0.6, user_temperature=1.0, max_messages=args.max_messages,
                         max_new_tokens=64, user_max_new_tokens=64,
                         seed=0, batch_size=36, limit=args.limit, cross_check=True, out_dir=str(out / f"eval_{label}"))
        res = evaluate(cfg)
        print(res.summary_line())
        df = res.episodes
        return {"passk": res.passk, "line": res.summary_line(), "user_deviation_rate":
                res.meta.get("user_deviation_rate"), "tau2_agreement": res.meta.get("tau2_agreement"),
                "terminations": df["termination"].value_counts().to_dict() if len(df) else {},
                "warnings": res.meta.get("warnings")}

    def sft():
        from transformers import AutoTokenizer

        from kit.envs import load_domain
        from kit.train.sft import SFTConfig, run_sft
        from kit.train.sft_data import gold_sft_samples, read_samples

        if args.sft_data:
            samples, source = read_samples(Path(args.sft_data)), args.sft_data
        else:
            dom = load_domain("mock")
            samples, _ = gold_sft_samples(dom, dom.tasks("default"), AutoTokenizer.from_pretrained(state["base"]))
            source = "gold mock dialogues"
        cfg = SFTConfig(model_path=state["base"], output_dir=str(out / "sft_model"), lr=5e-5, warmup_steps=3,
                        train_steps=args.sft_steps, batch_size=4, max_seq_len=2048, dtype="auto", seed=0,
                        report_to="none", run_name="gpu-check/sft_agent", use_unsloth="auto")
        m = run_sft(samples, cfg)
        state["sft"] = str(out / "sft_model")
        return {"data": source, **{k: m.get(k) for k in ("samples", "steps", "first_loss", "final_loss",
                                                          "tokens_trained", "wall_time_s", "unsloth")}}

    def grpo(save: bool = True, **extra):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from kit.envs import load_domain
        from kit.train.grpo import GRPOConfig, GRPOTrainer
        from kit.verify import verify

        dom = load_domain("mock")
        policy_dir = extra.pop("policy_dir", None) or state.get("sft", state["base"])
        dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
        policy = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=dtype, local_files_only=True)
        tok = AutoTokenizer.from_pretrained(policy_dir, local_files_only=True)
        cfg = GRPOConfig(**{**dict(group_size=args.group, tasks_per_step=args.grpo_tasks,
                                   resample_budget=args.grpo_tasks, micro_batch_size=8, lr=2e-5,
                                   train_steps=args.grpo_steps, max_new_tokens=64, max_messages=args.max_messages,
                                   user_model="embedded", user_tag="raw", user_max_new_tokens=48, seed=0,
                                   print_metrics=False), **extra})
        trainer = GRPOTrainer(policy, tok, dom.tasks("default"), cfg, domain=dom,
                              reward_fn=lambda task, traj: verify(dom, task, traj).reward)
        hist = []
        for i in range(args.grpo_steps):
            m = trainer.step()
            hist.append({k: m.get(k) for k in ("reward/mean", "groups/filtered_frac", "groups/kept", "loss",
                                                "clip_frac", "approx_kl", "grad_norm", "skip_reason", "time/step_s",
                                                "time/rollout_s", "time/update_s", "time/weight_sync_s",
                                                "train/rows", "train/tokens", "train/unmatched_turns",
                                                "train/sampler_logprob_rows", "tokens/generated") if k in m})
            print(f"grpo step {i}: {hist[-1]}", flush=True)
        if save:
            trainer.save(out / "grpo_model")
            state["grpo"] = str(out / "grpo_model")
        peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
        return {"policy_start": policy_dir, "device": str(next(trainer.policy.parameters()).device), "steps": hist,
                "trainable_params": sum(p.numel() for p in trainer.policy.parameters() if p.requires_grad),
                "peak_gib": peak}

    def grpo_lora():
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        return grpo(save=False, lora=True, lora_r=16, lora_alpha=32, gradient_checkpointing=True, lr=1e-4)

    def grpo_server():
        import os
        import shutil
        import socket
        import subprocess

        import httpx

        exe = args.vllm or (str(Path(".venv-vllm/bin/vllm")) if Path(".venv-vllm/bin/vllm").exists()
                            else shutil.which("vllm"))
        if not exe:
            return {"skipped": "no vllm executable (make vllm-env, or --vllm PATH)"}
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        policy_dir = state.get("sft", state["base"])
        log = (out / "vllm_serve.log").open("w")
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "HF_HUB_OFFLINE": "1"}
        proc = subprocess.Popen([exe, "serve", policy_dir, "--host", "127.0.0.1", "--port", str(port),
                                 "--enable-lora", "--max-lora-rank", "16", "--return-tokens-as-token-ids",
                                 "--gpu-memory-utilization", str(args.vllm_memory), "--max-model-len", "8192"],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 420:
                if proc.poll() is not None:
                    raise RuntimeError(f"vllm serve exited {proc.returncode}: see {out / 'vllm_serve.log'}")
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(2)
            else:
                raise RuntimeError("vllm serve did not come up in 420 s")
            up = round(time.perf_counter() - t0, 1)
            res = grpo(save=False, policy_dir=policy_dir, lora=True, lora_r=16, lora_alpha=32, lr=1e-4,
                       rollout="server", rollout_server=f"http://127.0.0.1:{port}/v1",
                       rollout_server_model=policy_dir, server_token_ids=True, sync_dir=str(out / "grpo_sync"))
            return {"server_start_s": up, **res}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    table = {"env": env, "gen": gen, "bench": bench, "eval": lambda: evaluate_model("embedded", "base"), "sft": sft,
             "grpo": grpo, "grpo_lora": grpo_lora, "grpo_server": grpo_server, "eval_grpo": lambda: evaluate_model(f"hf:{state['grpo']}", "grpo")}
    for name in parts:
        record(name, table[name])
    print("\nsummary:", json.dumps({k: v.get("ok") for k, v in results.items() if isinstance(v, dict)}))
    return 0 if all(v.get("ok") for v in results.values() if isinstance(v, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
