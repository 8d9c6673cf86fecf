"""Tool calls as text: what the model is shown and how its output is read back (no model needed)."""

import json
import random

import pytest

from kit.llm import Completion, ToolCall, make_backend
from kit.llm.toolcalls import parse_tool_calls, render_tool_call, render_tools_section, to_prompt_messages

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_rendered_call_parses_back_to_the_same_call():
    args = {"city": "Zürich", "days": [1, 2], "units": {"temp": "C"}, "note": 'say "hi"'}
    raw = "Let me check.\n" + render_tool_call("get_weather", args)
    text, calls, errors = parse_tool_calls(raw)
    assert (text, errors) == ("Let me check.", [])
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", args)]
    assert calls[0].id.startswith("call_")


def test_openai_string_arguments_render_as_objects():
    assert render_tool_call("f", '{"a": 1}') == render_tool_call("f", {"a": 1})
    assert json.loads(render_tool_call("f", None).split("\n")[1]) == {"name": "f", "arguments": {}}


def test_several_calls_and_surrounding_text():
    raw = (
        'First.<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {"x": 1}}\n</tool_call>Last.'
    )
    text, calls, errors = parse_tool_calls(raw)
    assert [c.name for c in calls] == ["a", "b"] and calls[1].arguments == {"x": 1}
    assert text == "First.\nLast." and errors == []
    assert calls[0].id != calls[1].id


def test_missing_closing_tag_is_tolerated_and_trailing_text_kept():
    text, calls, errors = parse_tool_calls('<tool_call>\n{"name": "a", "arguments": {"k": "v"}}\nDone now.')
    assert [(c.name, c.arguments) for c in calls] == [("a", {"k": "v"})]
    assert (text, errors) == ("Done now.", [])


def test_unclosed_block_ends_at_the_next_block():
    _, calls, errors = parse_tool_calls('<tool_call>{"name": "a", "arguments": {}}<tool_call>{"name": "b"}</tool_call>')
    assert [c.name for c in calls] == ["a", "b"] and errors == []
    assert calls[1].arguments == {}  # no "arguments" means no arguments


def test_code_fence_single_quotes_and_list_of_calls_are_tolerated():
    fenced = '<tool_call>\n```json\n{"name": "a", "arguments": {"x": 2}}\n```\n</tool_call>'
    quoted = "<tool_call>{'name': 'b', 'arguments': {'flag': True}}</tool_call>"
    listed = '<tool_call>[{"name": "c", "arguments": {}}, {"name": "d", "arguments": "{\\"y\\": 3}"}]</tool_call>'
    _, calls, errors = parse_tool_calls(fenced + quoted + listed)
    assert errors == []
    assert [(c.name, c.arguments) for c in calls] == [
        ("a", {"x": 2}), ("b", {"flag": True}), ("c", {}), ("d", {"y": 3})
    ]


@pytest.mark.parametrize(
    "body, reason",
    [
        ('{"name": "a", "arguments": {"x": 1}', "invalid JSON"),
        ('{"name": "a", "arguments": {"x": 1}}}', "invalid JSON"),
        ('{"arguments": {"x": 1}}', 'missing "name"'),
        ('{"name": "a", "arguments": [1, 2]}', "must be a JSON object"),
        ('{"name": "a", "arguments": "{not json"}', "not JSON"),
        ('"just a string"', "expected a JSON object"),
        ("", "empty"),
    ],
)
def test_malformed_block_is_an_error_not_an_exception(body, reason):
    text, calls, errors = parse_tool_calls(f"Before. <tool_call>{body}</tool_call> After.")
    assert calls == []
    assert len(errors) == 1 and reason in errors[0] and errors[0].startswith("tool call 1 could not be parsed")
    assert text == "Before.\nAfter."  # the broken block never leaks into the text


def test_one_bad_block_does_not_spoil_the_good_one():
    raw = '<tool_call>{"name": "ok", "arguments": {}}</tool_call><tool_call>{"name": oops}</tool_call>'
    _, calls, errors = parse_tool_calls(raw)
    assert [c.name for c in calls] == ["ok"]
    assert len(errors) == 1 and errors[0].startswith("tool call 2")


