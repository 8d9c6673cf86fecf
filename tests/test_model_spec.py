"""Model specs: the one parser (kit.llm.spec), what the runner records of a spec, and how the
report shows one (no model needed)."""

import hashlib

import pytest

from kit.llm.spec import ModelSpec


def test_string_forms_parse_and_print_back():
    for s in ("embedded", "hf:/models/x", "vllm:/models/x", "hf:embedded",
              "openai:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B", "openai:https://api.example.com/v1"):
        assert str(ModelSpec.parse(s)) == s
    m = ModelSpec.parse("openai:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B")
    assert (m.kind, m.url, m.model, m.local) == ("openai", "http://127.0.0.1:8000/v1", "Qwen/Qwen3-8B", False)
    assert ModelSpec.parse("openai:https://api.example.com/v1").model is None
    assert ModelSpec.parse("hf:embedded").embedded and ModelSpec.parse("vllm:embedded").embedded
    assert not ModelSpec.parse("hf:/models/x").embedded


def test_dict_forms_carry_backend_options():
    m = ModelSpec.parse({"spec": "openai:http://h/v1#m", "tool_mode": "prompt", "timeout": 2})
    assert str(m) == "openai:http://h/v1#m" and m.options == {"tool_mode": "prompt", "timeout": 2}
    assert m.backend_kwargs() == {"base_url": "http://h/v1", "model": "m", "tool_mode": "prompt", "timeout": 2}
    assert ModelSpec.parse({"spec": "embedded", "device": "cpu"}).backend_kwargs() == {"device": "cpu"}
    b = ModelSpec.parse({"backend": "openai", "base_url": "http://h/v1", "tool_mode": "prompt"})
    assert (b.kind, b.url, b.model, b.options) == ("openai", "http://h/v1", None, {"tool_mode": "prompt"})
    assert ModelSpec.parse({"backend": "hf", "path": "/m", "device": "cpu"}).backend_kwargs() == {
        "path": "/m", "device": "cpu"}


def test_bare_folders(tmp_path):
    # a bare string is a folder of the kind the caller serves folders with, kept as written
    assert str(ModelSpec.parse("runs/r/sft/model", folder_kind="vllm")) == "vllm:runs/r/sft/model"
    assert str(ModelSpec.parse("runs/r/sft/model", folder_kind="hf")) == "hf:runs/r/sft/model"
    assert str(ModelSpec.parse("embedded", folder_kind="vllm")) == "embedded"
    # without one, only an existing folder is a spec (else a typo such as a hub id)
    assert ModelSpec.parse(str(tmp_path)) == ModelSpec("hf", path=str(tmp_path))
    with pytest.raises(ValueError, match="unknown model spec 'gpt-4o'"):
        ModelSpec.parse("gpt-4o")


@pytest.mark.parametrize("bad, words", [
    ("openai:localhost:8000", "http"), ("hf:", "names no folder"), ("@sft_agent", "recipe reference"),
    ({"backend": "gguf"}, "'spec' or 'backend'"), (3, "string or a dict")])
def test_bad_specs_are_named_in_the_error(bad, words):
    with pytest.raises(ValueError, match=words) as e:
        ModelSpec.parse(bad)
    assert repr(bad) in str(e.value)


def test_folder_is_a_local_hf_folder(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    assert ModelSpec.parse(f"hf:{folder}").folder() == str(folder)
    assert ModelSpec.parse(f"vllm:{folder}").folder() == str(folder)
    assert ModelSpec.parse(str(folder), folder_kind="hf").folder() == str(folder)
    with pytest.raises(ValueError, match="local HF model folder"):
        ModelSpec.parse("openai:http://h:1/v1#m").folder()
    with pytest.raises(FileNotFoundError, match="nope"):
        ModelSpec.parse(str(tmp_path / "nope"), folder_kind="hf").folder()


def test_manifest_describes_a_folder_and_an_endpoint(tmp_path):
    from kit.runner.manifest import describe_model

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"], "_name_or_path": "Qwen3-8B"}')
    (folder / "model.safetensors").write_bytes(b"weights")
    d = describe_model(f"vllm:{folder}")
    assert d["kind"] == "vllm" and d["id"] == "Qwen3-8B" and d["architecture"] == "Qwen3ForCausalLM"
    assert d["files"]["model.safetensors"] == hashlib.sha256(b"weights").hexdigest()
    assert describe_model(str(folder))["kind"] == "hf"
    assert describe_model(str(tmp_path / "gone"))["missing"] is True
    e = describe_model("openai:http://127.0.0.1:8000/v1#Qwen3-30B-A3B")
    assert e["kind"] == "openai" and e["id"] == "Qwen3-30B-A3B" and "not hashed" in e["note"]


def test_report_writes_the_run_folder_as_run(tmp_path):
    from kit.report.build import _short

    run = tmp_path / "runs" / "r1"
    assert _short(f"hf:{run}/sft_agent/model", run) == "hf:<run>/sft_agent/model"
    assert _short(f"vllm:{run}/sft_agent/model", run) == "vllm:<run>/sft_agent/model"
    assert _short(f"{run}/eval/eval.ipynb", run) == "<run>/eval/eval.ipynb"
    assert _short("openai:http://h/v1#m", run) == "openai:http://h/v1#m"
    assert _short("embedded", run) == "embedded" and _short(None, run) == "None"
