"""kit.llm.vllm_backend: at most one in-process vLLM engine (one model) per process.

vllm is not installed on CPU machines: a stand-in `vllm` module (its `LLM` records its arguments)
and torch's CUDA check are replaced, so that the kit's own VLLMBackend code runs unchanged."""

import sys
import types

import pytest
import torch

from kit.errors import Unavailable, UserError
from kit.llm.vllm_backend import TwoEngines, VLLMBackend


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")

    class LLM:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def get_tokenizer(self):
            return object()

    mod.LLM = LLM
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return mod


def _folder(tmp_path, name):
    d = tmp_path / name
    d.mkdir()
    return str(d)


def test_a_second_engine_for_another_model_is_refused_naming_both(fake_vllm, tmp_path):
    agent, user = _folder(tmp_path, "agent"), _folder(tmp_path, "user")
    first = VLLMBackend(agent, tool_mode="prompt")
    with pytest.raises(TwoEngines) as e:
        VLLMBackend(user, tool_mode="prompt")
    assert isinstance(e.value, UserError) and isinstance(e.value, Unavailable)
    assert agent in str(e.value) and user in str(e.value)
    assert "vllm serve" in e.value.hint and "openai:" in e.value.hint
    same = VLLMBackend(agent, tool_mode="prompt")  # the same model again: not refused here
    first.close()
    same.close()
    VLLMBackend(user, tool_mode="prompt").close()  # once the first engine is closed, another model may load


def test_the_check_comes_before_vllm_is_imported(fake_vllm, tmp_path, monkeypatch):
    agent = VLLMBackend(_folder(tmp_path, "agent"), tool_mode="prompt")
    monkeypatch.delitem(sys.modules, "vllm")  # no vllm at all: TwoEngines, not "needs the vllm package"
    monkeypatch.setattr("builtins.__import__", _no_vllm(__import__))
    with pytest.raises(TwoEngines):
        VLLMBackend(_folder(tmp_path, "user"), tool_mode="prompt")
    agent.close()


def _no_vllm(real):
    def imp(name, *a, **k):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError("no vllm here")
        return real(name, *a, **k)
    return imp
