"""The OpenAI-compatible backend against a real server: `transformers serve` on loopback,
serving the embedded SmolLM2 folder offline. No fake server: what it does with `n`, `tools` and
our messages is exactly what these tests must cope with.
"""

import time

import pytest

from kit.llm import EndpointError, make_backend
from kit.llm.openai_backend import OpenAIBackend

from _serving import free_port, serving

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
FEW_SHOT = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "user", "content": "What is the weather in London?"},
]

# one `transformers serve` per module fixture: keep the module on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("openai_server")


def test_dead_endpoint_raises_after_bounded_retries():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    backend = OpenAIBackend(url, "m", max_attempts=3, timeout=2)
    t0 = time.perf_counter()
    with pytest.raises(EndpointError) as err:
        backend.chat([{"role": "user", "content": "hi"}])
    assert time.perf_counter() - t0 < 5
    msg = str(err.value)
    assert url in msg and "after 3 attempts" in msg and "ConnectError" in msg


def test_native_tool_calls_in_a_response_are_decoded():
    """The response shape vLLM/SGLang return with a tool parser on (OpenAI's documented format)."""
    choice = {"finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": '}},
    ]}}
    c = OpenAIBackend("http://unused/v1", "m")._completion(choice, {"prompt_tokens": 50, "completion_tokens": 9}, 1)
    assert [(t.id, t.name, t.arguments) for t in c.tool_calls] == [("call_1", "get_weather", {"city": "Oslo"})]
    assert len(c.parse_errors) == 1 and "not a JSON object" in c.parse_errors[0]
    assert c.text == "Checking." and c.raw.startswith("Checking.\n<tool_call>")
    assert (c.prompt_tokens, c.completion_tokens, c.finish_reason) == (50, 9, "tool_calls")


