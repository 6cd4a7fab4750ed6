"""voice_agent.call: the call pipeline. Fakes stand in for the engine, ASR and TTS to isolate the
flow (ordering, degrade-to-transfer, barge-in); the real VAD and barge-in detector run. One slow
test drives the real engine, whisper and piper."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from policy.decision import Action, Decision, Handoff, Reason
from voice_agent.asr import AsrResult
from voice_agent.audio import float_to_pcm16, load_audio, pcm16_to_float, resample
from voice_agent.call import CallConfig, CallSession, VoiceRuntime
from voice_agent.tts import TtsChunk, TtsUnavailable

SR = 16000
has_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")


# ------------------------------------------------------------------------------- fakes


class FakeSession:
    def __init__(self, action=Action.answer, message="Your bill is due in 21 days. Pay online."):
        self.action, self.message = action, message
        self.turns: list[tuple[str, object]] = []
        self.rechecked = 0
        self.recorded: list[dict] = []
        self.session_id = "fake"
        self.engine = SimpleNamespace(config=SimpleNamespace(default_team="customer_care"))

    def turn(self, text, *, asr=None, faults=(), timings_ms=None):
        self.turns.append((text, asr))
        low = bool(asr and asr.low_confidence)
        action = Action.clarify if low else self.action
        msg = "Sorry, I didn't catch that." if low else self.message
        reasons = [Reason.asr_low_confidence] if low else [Reason.grounded_answer]
        handoff = Handoff(id="h1", team="billing", summary="s") if action == Action.transfer else None
        d = Decision(action=action, message=msg, reasons=reasons, handoff=handoff)
        return SimpleNamespace(decision=d, audit_id=f"a{len(self.turns)}", normalized_question=text,
                               timings_ms={"retrieve": 1.0, "policy": 1.0, **(timings_ms or {})})

    def recheck_before_speech(self, d, audit_id=None):
        self.rechecked += 1
        return d

    def record_timings(self, audit_id, t):
        self.recorded.append(t)

    def degrade_to_transfer(self, d, reason, message, question):
        return Decision(action=Action.transfer, message=message, reasons=[reason],
                        handoff=Handoff(id="h2", team="customer_care", summary=question))


class FakeEngine:
    def __init__(self, session):
        self._s = session

    def session(self, role="public", facets=None):
        return self._s

    def vocabulary(self, role="public"):
        return ["router", "voicemail"]


class FakeAsr:
    def __init__(self, text="how do I reset my rooter", low=False):
        self.text, self.low, self.calls = text, low, []

    def transcribe(self, pcm, prompt=None):
        self.calls.append(len(pcm))
        return AsrResult(text=self.text, avg_logprob=-0.2, no_speech_prob=0.01, compression_ratio=1.0,
                         duration_s=len(pcm) / SR, elapsed_ms=5.0, language="en", low_confidence=self.low)


class FakeTts:
    """Two sentences of 22.05 kHz tone per request; fails the first `fail` requests."""

    def __init__(self, fail=0, seconds=0.5):
        self.fail, self.seconds, self.requests = fail, seconds, []

    def synthesize(self, text):
        self.requests.append(text)
        if self.fail:
            self.fail -= 1
            raise TtsUnavailable("worker died")
        n = int(22050 * self.seconds)
        t = np.arange(n) / 22050
        for i in range(2):
            pcm = (0.3 * np.sin(2 * np.pi * (200 + 100 * i) * t) * 32767).astype(np.int16)
            yield TtsChunk(pcm=pcm, sample_rate=22050, sentence_index=i, text=f"s{i}")

    def close(self):
        pass


def make(session=None, asr=None, tts=None, **cfg) -> tuple[CallSession, FakeSession, FakeAsr, FakeTts]:
    session = session or FakeSession()
    asr = asr or FakeAsr()
    tts = tts if tts is not None else FakeTts()
    rt = VoiceRuntime(FakeEngine(session), asr, tts)
    return rt.new_call(config=CallConfig(**cfg)), session, asr, tts


async def collect(call: CallSession) -> list:
    out = []
    async for ev in call.events():
        out.append(ev)
    return out


async def drive(call: CallSession, *, text: str | None = None, pcm16: bytes | None = None, chunk: int = 640):
    task = asyncio.create_task(collect(call))
    if text is not None:
        await call.text_turn(text)
    if pcm16 is not None:
        for i in range(0, len(pcm16), chunk):
            await call.feed_audio(pcm16[i : i + chunk])
    await call.end_of_input()
    await call.close()
    return await task


def kinds(events) -> list[str]:
    out = []
    for e in events:
        if e.type == "audio_chunk" and out and out[-1] == "audio_chunk":
            continue
        out.append(e.type)
    return out


@pytest.fixture(scope="module")
def question_16k(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.skip("needs espeak-ng")
    p = tmp_path_factory.mktemp("call") / "q.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(p), "How do I reset my router?"], check=True)
    return load_audio(p, SR)


# ------------------------------------------------------------------------------- tests


@pytest.mark.unit
def test_text_turn_answer_streams_audio_in_order():
    call, session, _, tts = make()
    ev = asyncio.run(drive(call, text="When is my bill due?"))
    assert kinds(ev) == ["decision", "audio_start", "audio_chunk", "audio_end"]
    assert session.rechecked == 1 and tts.requests == [session.message]
    audio = b"".join(e.data for e in ev if e.type == "audio_chunk")
    assert abs(len(audio) / 2 / SR - 1.0) < 0.01  # 2 × 0.5 s, resampled 22.05 → 16 kHz
    start = next(e for e in ev if e.type == "audio_start")
    assert start.sample_rate == 16000 and start.encoding == "pcm16"
    assert session.recorded and "tts_first_audio" in session.recorded[0]


@pytest.mark.unit
def test_mulaw_8k_output():
    call, *_ = make(output_rate=8000, output_encoding="mulaw")
    ev = asyncio.run(drive(call, text="When is my bill due?"))
    audio = b"".join(e.data for e in ev if e.type == "audio_chunk")
    assert abs(len(audio) / 8000 - 1.0) < 0.01  # one byte per sample
    assert next(e for e in ev if e.type == "audio_start").encoding == "mulaw"


@pytest.mark.unit
def test_transfer_is_signalled_after_the_spoken_message():
    call, *_ = make(session=FakeSession(action=Action.transfer, message="Transferring you to billing now."))
    ev = asyncio.run(drive(call, text="I want a human"))
    assert kinds(ev) == ["decision", "audio_start", "audio_chunk", "audio_end", "transfer"]
    assert ev[-1].handoff.team == "billing"


@pytest.mark.unit
def test_tts_failure_degrades_to_a_spoken_transfer():
    call, _, _, tts = make(tts=FakeTts(fail=1))
    ev = asyncio.run(drive(call, text="When is my bill due?"))
    assert kinds(ev) == ["decision", "decision", "audio_start", "audio_chunk", "audio_end", "transfer"]
    second = ev[1].decision
    assert second.action == Action.transfer and Reason.tts_unavailable in second.reasons
    assert second.handoff is not None and "transferring you" in tts.requests[-1]


@pytest.mark.unit
def test_tts_down_twice_still_signals_the_transfer_and_an_error():
    call, *_ = make(tts=FakeTts(fail=2))
    ev = asyncio.run(drive(call, text="When is my bill due?"))
    assert kinds(ev) == ["decision", "decision", "error", "transfer"]
    assert ev[2].code == "tts_unavailable"


@pytest.mark.audio
def test_audio_turn_at_8k_goes_through_vad_asr_normalize(question_16k):
    x = np.concatenate([np.zeros(SR // 2, np.float32), question_16k, np.zeros(SR, np.float32)])
    call, session, asr, _ = make(input_rate=8000)
    ev = asyncio.run(drive(call, pcm16=float_to_pcm16(resample(x, SR, 8000)), chunk=320))
    assert kinds(ev) == ["transcript", "decision", "audio_start", "audio_chunk", "audio_end"]
    # the transcript as heard goes to the engine, whose normalize stage repairs "rooter"
    assert ev[0].raw_text == ev[0].text == "how do I reset my rooter"
    assert session.turns[0][0] == "how do I reset my rooter"
    assert session.turns[0][1].low_confidence is False
    # One transcription: the speculative one at the pause was reused for the turn.
    assert len(asr.calls) == 1 and abs(asr.calls[0] / SR - len(question_16k) / SR) < 0.8


@pytest.mark.audio
def test_low_confidence_reaches_the_engine_unnormalized(question_16k):
    x = np.concatenate([question_16k, np.zeros(SR, np.float32)])
    call, session, _, _ = make(asr=FakeAsr(text="mm rooter", low=True))
    ev = asyncio.run(drive(call, pcm16=float_to_pcm16(x)))
    assert ev[0].type == "transcript" and ev[0].low_confidence and ev[0].text == "mm rooter"
    assert session.turns[0][1].low_confidence is True
    assert ev[1].decision.reasons == [Reason.asr_low_confidence]


@pytest.mark.audio
@has_espeak
def test_barge_in_clears_the_reply_and_starts_a_new_turn(question_16k, tmp_path):
    async def scenario():
        call, session, asr, _ = make(tts=FakeTts(seconds=2.0))
        events = []
        task = asyncio.create_task(_gather(call, events))
        await call.text_turn("When is my bill due?")  # reply of 4 s starts "playing" at mic time 0
        await _until(events, "audio_end")
        reply = pcm16_to_float(b"".join(e.data for e in events if e.type == "audio_chunk"))
        assert len(reply) > 3 * SR
        # Microphone: the reply's own echo (−10 dB, 40 ms late) and, from 1.5 s, the caller.
        mic = np.zeros(len(reply) + SR, np.float32)
        mic[640 : 640 + len(reply)] += reply * 10 ** (-10 / 20)
        s = int(1.5 * SR)
        mic[s : s + len(question_16k)] += question_16k
        for i in range(0, len(mic), 320):
            await call.feed_audio(float_to_pcm16(mic[i : i + 320]))
        await call.end_of_input()
        await call.close()
        await task
        return events, session, asr

    events, session, asr = asyncio.run(scenario())
    k = kinds(events)
    assert k[:4] == ["decision", "audio_start", "audio_chunk", "audio_end"]
    assert "clear" in k and k.index("clear") < k.index("transcript")
    assert len(session.turns) == 2 and len(asr.calls) == 1
    # The caller's words were kept from before the barge-in fired.
    assert asr.calls[0] / SR > len(question_16k) / SR - 0.3


@pytest.mark.audio
def test_echo_alone_is_not_a_turn():
    async def scenario():
        call, session, asr, _ = make(tts=FakeTts(seconds=1.5))
        events = []
        task = asyncio.create_task(_gather(call, events))
        await call.text_turn("When is my bill due?")
        await _until(events, "audio_end")
        reply = pcm16_to_float(b"".join(e.data for e in events if e.type == "audio_chunk"))
        mic = np.zeros(len(reply) + SR, np.float32)
        mic[640 : 640 + len(reply)] += reply * 10 ** (-6 / 20)
        for i in range(0, len(mic), 320):
            await call.feed_audio(float_to_pcm16(mic[i : i + 320]))
        await call.end_of_input()
        await call.close()
        await task
        return events, asr

    events, asr = asyncio.run(scenario())
    assert "clear" not in kinds(events) and asr.calls == []


async def _until(events, kind, timeout=10.0):
    for _ in range(int(timeout / 0.01)):
        if any(e.type == kind for e in events):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind} event")


async def _gather(call, events):
    async for ev in call.events():
        events.append(ev)


@pytest.mark.audio
@pytest.mark.slow
def test_real_runtime_on_fixture_audio(tmp_path):
    wav = Path("fixtures/audio/d02.wav")
    if not wav.exists() or not Path("fixtures/kb").is_dir():
        pytest.skip("audio fixtures not generated")
    rt = VoiceRuntime.load("fixtures/kb", state_dir=tmp_path)
    try:
        x = np.concatenate([load_audio(wav, SR), np.zeros(SR, np.float32)])
        ev = asyncio.run(drive(rt.new_call(config=CallConfig(barge_in=False)), pcm16=float_to_pcm16(x)))
    finally:
        rt.close()
    k = kinds(ev)
    assert k == ["transcript", "decision", "audio_start", "audio_chunk", "audio_end"], k
    assert "cards" in ev[0].text.lower()
    d = ev[1].decision
    assert d.action == Action.answer and any(c.doc_id == "payment-methods" for c in d.citations)
    audio = b"".join(e.data for e in ev if e.type == "audio_chunk")
    assert len(audio) / 2 / SR > 2.0  # a real spoken answer
    t = ev[1].timings_ms
    assert {"asr", "retrieve", "policy"} <= set(t)
