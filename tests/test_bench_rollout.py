"""`kit bench rollout`'s arms on the embedded model, at a tiny size (no timing is asserted: these
check that every arm does the same work and reports it, not how fast)."""

import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kit.bench.engines import TransformersGenerateBatch, reference_backend
from kit.bench.rollout import ARMS as ALL_ARMS
from kit.bench.rollout import OPENVINO, ArmResult, bench_arms, report_lines
from kit.errors import BadInput

ARMS = tuple(a for a in ALL_ARMS if a not in OPENVINO)  # the openvino arms need an export: tests/test_bench_openvino.py
LINE = re.compile(r"(?P<arm>[\w-]+): (?P<tokens>\d+) tokens in [\d.]+ s, [\d.]+ tok/s, [\d.]+x the fastest transformers arm")


@pytest.fixture(scope="module")
def backend():
    from kit.llm import make_backend

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield make_backend("embedded")
    torch.set_num_threads(threads)


@pytest.mark.parametrize("engine", ["generate", "generate_batch"])
def test_transformers_engines_share_the_kits_model_and_rendering(backend, engine):
    """hf-generate / hf-generate-batch: transformers' generation behind the same Backend (their episodes:
    test_bench_reports_one_line_per_arm_on_the_same_episodes)."""
    ref = reference_backend(backend, engine)
    try:
        assert (ref.engine, ref.tool_mode, ref.model) == (engine, backend.tool_mode, backend.model)
        assert ref.prefix_cache is None and not ref.fast_decode and not ref.caps.stats
    finally:
        ref.close()


def test_unknown_engine_or_backend_is_refused(backend):
    with pytest.raises(ValueError, match="engine must be one of generate, generate_batch"):
        reference_backend(backend, "vllm")
    with pytest.raises(ValueError, match="needs an hf backend"):
        reference_backend(object(), "generate")
    with pytest.raises(ValueError, match="needs an hf backend"):
        bench_arms(object(), ["hf-generate"])


def test_the_production_backend_has_no_reference_engine(backend):
    """HFBackend is the production sampler only: transformers' engines are the benchmark's."""
    from kit.llm.hf import HFBackend

    assert not any(hasattr(HFBackend, name) for name in ("with_engine", "engine", "_transformers_generate_batch"))
    assert backend.caps.stats


@pytest.mark.slow
def test_bench_reports_one_line_per_arm_on_the_same_episodes(backend):
    lines = []
    results = bench_arms(backend, ARMS, group=2, max_messages=2, max_new_tokens=4, log=lines.append, repeat=1)
    assert [r.arm for r in results] == list(ARMS)
    assert all(r.error is None and r.tokens > 0 for r in results), results
    report = report_lines(results)
    assert [LINE.fullmatch(x).group("arm") for x in report] == list(ARMS)
    assert [x.split(":")[0] for x in lines if x.startswith("repeat")] == ["repeat 1/1"] * len(ARMS)
    assert sum(x.startswith("kit profile: prefill") for x in lines) == 1  # the kit engine's arms only
    assert not any(x.startswith("hf-") and "profile" in x for x in lines)
    for r in results:  # every arm ran whole episodes; the completions carry the sampled ids, counted as the kit counts
        generated = [m for t in r.trajectories for m in t.messages if m.meta.get("completion_tokens")]
        assert len(r.trajectories) == 2 and {m.role for m in generated} == {"assistant", "user"}, r.arm
        for m in generated:
            assert 0 < len(m.meta["token_ids"]) == m.meta["completion_tokens"] <= 4, r.arm
            assert m.meta["prompt_tokens"] > 100, r.arm  # the rendered system prompt and policy
        assert r.tokens == sum(m.meta["completion_tokens"] for m in generated), r.arm


def test_a_failing_arm_is_reported_with_its_error_and_the_others_go_on(backend, monkeypatch):
    def refuse(self, prompts, params):
        raise RuntimeError("no paged attention here")

    monkeypatch.setattr(TransformersGenerateBatch, "_generate", refuse)
    results = bench_arms(backend, ["hf-generate-batch"], group=2, max_messages=2, max_new_tokens=4, log=None)
    assert report_lines(results) == ["hf-generate-batch: failed: RuntimeError: no paged attention here"]
    ok = ArmResult("kit", 100, 2.0)
    assert report_lines([ok, ArmResult("hf-generate", 50, 2.0), results[0]])[0] == \
        "kit: 100 tokens in 2.0 s, 50.0 tok/s, 2.00x the fastest transformers arm"
    assert report_lines([ok]) == ["kit: 100 tokens in 2.0 s, 50.0 tok/s"]  # no transformers arm: no ratio


def test_arms_are_checked_before_anything_runs():
    for arms in ([], ["kit", "kit"], ["kit", "vllm"]):
        with pytest.raises(BadInput, match="arms must be distinct names among"):
            bench_arms(None, arms)
