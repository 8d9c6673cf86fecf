"""cpu_bf16 (kit/llm/precision.py): what it turns on, where, and that the numbers stay those of float32 up to
bf16 rounding. The bf16 parts need a CPU with bf16 instructions (AVX512-BF16 / AMX) and are skipped elsewhere;
the off-switch and the environment plumbing are checked everywhere."""

import os

import pytest
import torch
from torch import nn

from kit.llm import precision
from kit.llm.fast.packed_linear import PackedLinears, available
from kit.train.sequences import token_logprobs
from test_grpo_learning import tiny_llama, tokenizer  # noqa: F401  (the shared tiny model and tokenizer)
from test_grpo_prefix import realistic_rows

bf16_cpu = pytest.mark.skipif(not precision.supported(), reason="this CPU has no bf16 instructions")


@pytest.fixture
def env(monkeypatch):
    def set_(value):
        if value is None:
            monkeypatch.delenv(precision.ENV, raising=False)
        else:
            monkeypatch.setenv(precision.ENV, value)
    return set_


def test_off_unless_asked(env):
    model = nn.Linear(8, 8)
    for value in (None, "0", "false", ""):
        env(value)
        assert not precision.requested() and not precision.enabled()
        with precision.autocast(model):
            assert not torch.is_autocast_enabled("cpu")
    assert precision.describe(False) == "cpu_bf16 off: float32 compute"


def test_a_stage_param_sets_the_environment_both_ways(env, capsys):
    from kit.runner.stage import process_settings

    env("1")
    process_settings({"cpu_bf16": False})
    assert os.environ[precision.ENV] == "0" and not precision.requested()
    process_settings({"cpu_bf16": True})
    assert os.environ[precision.ENV] == "1" and precision.requested()
    assert "cpu_bf16" in capsys.readouterr().out  # the stage's log says what it got
    env("1")
    process_settings({"threads": 2})  # a stage without the param leaves it as it was
    assert os.environ[precision.ENV] == "1"


@bf16_cpu
def test_autocast_only_for_a_float32_cpu_model(env):
    env("1")
    with precision.autocast(nn.Linear(8, 8)):
        assert torch.is_autocast_enabled("cpu")
        assert nn.Linear(8, 8)(torch.randn(2, 8)).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")
    with precision.autocast(nn.Linear(8, 8).bfloat16()):  # already bf16 weights: nothing to do
        assert not torch.is_autocast_enabled("cpu")
    with precision.autocast(nn.Linear(8, 8), flag=False):  # an explicit flag wins over the environment
        assert not torch.is_autocast_enabled("cpu")


@bf16_cpu
@pytest.mark.skipif(not available(), reason="no oneDNN packed linear ops in this torch build")
def test_bf16_packed_linears_give_float32_outputs_within_bf16_rounding():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 32, bias=False))
    x = torch.randn(5, 3, 64)
    with torch.no_grad():
        ref = model(x)
        packs = PackedLinears(bf16=True)
        with packs.use(model):
            out = model(x)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    err = (out - ref).abs().max() / ref.abs().max()
    assert 0 < err < 2e-2, err  # not float32's result (the packs are bf16), within bf16's rounding of it
    with torch.no_grad(), PackedLinears(bf16=False).use(model):
        assert torch.allclose(model(x), ref, atol=1e-5)


@bf16_cpu
def test_autocast_log_probs_and_gradients_follow_float32(env, tokenizer):
    """GRPO's update under cpu_bf16: the same log-probs and gradient direction as float32, within bf16 rounding
    (a wrong cast, a dropped mask or a gradient that stops at a bf16 tensor would break this)."""
    model = tiny_llama(tokenizer)
    model.train()
    rows = realistic_rows(tokenizer)

    def run(flag):
        model.zero_grad()
        with precision.autocast(model, flag=flag):
            logp, mask = token_logprobs(model, rows, tokenizer.pad_token_id, 0.7)
        assert logp.dtype == torch.float32
        adv = torch.tensor([r.advantage for r in rows])[:, None]
        (-(logp * adv * mask).sum() / mask.sum()).backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return logp.detach(), mask, grads

    lp32, mask, g32 = run(False)
    lp16, mask16, g16 = run(True)
    on = mask > 0
    assert torch.equal(mask, mask16)
    assert (lp16[on] - lp32[on]).abs().max() < 0.1  # nats per token
    assert not torch.equal(lp16, lp32)  # bf16 did run
    cos = torch.nn.functional.cosine_similarity(g16, g32, dim=0)
    assert cos > 0.99, cos
    assert g16.dtype == torch.float32  # master weights' gradients stay float32
