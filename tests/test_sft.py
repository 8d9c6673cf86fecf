"""SFT data and training (kit/train/sft_data.py, kit/train/sft.py).

Data: the τ² mock and telecom domains' gold dialogues (kit.replay), rendered with the embedded
SmolLM2 tokenizer. The agent's SFT rows are checked token for token against the rows GRPO builds
for the same turns (kit.train.sequences.trajectory_rows), so SFT, GRPO and inference share one
format. Training: the real embedded SmolLM2-135M-Instruct with LoRA, a few steps on two samples,
sequences cut to 96 tokens (prompts truncated from the left) so that it runs in seconds on 1 thread.
"""

import json

import pytest
import torch

from kit.envs import load_domain
from kit.grounding import grounded_only
from kit.llm import ensure_embedded_model
from kit.llm.hf import HFBackend
from kit.llm.types import SamplingParams
from kit.replay import gold_trajectory
from kit.rollout.prompts import (
    FIRST_AGENT_MESSAGE,
    agent_system_prompt,
    user_system_prompt,
)
from kit.train.sequences import trajectory_rows
from kit.train.sft import SFTConfig, prepare_sft, run_sft
from kit.train.sft_data import (
    AGENT_FILE,
    USER_FILE,
    build_sft_samples,
    load_sft_dataset,
    read_samples,
    read_trajectories,
    write_samples,
    write_sft_jsonl,
)
from kit.trajectory import BadLine, Message, ToolCall, Trajectory

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_path():
    return str(ensure_embedded_model())


