"""voice_agent.stages.bargein with real speech: fires on the caller, not on the agent's own echo."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from voice_agent.audio import load_audio
from voice_agent.stages.bargein import BargeInDetector

pytestmark = [pytest.mark.audio, pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")]
SR = 16000


@pytest.fixture(scope="module")
def voices(tmp_path_factory):
    d = tmp_path_factory.mktemp("bargein")
    agent, caller = d / "agent.wav", d / "caller.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(agent),
                    "Your router can be reset by holding the button on the back for ten seconds. "
                    "After that, wait two minutes for the lights to settle, and then connect again."], check=True)
    subprocess.run(["espeak-ng", "-v", "en+f3", "-s", "170", "-w", str(caller),
                    "Wait, I need to talk to a person."], check=True)
    return load_audio(agent, SR), load_audio(caller, SR)


def onset_s(x: np.ndarray) -> float:
    env = np.sqrt(np.mean(x[: len(x) // 160 * 160].reshape(-1, 160) ** 2, axis=1))
    return float(np.argmax(env > 0.01) * 0.01)


def mic_mix(ref, caller=None, *, echo_db=-10.0, delay_ms=40, caller_at=1.5, reflections=False, noise_db=-60.0):
    n = len(ref) + SR
    mic = np.zeros(n, np.float32)
    d = int(delay_ms * SR / 1000)
    echo = ref * 10 ** (echo_db / 20)
    if reflections:  # a room: early reflections and a low-pass speaker
        h = np.zeros(2000, np.float32)
        h[0], h[80], h[400], h[1000] = 1.0, 0.4, 0.25, 0.1
        echo = np.convolve(np.convolve(echo, h), np.ones(8) / 8)[: n - d]
    mic[d : d + len(echo)] += echo[: n - d]
    true_onset = None
    if caller is not None:
        s = int(caller_at * SR)
        mic[s : s + len(caller)] += caller[: n - s]
        true_onset = caller_at + onset_s(caller)
    mic += np.random.default_rng(0).standard_normal(n).astype(np.float32) * 10 ** (noise_db / 20)
    return mic, true_onset


def run(ref, mic):
    det = BargeInDetector()
    det.push_reference(ref)
    fired = None
    for i in range(0, len(mic), 320):  # 20 ms frames, as from a phone line
        hit = det.feed(mic[i : i + 320])
        fired = fired or hit
    return fired


@pytest.mark.parametrize("echo_db,delay_ms,reflections", [(-10, 40, False), (-6, 40, False), (-3, 120, False),
                                                          (-10, 40, True), (-6, 40, True)])
def test_own_echo_never_fires(voices, echo_db, delay_ms, reflections):
    ref, _ = voices
    mic, _ = mic_mix(ref, echo_db=echo_db, delay_ms=delay_ms, reflections=reflections)
    assert run(ref, mic) is None


@pytest.mark.parametrize("caller_at,delay_ms", [(1.5, 40), (0.3, 40), (2.5, 150)])
def test_caller_barge_in_fires_within_150ms(voices, caller_at, delay_ms):
    ref, caller = voices
    mic, onset = mic_mix(ref, caller, caller_at=caller_at, delay_ms=delay_ms)
    hit = run(ref, mic)
    assert hit is not None
    latency_ms = (hit.time_s - onset) * 1000
    assert 0 < latency_ms <= 150, latency_ms
    assert abs(hit.onset_s - onset) < 0.15


def test_caller_over_room_echo_fires(voices):
    ref, caller = voices
    mic, onset = mic_mix(ref, caller, reflections=True)
    hit = run(ref, mic)
    assert hit is not None and hit.time_s - onset < 0.3


def test_silent_reply_or_no_reply_does_not_fire(voices):
    _, caller = voices
    det = BargeInDetector()  # nothing playing: barge-in is meaningless
    assert det.feed(np.concatenate([caller, np.zeros(SR, np.float32)])) is None


def test_fires_once_per_reply_and_rearms(voices):
    ref, caller = voices
    mic, _ = mic_mix(ref, caller)
    det = BargeInDetector()
    det.push_reference(ref)
    hits = [h for i in range(0, len(mic), 320) if (h := det.feed(mic[i : i + 320]))]
    assert len(hits) == 1
    det.reset()
    det.push_reference(ref)
    hits2 = [h for i in range(0, len(mic), 320) if (h := det.feed(mic[i : i + 320]))]
    assert len(hits2) == 1