def test_parser_never_raises_on_junk():
    rng = random.Random(0)
    pieces = ["<tool_call>", "</tool_call>", "{", "}", "[", "]", '"name"', ":", '"f"', ",", '"arguments"',
              "'", "```", "json", "\n", "True", "{1: 2}", "{'a'}", "(1, 2)", "null", "x" * 3, "\\", '"']
    for _ in range(2000):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 25)))
        text, calls, errors = parse_tool_calls(raw)
        assert "<tool_call>" not in text and "</tool_call>" not in text
        assert all(e.startswith("tool call ") for e in errors)
        for c in calls:
            json.dumps(c.to_openai())  # every accepted call can be sent back to a server


def test_plain_text_has_no_calls_and_no_errors():
    assert parse_tool_calls("  Paris is the capital.  ") == ("Paris is the capital.", [], [])


def test_prompt_messages_carry_tools_calls_and_results_as_text():
    conversation = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "3 C"},
        {"role": "tool", "tool_call_id": "c2", "content": "19 C"},
        {"role": "assistant", "content": "Oslo 3 C, Rome 19 C."},
    ]
    out = to_prompt_messages(conversation, [WEATHER])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant"]
    assert out[0]["content"].startswith("You are an agent.\n\n# Tools")
    assert json.dumps(WEATHER) in out[0]["content"]
    assert out[3]["content"] == "<tool_response>\n3 C\n</tool_response>\n<tool_response>\n19 C\n</tool_response>"
    _, calls, errors = parse_tool_calls(out[2]["content"])  # what we show is what we parse
    assert [c.arguments["city"] for c in calls] == ["Oslo", "Rome"] and errors == []
    assert all(set(m) == {"role", "content"} for m in out)
    assert conversation[2]["content"] is None  # the input is not modified


def test_tools_section_is_added_as_system_when_there_is_none():
    out = to_prompt_messages([{"role": "user", "content": "hi"}], [WEATHER["function"]])  # bare schema ok
    assert out[0] == {"role": "system", "content": render_tools_section([WEATHER])}
    assert to_prompt_messages([{"role": "user", "content": "hi"}], None) == [{"role": "user", "content": "hi"}]


def test_completion_becomes_an_openai_assistant_message():
    c = Completion(text="ok", raw="", tool_calls=[ToolCall(id="c9", name="f", arguments={"a": [1]})])
    assert c.to_message() == {
        "role": "assistant", "content": "ok",
        "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "f", "arguments": '{"a": [1]}'}}],
    }


def test_vllm_backend_fails_clearly_without_vllm_or_cuda(tmp_path):
    pytest.importorskip("torch")
    try:
        import torch
        import vllm  # noqa: F401
        if torch.cuda.is_available():
            pytest.skip("vllm and CUDA are present: nothing to refuse")
    except ImportError:
        pass
    with pytest.raises(RuntimeError, match="vllm|CUDA"):
        make_backend(f"vllm:{tmp_path}")


def test_one_tool_call_record_for_backends_and_trajectories():
    from kit.trajectory import Message
    from kit.trajectory import ToolCall as StoredToolCall

    assert StoredToolCall is ToolCall
    tc = ToolCall(id="c1", name="f", arguments={"a": "é"})
    # the JSON trajectories.jsonl holds: field order and defaults as they were
    assert Message(role="assistant", tool_calls=[tc]).model_dump_json().startswith(
        '{"role":"assistant","content":null,"tool_calls":[{"id":"c1","name":"f","arguments":{"a":"é"},'
        '"requestor":"assistant"}]')
    assert tc.to_openai()["function"] == {"name": "f", "arguments": '{"a": "é"}'}


def test_vllm_completion_carries_sampled_token_ids_and_their_logprobs():
    """The conversion of a vLLM CompletionOutput (no GPU here: an object of vLLM's documented
    shape, `logprobs` one {token id: Logprob} per sampled token) into a kit Completion."""
    from types import SimpleNamespace as NS

    from kit.llm.vllm_backend import VLLMBackend

    out = NS(text='<tool_call>{"name": "get_users", "arguments": {}}</tool_call>', token_ids=[5, 9, 2],
             finish_reason="stop",
             logprobs=[{5: NS(logprob=-0.5), 7: NS(logprob=-1.0)}, {9: NS(logprob=-0.25)}, {2: NS(logprob=-2.0)}])
    c = VLLMBackend._completion(out, prompt_tokens=11, logprobs=True)
    assert c.token_ids == [5, 9, 2] and c.logprobs == [-0.5, -0.25, -2.0]
    assert [t.name for t in c.tool_calls] == ["get_users"] and c.finish_reason == "tool_calls"
    assert VLLMBackend._completion(out, prompt_tokens=11).logprobs is None  # not requested