@pytest.fixture(scope="module")
def tokenizer(model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


@pytest.fixture(scope="module")
def mock():
    dom = load_domain("mock")
    trajs = [gold_trajectory(dom, t) for t in dom.tasks()]
    return dom, trajs


@pytest.fixture(scope="module")
def mock_samples(mock, tokenizer):
    dom, trajs = mock
    return build_sft_samples(trajs, dom, tokenizer)


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_agent_samples_are_the_rows_grpo_trains_on(mock, mock_samples, tokenizer, model_path):
    dom, trajs = mock
    agent, user = mock_samples
    # every assistant turn but the fixed greeting a rollout opens with (never generated, never trained)
    turns = [m for t in trajs for m in t.messages if m.role == "assistant" and (m.has_text() or m.tool_calls)
             and m.content != FIRST_AGENT_MESSAGE]
    assert len(agent) == len(turns) > 0
    assert len(user) == sum(1 for t in trajs for m in t.messages if m.role == "user" and m.has_text()) > 0

    # GRPO's rows for the same turns: each turn carries its completion ids as sampled ids; the
    # row's prompt part is what trajectory_rows renders for the turn, checked against the SFT prompt.
    backend = HFBackend(path=model_path)
    system, tools = agent_system_prompt(dom.policy), dom.tool_schemas("assistant")
    by_traj = {}
    for s in agent:
        by_traj.setdefault(s.trajectory_id, []).append(s)
    n_rows = 0
    for traj in trajs:
        traj = traj.model_copy(deep=True)
        samples = by_traj.get(traj.id, [])
        for s in samples:
            m = traj.messages[s.message_index]
            m.meta["completion_tokens"] = len(_ids(tokenizer, s.completion))  # "sampled in this rollout"
            m.meta["token_ids"] = _ids(tokenizer, s.completion)
        rows, unmatched = trajectory_rows(backend, traj, system, tools, advantage=1.0, group=0)
        assert unmatched == 0
        assert len(rows) == len(samples)
        for row, s in zip(rows, samples):
            assert row.ids == _ids(tokenizer, s.prompt) + _ids(tokenizer, s.completion)
            assert sum(row.mask) == len(_ids(tokenizer, s.completion))
        n_rows += len(rows)
    assert n_rows == len(agent)

    # completions: the model's own output format, ending with the end-of-turn token
    for s in agent:
        m = next(t for t in trajs if t.id == s.trajectory_id).messages[s.message_index]
        assert s.completion.endswith(tokenizer.eos_token) and s.completion.count(tokenizer.eos_token) == 1
        assert ("<tool_call>" in s.completion) == bool(m.tool_calls)
        for c in m.tool_calls or []:
            assert f'"name": "{c.name}"' in s.completion
        assert s.messages[-1]["role"] == "assistant" and s.messages[0]["content"] == system
        assert s.reward is None and s.domain == "mock" and s.role == "agent"
    # the "messages" form ends with the trained turn, OpenAI style
    tool_turn = next(s for s in agent if "<tool_call>" in s.completion)
    assert tool_turn.messages[-1]["tool_calls"][0]["type"] == "function"


def test_user_samples_hold_the_users_own_tool_calls(tokenizer):
    dom = load_domain("telecom")
    task = next(t for t in dom.tasks()
                if t.evaluation_criteria and any(a.requestor == "user" for a in t.evaluation_criteria.actions or []))
    traj = gold_trajectory(dom, task)
    agent, user = build_sft_samples([traj], dom, tokenizer)
    user_calls = [c for m in traj.messages if m.role == "user" for c in m.tool_calls or []]
    assert user_calls and len(user) == sum(1 for m in traj.messages if m.role == "user")
    with_calls = [s for s in user if "<tool_call>" in s.completion]
    assert len(with_calls) == len(user_calls)
    for s, c in zip(with_calls, user_calls):
        assert f'"name": "{c.name}"' in s.completion
    user_tools, agent_tools = set(dom.tool_names("user")), set(dom.tool_names("assistant"))
    for s in user:
        assert s.prompt.startswith("<|im_start|>system\n" + user_system_prompt(task, True))
        listed = {t["function"]["name"] for t in s.tools}
        assert listed == user_tools and all(f'"name": "{n}"' in s.prompt for n in user_tools)
        assert not any(f'"name": "{n}"' in s.prompt for n in agent_tools - user_tools)
    # the agent sees neither the user's tools nor the user's calls to them
    assert agent
    for s in agent:
        assert not any(f'"name": "{n}"' in s.prompt + s.completion for n in user_tools - agent_tools)


def test_skips_greeting_parse_errors_and_failed_calls(mock, tokenizer):
    dom, _ = mock
    task = dom.tasks()[0]
    bad = ToolCall(id="c1", name="create_task", arguments={"user_id": "nobody"})
    good = ToolCall(id="c2", name="get_users", arguments={})
    traj = Trajectory(task_id=task.id, domain="mock", messages=[
        Message(role="assistant", content=FIRST_AGENT_MESSAGE),
        Message(role="user", content="Please make a task."),
        Message(role="assistant", content='<tool_call>{"name": oops</tool_call>', meta={"parse_errors": ["x"]}),
        Message(role="system", content="Error: could not parse", meta={"to": "assistant"}),
        Message(role="assistant", tool_calls=[bad]),
        Message(role="tool", content="Error: user not found", tool_call_id="c1", error=True),
        Message(role="assistant", tool_calls=[good]),
        Message(role="tool", content="[]", tool_call_id="c2"),
        Message(role="assistant", content="Done. ###STOP###"),
    ], meta={"reward": 0.0})
    agent, user = build_sft_samples([traj], dom, tokenizer)
    assert [s.message_index for s in agent] == [6, 8]
    assert [s.turn for s in agent] == [0, 1] and all(s.reward == 0.0 for s in agent)
    assert "Error: user not found" in agent[0].prompt  # earlier turns stay as context
    assert [s.message_index for s in user] == [1]
    kept = build_sft_samples([traj], dom, tokenizer, skip_parse_errors=False, skip_tool_errors=False)[0]
    assert [s.message_index for s in kept] == [2, 4, 6, 8]


def test_jsonl_round_trip_and_datasets(mock_samples, tmp_path):
    agent, user = mock_samples
    paths = write_sft_jsonl(tmp_path, agent, user)
    assert paths["agent"].name == AGENT_FILE and paths["user"].name == USER_FILE
    assert read_samples(paths["agent"]) == agent and read_samples(paths["user"]) == user
    ds = load_sft_dataset(paths["agent"])
    assert len(ds) == len(agent) and {"prompt", "completion", "task_id", "turn"} <= set(ds.column_names)
    chat = load_sft_dataset(agent, form="messages")
    assert chat[0]["messages"][-1]["role"] == "assistant" and json.loads(chat[0]["tools"])[0]["type"] == "function"


def test_collated_labels_train_only_the_completion(mock_samples, tokenizer, tmp_path):
    agent, _ = mock_samples
    # tau2's own message histories call create_task with values no message gave (user_1, a description):
    # the grounding check drops those samples before training
    agent, dropped = grounded_only(agent)
    assert len(dropped) == 2 and {s.task_id for s, _ in dropped} == {
        "update_task_with_message_history", "update_task_with_history_and_env_assertions"}
    max_len = 256  # shorter than every mock agent prompt: each one is truncated from the left
    trainer, counts = prepare_sft(mock_samples[0], SFTConfig(output_dir=str(tmp_path), max_seq_len=max_len,
                                                             batch_size=len(agent)))
    assert counts["samples"] == len(agent) and counts["truncated_prompts"] == len(agent)
    assert counts["ungrounded_dropped"] == 2
    batch = next(iter(trainer.get_train_dataloader()))
    prompts = {}  # completion ids -> prompt ids of the samples with that completion (some share one)
    for s in agent:
        prompts.setdefault(tuple(_ids(tokenizer, s.completion)), []).append(_ids(tokenizer, s.prompt))
    assert batch["labels"].shape[0] == len(agent)
    for ids, labels, att in zip(batch["input_ids"].tolist(), batch["labels"].tolist(), batch["attention_mask"].tolist()):
        n = sum(att)
        trained = [i for i, lab in zip(ids[:n], labels[:n]) if lab != -100]
        candidates = prompts[tuple(trained)]  # what is trained is exactly one sample's completion...
        k = n - len(trained)
        assert all(lab == -100 for lab in labels[:k])  # ...after every prompt token, all masked
        assert labels[k:n] == ids[k:n] and trained[-1] == tokenizer.eos_token_id
        assert any(ids[:k] == p[-k:] for p in candidates) and n == max_len  # its prompt's end, cut from the left
        assert all(lab == -100 for lab in labels[n:])  # padding


def test_sft_lowers_the_loss_and_saves_a_loadable_model(mock_samples, tokenizer, tmp_path):
    agent, _ = mock_samples
    samples = [next(s for s in agent if "<tool_call>" in s.completion),
               next(s for s in agent if "<tool_call>" not in s.completion)]
    out = tmp_path / "sft"
    cfg = SFTConfig(output_dir=str(out), lora=True, lora_r=8, lora_alpha=16, lr=2e-3, lr_scheduler="constant",
                    train_steps=5, batch_size=2, max_seq_len=96, seed=0)
    m = run_sft(samples, cfg)
    losses = [loss for _, loss in m["loss_curve"]]
    print("sft losses", [round(x, 3) for x in losses], "wall", m["wall_time_s"], "s")
    assert [s for s, _ in m["loss_curve"]] == [1, 2, 3, 4, 5] and m["steps"] == 5
    assert losses[-1] < 0.5 * losses[0]
    n_completion = sum(len(_ids(tokenizer, s.completion)) for s in samples)
    assert m["tokens_trained"] == 5 * n_completion and m["tokens_seen"] == 5 * 2 * 96
    assert json.loads((out / "loss_curve.json").read_text()) == [list(p) for p in m["loss_curve"]]
    assert not (out / "adapter_config.json").exists()  # merged: a plain HF folder
    backend = HFBackend(str(out))
    conv = samples[1].messages[:-1]
    (c,), = backend.generate_batch([conv], samples[1].tools, SamplingParams(temperature=0, max_new_tokens=8))
    assert c.completion_tokens > 0 and backend.render(conv, samples[1].tools) == samples[1].prompt


def test_gradient_checkpointing_recomputes_activations_and_trains_the_same_lora(mock_samples, tmp_path):
    """Checkpointing is on in the trained model (every decoder layer recomputes its activations in
    the backward pass) and changes nothing but memory: the same LoRA run gives the same losses."""
    agent, _ = mock_samples
    samples = [next(s for s in agent if "<tool_call>" in s.completion),
               next(s for s in agent if "<tool_call>" not in s.completion)]
    curves, flags = {}, {}
    for ckpt in (False, True):
        cfg = SFTConfig(output_dir=str(tmp_path / str(ckpt)), lora=True, lora_r=4, lora_alpha=8, lr=2e-3,
                        lr_scheduler="constant", train_steps=3, batch_size=2, max_seq_len=96, seed=0,
                        gradient_checkpointing=ckpt)
        trainer, _ = prepare_sft(samples, cfg)
        trainer.train()
        curves[ckpt] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        layers = [m for m in trainer.model.modules() if type(m).__name__.endswith("DecoderLayer")]
        flags[ckpt] = {bool(getattr(m, "gradient_checkpointing", False)) for m in layers}
        assert all(p.requires_grad == ("lora_" in n) for n, p in trainer.model.named_parameters())
    assert flags == {False: {False}, True: {True}}
    assert len(curves[True]) == 3 and curves[True] == pytest.approx(curves[False], rel=1e-4)


def test_bad_input_is_refused_clearly(tmp_path, mock_samples):
    with pytest.raises(ValueError, match="no SFT samples"):
        run_sft([], SFTConfig(output_dir=str(tmp_path / "x")))
    with pytest.raises(ValueError, match="no SFT samples"):
        load_sft_dataset([])
    path = tmp_path / "bad.jsonl"
    good = mock_samples[0][0].model_dump_json()
    path.write_text(good + "\n" + '{"prompt": "x", "completion": \n' + good + "\n")
    with pytest.raises(BadLine, match=r"bad.jsonl:2: not JSON"):
        run_sft(str(path), SFTConfig(output_dir=str(tmp_path / "y")))
    path.write_text(good + "\n\n" + json.dumps({"role": "agent", "prompt": "x"}) + "\n")
    with pytest.raises(BadLine, match=r"bad.jsonl:3: not an SFT sample: field 'completion'"):
        load_sft_dataset(path)
    trajs = tmp_path / "trajs.jsonl"
    trajs.write_text(Trajectory(task_id="t").model_dump_json() + "\n[1, 2]\n")
    with pytest.raises(BadLine, match=r"trajs.jsonl:2: not a kit Trajectory"):
        read_trajectories(trajs)


def test_completion_loss_matches_the_plain_forward_pass(model_path):
    """The cheap SFT loss (logits only where a label is predicted; a prefix all rows share run once
    and attended through a repeated cache) has the plain loss's value and gradients."""
    from transformers import AutoModelForCausalLM

    from kit.train.sft import completion_loss

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.train()
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(100, 40000, (120,), generator=g)
    rows = [torch.cat([prefix, torch.randint(100, 40000, (n,), generator=g)]) for n in (20, 35, 12)]
    width = max(len(r) for r in rows)
    ids = torch.zeros(3, width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)], labels[i, 125:len(r)] = r, 1, r[125:]
    inputs = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    reference = model(input_ids=ids, attention_mask=mask, labels=labels).loss  # transformers' own loss

    def loss_and_grads(min_prefix):
        model.zero_grad()
        loss = completion_loss(model, inputs, min_prefix=min_prefix)
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain, g_plain = loss_and_grads(min_prefix=10**9)   # sparse logits only
    shared, g_shared = loss_and_grads(min_prefix=64)    # sparse logits + shared prefix
    assert plain == pytest.approx(reference.item(), rel=1e-5) and shared == pytest.approx(plain, rel=1e-5)
    for name, grad in g_plain.items():
        assert torch.allclose(g_shared[name], grad, rtol=1e-3, atol=1e-3 * float(grad.abs().max()) + 1e-8), name


