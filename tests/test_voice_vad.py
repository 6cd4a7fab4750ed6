"""voice_agent.stages.vad: the silero model frame by frame, endpointing, turn splitting (real model)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from voice_agent.audio import load_audio, read_wav
from voice_agent.stages.vad import FRAME, SileroStream, StreamingVad, speech_probabilities, split_turns

pytestmark = [pytest.mark.audio, pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")]
SR = 16000


def speak(tmp_path, text: str, voice: str = "en-us", name: str = "s.wav") -> np.ndarray:
    p = tmp_path / name
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(p), text], check=True)
    return load_audio(p, SR)


def silence(s: float) -> np.ndarray:
    return np.zeros(int(s * SR), np.float32)


def pink(s: float, level: float = 0.05, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).standard_normal(int(s * SR))
    f = np.fft.rfftfreq(len(w), 1 / SR)
    spec = np.fft.rfft(w) / np.sqrt(np.maximum(f, 20.0))
    x = np.fft.irfft(spec, len(w))
    return (x / np.std(x) * level).astype(np.float32)


def test_speech_scores_high_and_noise_low(tmp_path):
    speech = speak(tmp_path, "How do I reset my router?")
    assert speech_probabilities(speech).max() > 0.9
    assert speech_probabilities(pink(3.0)).max() < 0.5
    assert speech_probabilities(silence(1.0)).max() < 0.2


def test_chunking_does_not_change_probabilities(tmp_path):
    x = speak(tmp_path, "Testing one two three.")
    whole = speech_probabilities(x)
    s = SileroStream()
    probs, i = [], 0
    for n in [100, 700, 512, 1, 3000, 10**6]:
        probs += [p for _, p in s.frames(x[i : i + n])]
        i += n
    assert np.allclose(probs, whole[: len(probs)], atol=1e-5) and len(probs) == len(x) // FRAME


def test_streaming_events(tmp_path):
    speech = speak(tmp_path, "What is the roaming charge in Canada?")
    x = np.concatenate([silence(1.0), speech, silence(1.0)])
    vad = StreamingVad(end_silence_ms=500, pause_ms=300)
    events = []
    for i in range(0, len(x), 320):  # 20 ms chunks, as a phone line delivers them
        events += vad.feed(x[i : i + 320])
    kinds = [e.type for e in events]
    assert kinds == ["speech_start", "pause", "turn_end"], kinds
    start, pause, end = events
    assert 0.9 <= start.time_s <= 1.3
    assert end.reason == "silence"
    assert 0.45 <= end.trailing_silence_s <= 0.6
    # The turn holds all the speech plus ~200 ms of pre-roll and the closing silence.
    assert len(speech) / SR - 0.3 < len(end.audio) / SR < len(speech) / SR + 1.0
    assert np.abs(end.audio[: int(0.1 * SR)]).max() < 0.05  # starts in the pre-roll silence
    assert len(pause.audio) < len(end.audio)
    assert vad.flush() == []


def test_max_length_and_flush(tmp_path):
    speech = speak(tmp_path, "This is a long sentence that keeps going and going without any pause at all.")
    vad = StreamingVad(max_turn_s=1.5)
    ev = [e for e in vad.feed(speech) if e.type == "turn_end"]
    assert ev and ev[0].reason == "max_length" and len(ev[0].audio) / SR <= 1.75
    # Input that stops mid-speech: flush closes the turn.
    vad2 = StreamingVad()
    assert not [e for e in vad2.feed(speech) if e.type == "turn_end"]
    tail = vad2.flush()
    assert [e.reason for e in tail] == ["flush"]


def test_short_blip_is_not_a_turn():
    t = np.arange(int(0.06 * SR)) / SR
    click = (0.5 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    assert split_turns(np.concatenate([silence(0.5), click, silence(1.0)]), SR) == []


def test_split_turns_three_turns_with_noise(tmp_path):
    a = speak(tmp_path, "I want to cancel my plan.", name="a.wav")
    b = speak(tmp_path, "I am a personal customer.", "en+f3", name="b.wav")
    c = speak(tmp_path, "Thank you, goodbye.", name="c.wav")
    x = np.concatenate([silence(0.5), a, silence(1.2), b, silence(1.2), c, silence(0.8)])
    x = x + pink(len(x) / SR, level=0.003)
    turns = split_turns(x, SR)
    assert len(turns) == 3
    for t, ref in zip(turns, (a, b, c)):
        assert abs(len(t) - len(ref)) / SR < 1.0
    # Other sample rates are resampled to 16 kHz first.
    from voice_agent.audio import resample

    assert len(split_turns(resample(x, SR, 8000), 8000)) == 3


@pytest.mark.skipif(not __import__("os").path.exists("/usr/share/sounds/alsa/Front_Center.wav"), reason="alsa-utils")
def test_real_human_speech():
    x, sr = read_wav("/usr/share/sounds/alsa/Front_Center.wav")
    assert len(split_turns(np.concatenate([x, np.zeros(sr)]), sr)) == 1