def test_returned_logprobs_and_token_ids_travel_on_the_completion():
    """A choice with `logprobs.content` (OpenAI's format; vLLM names tokens "token_id:<id>" with
    return_tokens_as_token_ids): the completion carries them, and caps says so for such a backend."""
    entries = [{"token": "token_id:42", "logprob": -0.5}, {"token": "token_id:7", "logprob": -1.25}]
    choice = {"finish_reason": "stop", "message": {"role": "assistant", "content": "Hi"}, "logprobs": {"content": entries}}
    plain = OpenAIBackend("http://unused/v1", "m")
    assert not plain.caps.logprobs and not plain.caps.token_ids
    c = plain._completion(choice, None, 1)
    assert (c.token_ids, c.logprobs) == ([42, 7], [-0.5, -1.25])
    named = {**choice, "logprobs": {"content": [{**e, "token": "Hi"} for e in entries]}}
    c = plain._completion(named, None, 1)
    assert (c.token_ids, c.logprobs) == (None, [-0.5, -1.25])
    assert plain._completion({"message": {"content": "Hi"}}, None, 1).logprobs is None
    asking = OpenAIBackend("http://unused/v1", "m", extra_body={"logprobs": True, "return_tokens_as_token_ids": True})
    assert asking.caps.logprobs and asking.caps.token_ids and asking.caps.parallel


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The embedded SmolLM2 folder as saved: its stock template ignores `tools`."""
    from kit.llm import ensure_embedded_model

    folder = str(ensure_embedded_model())
    with serving(folder, tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield {"url": url, "model": folder}


# A Qwen2.5-style template that renders tools, and the response template `transformers serve`
# uses to turn <tool_call> blocks back into native `tool_calls` (its Qwen2 fallback).
HERMES_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>{% for tool in tools %}
{{ tool | tojson }}{% endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}{% if m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% elif m.role != 'system' %}<|im_start|>{{ m.role }}
{{ m.content }}{% for tc in m.tool_calls or [] %}{% if m.content or not loop.first %}
{% endif %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% endif %}{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {"open_pattern": r"\s*<tool_call>", "close": "</tool_call>", "repeats": True,
                       "content": "json", "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"\s*(?:<\|im_end\|>|<\|endoftext\|>)", "content": "text"},
    },
}


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    """The same weights with a tool-aware template: the server answers with native `tool_calls`."""
    from transformers import AutoTokenizer

    from kit.llm import ensure_embedded_model

    src = ensure_embedded_model()
    folder = tmp_path_factory.mktemp("smollm2-tools")
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (folder / name).symlink_to(src / name)
    tok = AutoTokenizer.from_pretrained(src)
    tok.chat_template = HERMES_TEMPLATE
    tok.response_template = RESPONSE_TEMPLATE
    tok.save_pretrained(folder)
    with serving(str(folder), folder / "serve.log") as url:
        yield {"url": url, "model": str(folder)}


@pytest.mark.slow
def test_n_completions_by_fan_out(server):
    backend = make_backend(f"openai:{server['url']}#{server['model']}")
    completions = backend.chat([{"role": "user", "content": "Say hi."}], n=3, max_new_tokens=6, seed=0)
    assert len(completions) == 3 and all(c.raw for c in completions)
    assert backend.server_ignores_n  # it returned one choice for n=3; we asked again
    assert all(c.prompt_tokens > 0 and c.finish_reason in ("stop", "length") for c in completions)
    # remembered: the next call fans out at once, concurrently, for several conversations
    groups = backend.generate_batch([[{"role": "user", "content": q}] for q in ("Hi", "Yo")], None,
                                    {"n": 2, "max_new_tokens": 4, "seed": 1})
    assert [len(g) for g in groups] == [2, 2]


@pytest.mark.slow
def test_prompt_tool_mode_parses_a_call_from_text(server):
    backend = make_backend({"spec": f"openai:{server['url']}", "tool_mode": "prompt"})  # model from /models
    [c] = backend.chat(FEW_SHOT, TOOLS, temperature=0, max_new_tokens=30)
    assert backend.model == server["model"]
    assert c.tool_calls or c.parse_errors, f"no tool call in {c.raw!r}"
    assert [(t.name, t.arguments) for t in c.tool_calls] == [("get_weather", {"city": "London"})]


@pytest.mark.slow
def test_native_tool_mode_is_accepted_by_the_server(server):
    """Native mode sends `tools` and OpenAI tool-call history; the server must take both.
    (SmolLM2's template drops the tools, which is why prompt mode exists.)"""
    backend = OpenAIBackend(server["url"], server["model"], tool_mode="native")
    history = FEW_SHOT[:2] + [{"role": "tool", "tool_call_id": "c1", "content": "21 C"}]
    [c] = backend.chat(history, TOOLS, temperature=0, max_new_tokens=6)
    assert c.raw and c.prompt_tokens > 0


@pytest.mark.slow
def test_bad_request_is_not_retried(server):
    backend = OpenAIBackend(server["url"], "not-the-served-model", max_attempts=5)
    t0 = time.perf_counter()
    with pytest.raises(EndpointError, match="refused the request: HTTP 400"):
        backend.chat([{"role": "user", "content": "hi"}], max_new_tokens=2)
    assert time.perf_counter() - t0 < 2


@pytest.mark.slow
def test_native_tool_mode_returns_decoded_tool_calls(tool_server):
    """Native mode end to end: our wire messages -> server template -> server parser -> ToolCall."""
    backend = OpenAIBackend(tool_server["url"], tool_server["model"], tool_mode="native")
    [c] = backend.chat(FEW_SHOT, TOOLS, temperature=0, max_new_tokens=30)
    assert [(t.name, t.arguments) for t in c.tool_calls] == [("get_weather", {"city": "London"})]
    assert c.finish_reason == "tool_calls" and c.parse_errors == [] and c.text == ""
    assert c.tool_calls[0].id  # the server's id, to answer with tool_call_id
    # and the tool result goes back in the OpenAI format the server's template expects
    follow_up = [*FEW_SHOT, c.to_message(), {"role": "tool", "tool_call_id": c.tool_calls[0].id, "content": "12 C"}]
    [d] = backend.chat(follow_up, TOOLS, temperature=0, max_new_tokens=8)
    assert d.prompt_tokens > c.prompt_tokens