def test_max_tasks_keeps_every_sample_of_the_first_tasks_and_no_other(mock_samples, tmp_path):
    """Arms compared at one task count (the no_validation ablation): sft_agent's `max_tasks` keeps the
    engine samples of the first n tasks in the file's order, all of each task's turns, none of a later task."""
    from kit.stages.sft import Config, training_samples

    agent, _ = mock_samples
    write_samples(agent, tmp_path / "sft_agent.jsonl")
    order = list(dict.fromkeys(s.task_id for s in agent))
    assert len(order) >= 3
    kept, source = training_samples(Config(domain="mock", data=str(tmp_path), max_tasks=2), "agent", st=None)
    assert source == "engine"
    assert [s.task_id for s in kept] == [s.task_id for s in agent if s.task_id in order[:2]]
    assert {s.task_id for s in kept} == set(order[:2])
    everything, _ = training_samples(Config(domain="mock", data=str(tmp_path)), "agent", st=None)
    assert len(everything) == len(agent) > len(kept)


def test_validated_only_trains_on_the_marked_samples_and_refuses_unmarked_ones(mock_samples, tmp_path):
    """sft_agent's `validated_only` (the full arm of the no_validation ablation, out of an engine run with validation
    off) keeps the samples whose meta says validation keeps them, in order; samples of an engine run older than the
    mark are an error that names the file, never a silent 'all of them'. (The mark itself is the engine's, checked
    on a real run in tests/test_engine.py.)"""
    from kit.stages.sft import Config, training_samples

    agent, _ = mock_samples
    write_samples(agent, tmp_path / "sft_agent.jsonl")
    with pytest.raises(ValueError, match=r"validated_only: \d+ of \d+ samples in .*sft_agent.jsonl carry no"):
        training_samples(Config(domain="mock", data=str(tmp_path), validated_only=True), "agent", st=None)
    marked = [s.model_copy(update={"meta": {**s.meta, "validated": k % 3 != 0}}) for k, s in enumerate(agent)]
    write_samples(marked, tmp_path / "sft_agent.jsonl")
    kept, source = training_samples(Config(domain="mock", data=str(tmp_path), validated_only=True), "agent", st=None)
    assert source == "engine"
    assert [(s.prompt, s.completion) for s in kept] == [(s.prompt, s.completion) for s in marked if s.meta["validated"]]
    assert 0 < len(kept) < len(agent)


