"""kit.runner.memory: the per-process GPU memory estimate `kit run --validate` checks GPU recipes with."""

import json
import textwrap
from pathlib import Path

import pytest

from kit.cli import main
from kit.runner import load_recipe
from kit.runner.memory import GIB, KNOWN_MODELS, Hardware, estimate_stage, lora_params, model_shape, user_engine
from kit.runner.recipe import RecipeError

ROOT = Path(__file__).resolve().parents[1]
GPU_RECIPES = [ROOT / f"recipes/{d}-qwen3.yaml" for d in ("airline", "retail", "telecom")]
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 128, "vocab_size": 1000, "tie_word_embeddings": True,
        "model_type": "qwen3", "max_position_embeddings": 512}


def _folder(tmp_path, name, cfg):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def test_tiny_dense_model_by_hand(tmp_path):
    shape = model_shape(_folder(tmp_path, "tiny", TINY), Hardware())
    # per layer: q 64x64 + k,v 2x64x32 + o 64x64 = 12288; MLP 3x64x128 = 24576; norms 2x64 + 2x16 = 160
    # embeddings (tied) 1000x64 + final norm 64
    assert shape.params == 2 * (12288 + 24576 + 160) + 64000 + 64 == 138112
    assert shape.active == shape.params and "config.json" in shape.source
    hw = Hardware(gpus=1, gpu_memory_gib=1)
    e = estimate_stage("sft_agent", {"dtype": "float32", "batch_size": 2, "max_seq_len": 100}, shape, hw)
    P, tokens = 138112, 200
    assert e.weights * GIB == P * 4 and e.grads * GIB == P * 4 and e.optimizer * GIB == P * 8  # fp32: no master
    assert e.activations * GIB == tokens * 64 * 34 * 2 + tokens * 1000 * 4
    lora = estimate_stage("sft_agent", {"lora": True, "lora_r": 2, "lora_target_modules": ["q_proj", "v_proj"],
                                        "gradient_checkpointing": True, "batch_size": 2, "max_seq_len": 100}, shape, hw)
    A = 2 * 2 * ((64 + 64) + (64 + 32))  # r x (in + out), 2 layers
    assert lora.trainable == A and lora.grads * GIB == A * 4 and lora.optimizer * GIB == A * 12
    assert lora.weights * GIB == P * 2 + A * 4  # bf16 base ('auto' on CUDA) + fp32 adapter
    assert lora.activations * GIB == tokens * 64 * 2 * 2 + tokens * 64 * 34 + tokens * 1000 * 4


def test_qwen3_30b_a3b_shaped_config_by_hand(tmp_path):
    cfg = dict(KNOWN_MODELS["qwen3-30b-a3b"], model_type="qwen3_moe")
    shape = model_shape(_folder(tmp_path, "moe", cfg), Hardware())
    h, L, V = 2048, 48, 151936
    attn = h * 4096 + 2 * h * 512 + 4096 * h
    expert = 3 * h * 768
    per_layer = attn + 128 * expert + h * 128 + 2 * h + 2 * 128
    assert shape.params == L * per_layer + 2 * V * h + h
    assert round(shape.params / 1e9, 1) == 30.5 and round(shape.active / 1e9, 1) == 3.4  # model card: 30.5B, 3.3B
    # full AdamW GRPO in one process: 16 bytes/param before activations, ~455 GiB (the "roughly 240 GB"
    # counted no fp32 master weights), beside a vLLM engine taking 0.85 of an H200
    e = estimate_stage("grpo", {"dtype": "bfloat16", "micro_batch_size": 1, "max_seq_tokens": 1024}, shape,
                       Hardware(gpus=1, gpu_memory_gib=140))
    assert (e.weights + e.grads + e.optimizer) * GIB == 16 * shape.params
    assert e.rollout == 0.85 * 140 and e.total > 140
    z2 = estimate_stage("grpo", {"dtype": "bfloat16", "micro_batch_size": 1, "max_seq_tokens": 1024}, shape,
                        Hardware(gpus=8, zero_stage=2, rollout="server"))
    assert z2.grads * GIB == 2 * shape.params / 8 and z2.optimizer * GIB == 12 * shape.params / 8 and z2.rollout == 0
    z3 = estimate_stage("grpo", {"dtype": "bfloat16", "micro_batch_size": 1, "max_seq_tokens": 1024}, shape,
                        Hardware(gpus=8, zero_stage=3, rollout="server"))
    assert z3.weights * GIB == 2 * shape.params / 8
    # GRPO with LoRA (kit.train.lora): frozen bf16 base, fp32 adapters with their gradients and AdamW states;
    # gradient checkpointing keeps one layer's activations instead of every layer's
    full = dict(dtype="bfloat16", micro_batch_size=1, max_seq_tokens=16384)
    lo = estimate_stage("grpo", {**full, "lora": True, "lora_r": 16, "gradient_checkpointing": True}, shape,
                        Hardware(gpus=1, gpu_memory_gib=140, rollout="server"))
    A = lora_params(shape, 16, "all-linear")
    assert lo.trainable == A < shape.params / 30  # r 16 on every linear layer and expert: 0.85B
    assert lo.weights * GIB == 2 * shape.params + 4 * A and lo.optimizer * GIB == 12 * A and lo.grads * GIB == 4 * A
    no_ckpt = estimate_stage("grpo", {**full, "lora": True, "lora_r": 16}, shape, Hardware(gpus=1, rollout="server"))
    assert lo.activations < no_ckpt.activations / 4


