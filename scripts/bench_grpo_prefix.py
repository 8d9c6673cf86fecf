"""Time GRPO's token_logprobs forward+backward, plain pass vs shared prompt prefix vs an episode's
turns packed into one row (a measurement, not a test): the real embedded SmolLM2-135M in float32,
rows built like trajectory_rows builds them from the mock domain's agent system prompt with its tool
schemas + short user turns + sampled completions (random ids), sorted by length and cut into
micro-batches of 4 as ppo_update does. Episodes are built in token space (each turn's row is a
prefix of its episode's packed row), so the per-turn and packed arms train the same tokens.

    PYTHONPATH=. python scripts/bench_grpo_prefix.py [threads=2]
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

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
path = ensure_embedded_model()
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
model.train()
dom = load_domain("mock")
system, tools = agent_system_prompt(dom.policy), dom.tool_schemas()
rng = random.Random(0)
words = ["please", "create", "a", "task", "for", "user_1", "titled", "report", "thanks", "now"]
rows, packed = [], []
for ep in range(8):  # 8 episodes x 3 sampled assistant turns
    msgs = [{"role": "system", "content": system},
            {"role": "user", "content": " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))}]
    ids, mask = assistant_token_mask([("prompt", tok(render_prompt(tok, msgs, tools, "prompt"),
                                                     add_special_tokens=False)["input_ids"])])
    adv = rng.uniform(-1, 1)
    for turn in range(3):
        if turn:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))
            more = tok(f"\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
            ids, mask = ids + more, mask + [0] * len(more)
        completion = [rng.randint(100, 40000) for _ in range(rng.randint(15, 70))] + [tok.convert_tokens_to_ids("<|im_end|>")]
        ids, mask = ids + completion, mask + [1] * len(completion)
        n = len(ids) - len(completion)
        rows.append(Row(list(ids), [0] * n + [1] * len(completion), adv, ep))
    packed.append(Row(list(ids), list(mask), adv, ep, turns=3))

def timed(name, rows, min_prefix):
    rows = sorted(rows, key=lambda r: len(r.ids))
    micro = [rows[s : s + 4] for s in range(0, len(rows), 4)]
    model.zero_grad(set_to_none=True)
    wall, cpu = time.perf_counter(), time.process_time()
    for mi in micro:
        logp, mask = token_logprobs(model, mi, tok.pad_token_id, 0.7, min_prefix=min_prefix)
        adv = torch.tensor([r.advantage for r in mi])[:, None]
        (-(logp * adv * mask).sum() / mask.sum()).backward()
    print(f"{name}: {len(rows)} rows of {min(len(r.ids) for r in rows)}-{max(len(r.ids) for r in rows)} tokens, "
          f"{sum(sum(r.mask) for r in rows)} trained; shared prefix per micro-batch "
          f"{[_prefix_to_share(model, m, min_prefix) for m in micro]}; wall {time.perf_counter() - wall:.1f}s, "
          f"cpu {time.process_time() - cpu:.1f}s", flush=True)


for _ in range(2):
    timed("plain, per turn", rows, 10**9)
    timed("shared prefix, per turn", rows, 64)
    timed("shared prefix, packed", packed, 64)
