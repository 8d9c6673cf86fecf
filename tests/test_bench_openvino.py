"""`kit bench rollout`'s openvino arms (kit/bench/engines.py: OpenVINOGenAI) and the export behind them
(kit/bench/openvino_export.py). The arms' failures need neither openvino_genai nor an export; the real
episodes need both: the `openvino` extra in this venv and the exporter's side venv (optimum-intel),
found at $KIT_OV_EXPORT_PYTHON or .venv-ov-export/bin/python (`make openvino-export-env`);
$KIT_OPENVINO_MODEL names an export already made instead."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from kit.bench.openvino_export import REQUIRED, check_export, compressed_constants, export_openvino
from kit.bench.rollout import ARMS, OPENVINO, bench_arms, check_arms, report_lines
from kit.errors import NotFound, Unavailable
from test_bench_rollout import backend  # noqa: F401  (the embedded model's backend at one thread, per module)

HAS_GENAI = importlib.util.find_spec("openvino_genai") is not None
needs_genai = pytest.mark.skipif(not HAS_GENAI, reason="openvino_genai is not installed (pip install -e '.[openvino]')")
ROOT = Path(__file__).resolve().parent.parent


def _side_python() -> Path | None:
    for cand in (os.environ.get("KIT_OV_EXPORT_PYTHON"), ROOT / ".venv-ov-export/bin/python"):
        if cand and Path(cand).is_file():
            return Path(cand)
    return None


@pytest.fixture(scope="session")
def openvino_model(tmp_path_factory):
    """An fp32 OpenVINO export of the embedded model, made once per session (~40 s) by the side venv."""
    if not HAS_GENAI:
        pytest.skip("openvino_genai is not installed (pip install -e '.[openvino]')")
    given = os.environ.get("KIT_OPENVINO_MODEL")
    if given:
        return check_export(given)
    python = _side_python()
    if python is None:
        pytest.skip("no exporter side venv (optimum-intel[openvino]): set KIT_OV_EXPORT_PYTHON or make openvino-export-env")
    out = tmp_path_factory.mktemp("openvino") / "smollm2-fp32"
    info = export_openvino(python, out, log=None)
    assert info["weight_format"] == "fp32" and info["side_versions"]["optimum-intel"]
    assert info["greedy_check"].startswith("openvino and transformers agree on the first"), info
    return out


def test_openvino_arms_are_arms():
    assert set(OPENVINO) <= set(ARMS)
    check_arms(["kit", "openvino", "openvino-native"])


def test_the_arm_without_an_export_fails_as_its_line(backend):
    results = bench_arms(backend, ["openvino"], group=2, max_messages=2, max_new_tokens=4, log=None)
    line, = report_lines(results)
    assert line.startswith("openvino: failed: BadInput: the openvino arms need an OpenVINO export of the model: "
                           "--openvino-model DIR"), line


def test_the_arm_without_the_package_fails_as_its_line(backend, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "openvino_genai", None)  # import openvino_genai raises ImportError
    results = bench_arms(backend, ["openvino-native"], group=2, max_messages=2, max_new_tokens=4, log=None,
                         openvino_model=tmp_path)
    line, = report_lines(results)
    assert line.startswith("openvino-native: failed: Unavailable: openvino_genai is not installed in this venv"), line
    assert "pip install -e '.[openvino]'" in line


@needs_genai
def test_the_arm_with_a_missing_or_incomplete_folder_fails_as_its_line(backend, tmp_path):
    lines = []
    results = bench_arms(backend, ["openvino"], group=2, max_messages=2, max_new_tokens=4, log=lines.append,
                         openvino_model=tmp_path / "nowhere")
    assert report_lines(results)[0].startswith(f"openvino: failed: NotFound: no OpenVINO export folder at {tmp_path / 'nowhere'}")
    assert lines == [f"openvino failed: {results[0].error}"]  # no warm-up, no timed run
    (tmp_path / "config.json").write_text("{}")
    results = bench_arms(backend, ["openvino"], group=2, max_messages=2, max_new_tokens=4, log=None,
                         openvino_model=tmp_path)
    assert "is not a complete OpenVINO export (missing openvino_model.xml" in results[0].error


def test_check_export_names_what_is_missing(tmp_path):
    for name in REQUIRED[:-1]:
        (tmp_path / name).write_text("")
    with pytest.raises(NotFound, match="missing openvino_detokenizer.xml"):
        check_export(tmp_path)
    (tmp_path / REQUIRED[-1]).write_text("")
    assert check_export(tmp_path) == tmp_path


def test_compressed_constants_reads_the_weights_element_types(tmp_path):
    xml = tmp_path / "openvino_model.xml"
    xml.write_text('<net><layers>'
                   '<layer id="0" name="w" type="Const" version="opset1">\n<data element_type="f32" shape="4, 4"/></layer>'
                   '<layer id="1" name="q" type="Const" version="opset1"><data element_type="u8" shape="4, 4"/></layer>'
                   '<layer id="2" name="s" type="Const" version="opset1"><data element_type="f16" shape="4, 1"/></layer>'
                   '<layer id="3" name="i" type="Const" version="opset1"><data element_type="i64" shape="1"/></layer>'
                   '<layer id="4" name="x" type="Parameter" version="opset1"><data element_type="f16" shape="1"/></layer>'
                   '</layers></net>')
    assert compressed_constants(xml) == {"u8": 1, "f16": 1}


def test_export_refuses_a_python_without_the_exporter(tmp_path):
    with pytest.raises(Unavailable, match="no python at"):
        export_openvino(tmp_path / "bin/python", tmp_path / "out", log=None)
    if importlib.util.find_spec("optimum") is None:  # the kit's own venv: no optimum-intel beside its transformers
        with pytest.raises(Unavailable, match="has no optimum-intel"):
            export_openvino(sys.executable, tmp_path / "out", log=None)
    assert not (tmp_path / "out").exists()


def test_cli_flags():
    from kit.cli import build_parser

    p = build_parser()
    args = p.parse_args(["bench", "rollout", "--arms", "kit,openvino", "--openvino-model", "/x", "--threads", "2"])
    assert (args.openvino_model, args.threads) == ("/x", 2)
    args = p.parse_args(["bench", "export-openvino", "--python", "/v/bin/python", "--out", "/o"])
    assert (args.python, args.out, args.model, args.weight_format, args.force) == ("/v/bin/python", "/o", "embedded",
                                                                                    "fp32", False)
    with pytest.raises(SystemExit):
        p.parse_args(["bench", "export-openvino", "--out", "/o"])  # --python is required


@needs_genai
@pytest.mark.slow
def test_threads_and_precision_reach_the_pipeline(backend, openvino_model):
    from kit.bench.engines import openvino_backend

    ov = openvino_backend(backend, openvino_model, threads=1)
    try:
        assert ov.properties() == {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
        assert (ov.tool_mode, ov.tokenizer, ov.caps.stats) == (backend.tool_mode, backend.tokenizer, False)
    finally:
        ov.close()
    native = openvino_backend(backend, openvino_model, threads=2, precision="native")
    try:
        assert native.properties() == {"INFERENCE_NUM_THREADS": 2}
    finally:
        native.close()


@needs_genai
@pytest.mark.slow
def test_kit_and_openvino_arms_run_the_same_episodes(backend, openvino_model):
    from kit.llm.toolcalls import parse_tool_calls

    lines = []
    results = bench_arms(backend, ("kit", "openvino"), group=2, max_messages=4, max_new_tokens=16, log=lines.append,
                         openvino_model=openvino_model, threads=1)
    assert [r.arm for r in results] == ["kit", "openvino"]
    assert all(r.error is None and r.tokens > 0 and len(r.trajectories) == 2 for r in results), results
    ov = results[1]
    generated = [m for t in ov.trajectories for m in t.messages if m.meta.get("completion_tokens")]
    assert {m.role for m in generated} == {"assistant", "user"}
    assert ov.tokens == sum(m.meta["completion_tokens"] for m in generated)
    skip = set(backend.tokenizer.all_special_ids)
    for m in generated:  # the sampled ids, counted as the kit counts, decoded and parsed the kit's way
        ids = m.meta["token_ids"]
        assert 0 < len(ids) == m.meta["completion_tokens"] <= 16
        assert m.meta["prompt_tokens"] > 100  # the kit's rendered system prompt and policy
        raw = backend.tokenizer.decode([i for i in ids if i not in skip])
        text, calls, errors = parse_tool_calls(raw)
        assert [c.name for c in calls] == [c.name for c in (m.tool_calls or [])]
        assert errors == m.meta.get("parse_errors", [])
        if not calls and not errors:
            assert (m.content or "") == text
    # the same seeds repeat the same episodes (each timed run starts a new pipeline)
    again = bench_arms(backend, ("openvino",), group=2, max_messages=4, max_new_tokens=16, log=None,
                       openvino_model=openvino_model, threads=1)[0]
    assert [[m.meta.get("token_ids") for m in t.messages] for t in again.trajectories] == \
        [[m.meta.get("token_ids") for m in t.messages] for t in ov.trajectories]