def _batch(columns, rows):
    """A right-padded batch of the given rows of `tokenize_samples` columns, labels -100 off the completions."""
    width = max(len(columns["input_ids"][i]) for i in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    att = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for k, i in enumerate(rows):
        row, m = torch.tensor(columns["input_ids"][i]), torch.tensor(columns["completion_mask"][i])
        ids[k, :len(row)], att[k, :len(row)] = row, 1
        labels[k, :len(row)] = torch.where(m == 1, row, torch.full_like(row, -100))
    return {"input_ids": ids, "attention_mask": att, "labels": labels}


@pytest.mark.slow  # ~50-65 s on 2 cores: in `make test`, not the fast lane
def test_whole_dialogue_rows_give_the_per_turn_loss_and_gradients(mock_samples, tokenizer, model_path):
    """Whole-dialogue SFT: one row per dialogue holds every agent turn of it, each trained token with the
    context (ids, positions) its per-turn row gives it; the loss over the batch (summed over trained tokens,
    divided by their number: TRL's normalisation) and its gradients equal the per-turn rows', while the
    rows hold a fraction of the tokens."""
    from transformers import AutoModelForCausalLM

    from kit.train.sft import _pairs, completion_loss, tokenize_samples

    agent, _ = mock_samples
    dialogues = list(dict.fromkeys(s.trajectory_id for s in agent))[:3]
    chosen = [s for s in agent if s.trajectory_id in dialogues]
    pairs, _ = _pairs(chosen)
    per_turn, c1 = tokenize_samples(pairs, tokenizer, 4096)
    whole, c2 = tokenize_samples(pairs, tokenizer, 4096, whole_dialogues=True)
    assert c1["rows"] == c1["turns"] == len(pairs) and c2["turns"] == len(pairs)
    assert c2["rows"] == len(dialogues) < len(pairs)  # one row per dialogue, each of several turns
    trained = [[t for t, m in zip(ids, mask) if m] for ids, mask in zip(per_turn["input_ids"], per_turn["completion_mask"])]
    assert sum(map(sum, whole["completion_mask"])) == sum(map(len, trained))  # every trained token once
    assert sum(map(len, whole["input_ids"])) < sum(map(len, per_turn["input_ids"]))  # the prefixes read once
    # each per-turn row is a prefix of its dialogue's row: same ids at the same positions
    for ids in per_turn["input_ids"]:
        assert any(row[:len(ids)] == ids for row in whole["input_ids"])

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.train()

    def loss_and_grads(columns, chunk=None):
        model.zero_grad()
        inputs = _batch(columns, range(len(columns["input_ids"])))
        loss = completion_loss(model, inputs, chunk=chunk)
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    l1, g1 = loss_and_grads(per_turn)
    l2, g2 = loss_and_grads(whole)
    # micro_batch_size: the rows in chunks of one, after one pass of the prefix they all share
    l3, g3 = loss_and_grads(whole, chunk=1)
    assert l2 == pytest.approx(l1, rel=1e-4) and l3 == pytest.approx(l1, rel=1e-4)
    for name, grad in g1.items():
        for g in (g2, g3):
            assert torch.allclose(g[name], grad, rtol=1e-3, atol=1e-3 * float(grad.abs().max()) + 1e-8), name


def test_a_turn_that_does_not_extend_its_dialogue_row_starts_a_window(mock_samples, tokenizer):
    """Exactness first: a turn whose prompt no longer begins with its dialogue's row (the row would pass
    max_seq_len; the prompt was cut from the left) gets a row of its own, and bare prompt/completion pairs
    never share one."""
    from kit.train.sft import _pairs, tokenize_samples

    agent, _ = mock_samples
    first = list(dict.fromkeys(s.trajectory_id for s in agent))[0]
    chosen = [s for s in agent if s.trajectory_id == first]
    assert len(chosen) >= 2
    pairs, _ = _pairs(chosen)
    full, c = tokenize_samples(pairs, tokenizer, 4096, whole_dialogues=True)
    assert c["rows"] == 1
    # a cap just under the whole row: the last turn cannot join, it starts a window
    cap = len(full["input_ids"][0]) - 1
    cut, c = tokenize_samples(pairs, tokenizer, cap, whole_dialogues=True)
    assert c["rows"] == 2 and c["turns"] == len(pairs) and max(map(len, cut["input_ids"])) <= cap
    bare, c = tokenize_samples([(p, q) for p, q, _ in pairs], tokenizer, 4096, whole_dialogues=True)
    assert c["rows"] == len(pairs)


@pytest.mark.slow  # ~50-65 s on 2 cores: in `make test`, not the fast lane
def test_micro_batches_inside_a_batch_train_the_same_weights(mock_samples, tmp_path):
    """micro_batch_size: a batch of whole dialogues runs its shared prefix once and its rows one at a time
    (their backward passes inside the loss); the Trainer's steps give the losses and weights of the whole
    batch in one pass."""
    agent, _ = mock_samples
    agent, _ = grounded_only(agent)
    runs = {}
    for micro in (None, 1):
        cfg = SFTConfig(output_dir=str(tmp_path / str(micro)), lr=1e-4, lr_scheduler="constant", train_steps=1,
                        batch_size=3, micro_batch_size=micro, max_seq_len=2048, seed=0)  # one step: make test's time
        trainer, counts = prepare_sft(agent, cfg)
        assert counts["rows"] < counts["turns"]  # whole dialogues
        trainer.train()
        runs[micro] = ([h["loss"] for h in trainer.state.log_history if "loss" in h],
                       {n: p.detach().clone() for n, p in trainer.model.named_parameters()})
    (l0, w0), (l1, w1) = runs[None], runs[1]
    assert len(l0) == 1 and l1 == pytest.approx(l0, rel=1e-4)
    # each chunk is cut to its own used columns (other matmul shapes, so float32 sums in another order): Adam
    # turns that noise into weight differences of a few 1e-6 where a gradient is near 0 (measured: 8 of 134M
    # weights past 1e-6, the largest 4.6e-6); a wrong gradient moves weights by up to lr (1e-4) per step
    for n, w in w0.items():
        assert torch.allclose(w1[n], w, atol=2e-5, rtol=1e-4), n


def test_a_batch_is_chunked_shortest_rows_first_and_each_chunk_stops_at_its_longest_row():
    """micro_batch_size: rows of similar length share a chunk and a chunk's forward pass runs only to the
    last column one of its rows uses (attends to or is trained on), so it computes little padding."""
    from kit.train.sft import _chunks_by_length, _used_columns

    lengths = [10, 4, 7, 5]
    mask = torch.tensor([[1] * n + [0] * (10 - n) for n in lengths])
    labels = torch.full_like(mask, -100)
    for i, n in enumerate(lengths):
        labels[i, n - 2 : n] = 5  # the last two tokens of each row trained
    chunks = [c.tolist() for c in _chunks_by_length(mask, labels, 2)]
    assert chunks == [[1, 3], [2, 0]]  # lengths 4, 5 | 7, 10
    assert [_used_columns(mask[c], labels[c]) for c in chunks] == [5, 10]
    assert _used_columns(mask[[1]], labels[[1]]) == 4
    # a label past a row's mask (never written by the collator) still keeps its column
    labels[1, 6] = 5
    assert _used_columns(mask[[1]], labels[[1]]) == 7
