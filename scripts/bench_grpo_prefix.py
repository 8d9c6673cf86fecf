"""Time GRPO's token_logprobs forward+backward, plain pass vs shared prompt prefix (a measurement,
not a test): the real embedded SmolLM2-135M in float32, rows built like trajectory_rows builds
them from the mock domain's agent system prompt with its tool schemas + short user turns + sampled
completions (random ids), sorted by length and cut into micro-batches of 4 as ppo_update does.

    PYTHONPATH=. python scripts/bench_grpo_prefix.py [rows=24] [threads=2]
"""

import random
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from kit.envs.domain import load_domain
from kit.llm import ensure_embedded_model
from kit.llm.prompting import render_prompt
from kit.rollout.prompts import agent_system_prompt
from kit.train.grpo_math import assistant_token_mask
from kit.train.sequences import Row, _prefix_to_share, token_logprobs

n_rows = int(sys.argv[1]) if len(sys.argv) > 1 else 24
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
path = ensure_embedded_model()
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
model.train()
dom = load_domain("mock")
system, tools = agent_system_prompt(dom.policy), dom.tool_schemas()
rng = random.Random(0)
words = ["please", "create", "a", "task", "for", "user_1", "titled", "report", "thanks", "now"]
rows = []
for ep in range(8):  # 8 episodes x 3 sampled assistant turns
    msgs = [{"role": "system", "content": system}]
    for turn in range(3):
        msgs.append({"role": "user", "content": " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))})
        prompt_ids = tok(render_prompt(tok, msgs, tools, "prompt"), add_special_tokens=False)["input_ids"]
        completion = [rng.randint(100, 40000) for _ in range(rng.randint(15, 70))]
        ids, mask = assistant_token_mask([("prompt", prompt_ids), ("completion", completion)])
        rows.append(Row(ids, mask, rng.uniform(-1, 1), ep))
        msgs.append({"role": "assistant", "content": tok.decode(completion)})
rows.sort(key=lambda r: len(r.ids))
rows = rows[:: max(1, len(rows) // n_rows)][:n_rows]
micro = [rows[s : s + 4] for s in range(0, len(rows), 4)]
print(f"{len(rows)} rows of {min(len(r.ids) for r in rows)}-{max(len(r.ids) for r in rows)} tokens; "
      f"shared prefix per micro-batch: {[_prefix_to_share(model, m, 64) for m in micro]}", flush=True)
for name, min_prefix in [("plain", 10**9), ("shared", 64)] * 2:
    model.zero_grad(set_to_none=True)
    wall, cpu = time.perf_counter(), time.process_time()
    for mi in micro:
        logp, mask = token_logprobs(model, mi, tok.pad_token_id, 0.7, min_prefix=min_prefix)
        adv = torch.tensor([r.advantage for r in mi])[:, None]
        (-(logp * adv * mask).sum() / mask.sum()).backward()
    print(f"{name}: wall {time.perf_counter() - wall:.1f}s, cpu {time.process_time() - cpu:.1f}s", flush=True)