def test_a_recipe_that_cannot_fit_is_rejected_naming_file_line_and_field(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_AGENT_MODEL", _folder(tmp_path, "agent", {}))
    p = tmp_path / "big.yaml"
    p.write_text(textwrap.dedent("""\
        name: big
        domain: mock
        base_model: "${KIT_AGENT_MODEL}"
        hardware: {kind: gpu, gpus: 1, gpu_memory_gib: 140, model_family: qwen3-30b-a3b}
        stages:
          - stage: grpo
            params: {micro_batch_size: 1, max_seq_tokens: 4096, fallback_split: train}
          - stage: report
        """))
    with pytest.raises(RecipeError) as e:
        load_recipe(p, check_gpu=False)
    assert [(line, where) for line, where, _ in e.value.problems] == [(6, "stages[0].params.max_seq_tokens")]
    assert f"{p}:6: stages[0].params.max_seq_tokens: stage 'grpo' needs about" in str(e.value)
    assert "140 GiB per GPU" in str(e.value)


def test_a_gpu_recipe_must_declare_its_hardware_as_a_mapping(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_text("name: g\ndomain: mock\nhardware: gpu\nstages:\n  - stage: report\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(p, check_gpu=False)
    assert e.value.problems[0][:2] == (3, "hardware")


@pytest.mark.parametrize("recipe", GPU_RECIPES, ids=lambda p: p.name)
@pytest.mark.parametrize("with_config", [False, True], ids=["family", "config.json"])
def test_every_gpu_recipe_fits_and_prints_its_estimate(recipe, with_config, tmp_path, monkeypatch, capsys):
    cfg = dict(KNOWN_MODELS["qwen3-30b-a3b"], model_type="qwen3_moe") if with_config else {}
    for var in ("KIT_AGENT_MODEL", "KIT_USER_MODEL"):
        monkeypatch.setenv(var, _folder(tmp_path, var, cfg))
    assert main(["run", str(recipe), "--validate"]) == 0
    out = capsys.readouterr().out
    assert "memory per process (GiB): 8 GPU(s) x 140 GiB, ZeRO-2, rollout server on 8 other GPU(s)" in out
    rows = out.split("memory per process")[1].splitlines()
    for stage in ("sft_user", "sft_agent", "grpo"):
        line = next(x for x in rows if x.strip().startswith(stage + " "))
        assert line.endswith("/ 140 fits") and "30.53B" in line, line
    assert ("config.json" if with_config else "model_family qwen3-30b-a3b") in out
    grpo = next(x for x in rows if x.strip().startswith("grpo "))
    assert grpo.split()[-5] == "0.0", grpo  # the rollout column: GRPO's user is a server, no engine on the card
    assert "grpo: user simulator behind a server (openai:): no vLLM engine on the training GPU" in out


def test_where_grpo_samples_its_user_is_read_from_its_params():
    assert user_engine({"user_model": "openai:http://127.0.0.1:8002/v1", "backend": "vllm"}) == "server"
    assert user_engine({"user_model": "@sft_user", "backend": "vllm"}) == "vllm"
    assert user_engine({"user_model": "/models/u", "backend": "hf"}) == "hf"
    assert user_engine({"user_model": "vllm:/models/u", "backend": "hf"}) == "vllm"
    assert user_engine({"user_model": "hf:/models/u", "backend": "vllm"}) == "hf"


def test_an_in_process_vllm_user_is_counted_and_refused_under_rollout_server(tmp_path, monkeypatch):
    """The GPU recipes with GRPO's fine-tuned user back in the training process on vLLM (what they did
    before issue #18): `rollout: server` is refused where the user is; declared in_process, its engine
    (0.85 of the card) is counted and the stage no longer fits."""
    for var in ("KIT_AGENT_MODEL", "KIT_USER_MODEL"):
        monkeypatch.setenv(var, _folder(tmp_path, var, {}))
    recipe = GPU_RECIPES[0]
    back = {"grpo.user_model": "@sft_user", "defaults.backend": "vllm"}
    with pytest.raises(RecipeError) as e:
        load_recipe(recipe, overrides=back, check_gpu=False)
    where = [w for _, w, _ in e.value.problems]
    assert where[0].endswith("params.user_model") and "rollout: server" in e.value.problems[0][2], e.value.problems
    assert "vllm serve" in e.value.problems[0][2]
    with pytest.raises(RecipeError) as e:
        load_recipe(recipe, overrides={**back, "hardware.rollout": "in_process"}, check_gpu=False)
    (_, where, msg), = e.value.problems
    assert where.endswith("params.max_seq_tokens") and f"rollout engine {0.85 * 140:.0f}" in msg, msg
    assert "user_model: openai:URL#MODEL" in msg


def test_cpu_recipes_get_no_estimate(capsys):
    for name in ("quickstart-cpu", "laptop-repro"):
        r = load_recipe(ROOT / f"recipes/{name}.yaml")
        assert r.spec.hardware == "cpu" and r.memory == []
    assert main(["run", str(ROOT / "recipes/quickstart-cpu.yaml"), "--validate"]) == 0
    assert "memory per process" not in capsys.readouterr().out
