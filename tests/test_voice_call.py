"""voice_agent.call: the call pipeline. Fakes stand in for the engine, ASR and TTS to isolate the
flow (ordering, degrade-to-transfer, barge-in); the real VAD and barge-in detector run. One slow
test drives the real engine, whisper and piper."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from policy.decision import Action, Decision, Handoff, Reason
from voice_agent.stages.asr import AsrResult
from voice_agent.audio import float_to_pcm16, load_audio, pcm16_to_float, resample
from voice_agent.call import CallConfig, CallSession, VoiceRuntime
from voice_agent.interfaces import ManualClock
from voice_agent.stages.tts import TtsChunk, TtsUnavailable

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
        self.previews: list[str] = []
        self.preview_message: str | None = None
        self.preview_delay = 0.0
        self.active, self.overlapped, self._lock = 0, False, threading.Lock()
        self.restored: list[tuple] = []

    def turn(self, text, *, asr=None, faults=(), timings_ms=None):
        self._enter()
        time.sleep(self.preview_delay)
        self._exit()
        self.turns.append((text, asr))
        low = bool(asr and asr.low_confidence)
        action = Action.clarify if low else self.action
        msg = "Sorry, I didn't catch that." if low else self._message(text)
        reasons = [Reason.asr_low_confidence] if low else [Reason.grounded_answer]
        handoff = Handoff(id="h1", team="billing", summary="s") if action == Action.transfer else None
        d = Decision(action=action, message=msg, reasons=reasons, handoff=handoff)
        return SimpleNamespace(decision=d, audit_id=f"a{len(self.turns)}", normalized_question=text, said=text,
                               timings_ms={"retrieve": 1.0, "policy": 1.0, **(timings_ms or {})})

    def preview(self, text, *, asr=None):
        """Like `turn`, recording nothing; `preview_message` makes it disagree with `turn`."""
        self.previews.append(text)
        self._enter()
        try:
            time.sleep(self.preview_delay)
            low = bool(asr and asr.low_confidence)
            action = Action.clarify if low else self.action
            msg = "Sorry, I didn't catch that." if low else (self.preview_message or self._message(text))
            return Decision(action=action, message=msg, reasons=[Reason.grounded_answer])  # no handoff
        finally:
            self._exit()

    def _message(self, text):
        return self.message(text) if callable(self.message) else self.message

    def _enter(self):
        with self._lock:
            self.active += 1
            self.overlapped |= self.active > 1

    def _exit(self):
        with self._lock:
            self.active -= 1

    pending_question = None

    def snapshot(self):
        return ("state", len(self.turns))

    def restore(self, state, *, superseded=None, reason=""):
        self.restored.append((state, superseded, reason))

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
        self.config = SimpleNamespace(default_team="customer_care")

    def session(self, role="public", facets=None):
        return self._s

    def vocabulary(self, role="public"):
        return ["router", "voicemail"]


class FakeAsr:
    def __init__(self, text="how do I reset my rooter", low=False):
        self.text, self.low, self.calls, self.fallbacks = text, low, [], []

    def transcribe(self, pcm, prompt=None, fallback="doubtful"):
        self.calls.append(len(pcm))
        self.fallbacks.append(fallback)
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


def make(session=None, asr=None, tts=None, clock=None, rehear=None,
         **cfg) -> tuple[CallSession, FakeSession, FakeAsr, FakeTts]:
    session = session or FakeSession()
    asr = asr or FakeAsr()
    tts = tts if tts is not None else FakeTts()
    rt = VoiceRuntime(FakeEngine(session), asr, tts, clock=clock, rehear_transcriber=rehear)
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
def test_after_a_transfer_the_agent_says_nothing_more():
    async def scenario():
        call, session, _, _ = make(session=FakeSession(action=Action.transfer, message="Transferring you now."))
        task = asyncio.create_task(collect(call))
        await call.text_turn("I want a human")
        await call.end_of_input()
        await call.text_turn("hello? are you still there?")  # the caller talks on, to nobody
        await call.feed_audio(b"\x00\x10" * 8000)
        await call.end_of_input()
        await call.close()
        return await task, session

    ev, session = asyncio.run(scenario())
    assert kinds(ev) == ["decision", "audio_start", "audio_chunk", "audio_end", "transfer"]
    assert [t for t, _ in session.turns] == ["I want a human"]


@pytest.mark.unit
def test_tts_failure_degrades_to_a_spoken_transfer():
    call, _, _, tts = make(tts=FakeTts(fail=1))
    ev = asyncio.run(drive(call, text="When is my bill due?"))
    assert kinds(ev) == ["decision", "decision", "audio_start", "audio_chunk", "audio_end", "transfer"]
    second = ev[1].decision
    assert second.action == Action.transfer and Reason.tts_unavailable in second.reasons
    assert second.handoff is not None and "transferring you" in tts.requests[-1]


class DiesMidReplyTts(FakeTts):
    """The worker dies after the first sentence of the first reply."""

    def synthesize(self, text):
        self.requests.append(text)
        first = len(self.requests) == 1
        for i, chunk in enumerate(FakeTts.synthesize(self, text)):
            if first and i == 1:
                raise TtsUnavailable("worker died mid-reply")
            yield chunk


@pytest.mark.unit
def test_tts_dying_mid_reply_ends_that_reply_and_still_transfers():
    """The interrupted reply gets its audio_end, so a wire holding the transfer until the audio
    closes lets it go; the caller hears the spoken transfer and the transfer follows it."""
    call, _, _, tts = make(tts=DiesMidReplyTts())
    ev = asyncio.run(drive(call, text="When is my bill due?"))
    assert kinds(ev) == ["decision", "audio_start", "audio_chunk", "audio_end", "decision", "audio_start",
                         "audio_chunk", "audio_end", "transfer"]
    first, second = [e.id for e in ev if e.type == "audio_start"]
    assert [e.id for e in ev if e.type == "audio_end"] == [first, second]
    decisions = [e.decision for e in ev if e.type == "decision"]
    assert decisions[1].action == Action.transfer and "transferring you" in tts.requests[-1]


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
def test_the_full_window_redo_is_left_to_a_stronger_second_model_when_one_is_loaded(question_16k):
    """tiny.en redoes a doubtful short-window hearing over the full 30 s window (~0.6 s); with base
    loaded for turns about to be refused, the first hearing redoes only one that loops."""
    x = np.concatenate([question_16k, np.zeros(SR, np.float32)])
    for rehear, redo in ((None, "doubtful"), (FakeAsr(), "looping")):
        call, _, asr, _ = make(rehear=rehear)
        asyncio.run(drive(call, pcm16=float_to_pcm16(x)))
        assert asr.fallbacks and set(asr.fallbacks) == {redo}


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
@pytest.mark.chaos
@has_espeak
def test_barging_in_on_a_transfer_message_still_transfers(question_16k):
    """The caller talks over "I'm transferring you": the transfer is still signalled, once, and
    the speech is not taken as a new turn (a person takes the call now)."""
    async def scenario():
        call, session, asr, _ = make(session=FakeSession(action=Action.transfer, message="Transferring you now."),
                                     tts=FakeTts(seconds=2.0))
        events = []
        task = asyncio.create_task(_gather(call, events))
        await call.text_turn("I want a human")
        await _until(events, "audio_end")
        mic = np.zeros(3 * SR, np.float32)
        mic[int(0.5 * SR):int(0.5 * SR) + len(question_16k)] += question_16k[:int(2.5 * SR)]
        for i in range(0, len(mic), 320):
            await call.feed_audio(float_to_pcm16(mic[i:i + 320]))
        await call.end_of_input()
        await call.close()
        await task
        return events, session

    events, session = asyncio.run(scenario())
    assert kinds(events).count("transfer") == 1 and len(session.turns) == 1


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
    wav = Path("fixtures/audio/as02.wav")
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
    assert "voice" in ev[0].text.lower()
    d = ev[1].decision
    assert d.action == Action.answer and any(c.doc_id == "voicemail-setup" for c in d.citations)
    audio = b"".join(e.data for e in ev if e.type == "audio_chunk")
    assert len(audio) / 2 / SR > 2.0  # a real spoken answer
    t = ev[1].timings_ms
    assert {"asr", "retrieve", "policy"} <= set(t)


# ------------------------------------------------------------------- speculative reply


class SlowTts(FakeTts):
    """FakeTts that takes `delay` s per sentence, logs when each render starts, how many
    sentences it rendered, and whether its iterator was closed before the end (cancelled)."""

    def __init__(self, delay=0.25, seconds=0.2):
        super().__init__(seconds=seconds)
        self.delay, self.log = delay, []

    def synthesize(self, text):
        rec = {"text": text, "start": time.monotonic(), "rendered": 0, "cancelled": False, "finished": False}
        self.log.append(rec)
        self.requests.append(text)
        n = int(22050 * self.seconds)
        t = np.arange(n) / 22050
        try:
            for i in range(2):
                time.sleep(self.delay)
                rec["rendered"] += 1
                pcm = (0.3 * np.sin(2 * np.pi * (200 + 100 * i) * t) * 32767).astype(np.int16)
                yield TtsChunk(pcm=pcm, sample_rate=22050, sentence_index=i, text=f"s{i}")
            rec["finished"] = True
        except GeneratorExit:
            rec["cancelled"] = True
            raise


class LengthAsr(FakeAsr):
    """Transcript depends on how much audio it is given: the part before a pause vs the whole."""

    def __init__(self, split_s):
        super().__init__()
        self.split_s = split_s

    def transcribe(self, pcm, prompt=None, fallback="doubtful"):
        r = super().transcribe(pcm, prompt, fallback)
        text = "how do I reset my router" if len(pcm) / SR < self.split_s else \
            "how do I reset my router and keep my settings"
        return r.model_copy(update={"text": text})


async def paced(call: CallSession, x: np.ndarray, chunk: int = 320):
    """Feed at real-time pace (20 ms chunks), so the pause → turn end window really elapses."""
    events = []
    task = asyncio.create_task(_gather(call, events))
    t0 = time.monotonic()
    for i in range(0, len(x), chunk):
        await call.feed_audio(float_to_pcm16(x[i : i + chunk]))
        delay = t0 + (i + chunk) / SR - time.monotonic()
        await asyncio.sleep(max(delay, 0))
    await call.end_of_input()
    await call.close()
    await task
    return events


async def simulated(call: CallSession, x: np.ndarray, chunk: int = 320):
    """Feed 20 ms chunks on simulated time: each advances the call's clock by 20 ms, then lets the
    work started at a pause finish, as on a machine that never falls behind. Deterministic."""
    events = []
    task = asyncio.create_task(_gather(call, events))
    for i in range(0, len(x), chunk):
        call.clock.advance(min(chunk, len(x) - i) / SR)
        await call.feed_audio(float_to_pcm16(x[i : i + chunk]))
        await call.settle()
    await call.end_of_input()
    await call.close()
    await task
    return events


def one_reply(events) -> bool:
    return sum(e.type == "audio_start" for e in events) == 1 and sum(e.type == "audio_end" for e in events) == 1


@pytest.mark.unit
def test_speculative_reply_is_ready_when_the_caller_stops(question_16k):
    """On simulated time: the reply previewed at the pause began rendering before the turn ended,
    and that render is what the caller hears; nothing is rendered twice."""
    x = np.concatenate([question_16k, np.zeros(SR, np.float32)])
    tts = SlowTts(delay=0.05)
    call, session, asr, _ = make(tts=tts, barge_in=False, clock=ManualClock())
    ev = asyncio.run(simulated(call, x))
    assert kinds(ev) == ["transcript", "decision", "audio_start", "audio_chunk", "audio_end"]
    # one render only: the one started at the pause, from the preview; nothing rendered anew
    assert tts.requests == [session.message] and session.previews == [asr.text]
    assert len(session.turns) == 1 and len(asr.calls) == 1 and not session.overlapped
    t = call.timings[0]
    assert t["speculative_reply"] == 1.0 and t["speculative_reply_lead"] > 0  # began before turn end
    audio = b"".join(e.data for e in ev if e.type == "audio_chunk")
    assert abs(len(audio) / 2 / SR - 0.4) < 0.01  # both sentences, once


@pytest.mark.audio
def test_speech_after_the_pause_cancels_the_speculative_reply(question_16k):
    from voice_agent.stages.vad import speech_probabilities

    p = speech_probabilities(question_16k)  # espeak leaves silence after the words: cut it
    q = question_16k[: (int(np.flatnonzero(p > 0.5)[-1]) + 2) * 512]
    gap = np.zeros(int(0.3 * SR), np.float32)  # longer than pause_ms (200), shorter than end (500)
    x = np.concatenate([q, gap, q, np.zeros(SR, np.float32)])
    tts = SlowTts(delay=0.3)
    session = FakeSession(message=lambda text: f"About: {text}.")
    call, session, asr, _ = make(session=session, asr=LengthAsr(split_s=len(q) / SR + 0.5), tts=tts,
                                 barge_in=False)
    ev = asyncio.run(paced(call, x))
    full = "how do I reset my router and keep my settings"
    assert session.previews[0] == "how do I reset my router"  # previewed at the first pause ...
    assert tts.log[0]["text"] == "About: how do I reset my router." and tts.log[0]["cancelled"]
    assert tts.log[0]["rendered"] <= 1  # ... and cancelled when the caller went on
    assert [t for t, _ in session.turns] == [full]  # one turn, on the whole utterance
    assert ev[1].decision.message == f"About: {full}." and tts.requests[-1] == f"About: {full}."
    assert one_reply(ev) and kinds(ev)[-1] == "audio_end" and not session.overlapped
    audio = b"".join(e.data for e in ev if e.type == "audio_chunk")
    assert abs(len(audio) / 2 / SR - 0.4) < 0.01  # only the final reply's audio went out


@pytest.mark.audio
def test_preview_differing_from_the_decision_speaks_the_decision(question_16k):
    x = np.concatenate([question_16k, np.zeros(SR, np.float32)])
    tts = SlowTts(delay=0.2)
    call, session, _, _ = make(tts=tts, barge_in=False)
    session.preview_message = "Something else entirely."
    ev = asyncio.run(paced(call, x))
    assert tts.requests == ["Something else entirely.", session.message]
    assert tts.log[0]["cancelled"] and tts.log[1]["finished"]
    assert ev[1].decision.message == session.message and one_reply(ev)
    assert call.timings[0]["speculative_reply"] == 0.0
    audio = b"".join(e.data for e in ev if e.type == "audio_chunk")
    assert abs(len(audio) / 2 / SR - 0.4) < 0.01


@pytest.mark.audio
def test_speculative_transfer_signals_the_stored_handoff_after_its_audio(question_16k):
    x = np.concatenate([question_16k, np.zeros(SR, np.float32)])
    session = FakeSession(action=Action.transfer, message="Transferring you to billing now.")
    session.preview_delay = 0.05  # widen the window in which preview and turn could overlap
    tts = SlowTts(delay=0.2)
    call, session, _, _ = make(session=session, tts=tts, barge_in=False)
    ev = asyncio.run(paced(call, x))
    assert kinds(ev) == ["transcript", "decision", "audio_start", "audio_chunk", "audio_end", "transfer"]
    assert ev[-1].handoff.id == "h1"  # the real turn's stored package, not the preview's (none)
    assert tts.requests == [session.message] and call.timings[0]["speculative_reply"] == 1.0
    assert not session.overlapped


@pytest.mark.unit
def test_dropped_speculative_render_closes_its_iterator():
    """A render nobody speaks is cancelled and closes the TTS iterator (releasing the worker)."""
    from voice_agent.call import Render as _Render

    async def scenario():
        tts = SlowTts(delay=0.1)
        r = _Render(tts, "hello there.", asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        r.cancel()
        await r.future
        return tts

    tts = asyncio.run(scenario())
    assert tts.log[0]["cancelled"] and tts.log[0]["rendered"] == 1


# ------------------------------------------------------------------- early end of turn


class PartsAsr(FakeAsr):
    """A question, then more words after a pause: the transcript depends on how much audio it gets."""

    def __init__(self, split_s, first="How do I reset my router?", whole="How do I reset my router without losing my settings?"):
        super().__init__()
        self.split_s, self.first, self.whole = split_s, first, whole

    def transcribe(self, pcm, prompt=None, fallback="doubtful"):
        r = super().transcribe(pcm, prompt, fallback)
        return r.model_copy(update={"text": self.first if len(pcm) / SR < self.split_s else self.whole})


def _trimmed(q: np.ndarray) -> np.ndarray:
    from voice_agent.stages.vad import speech_probabilities

    p = speech_probabilities(q)  # espeak leaves silence after the words: cut it
    return q[: (int(np.flatnonzero(p > 0.5)[-1]) + 2) * 512]


@pytest.mark.unit
@pytest.mark.parametrize("text, early", [("How do I reset my router?", True),
                                         ("I want to reset my router.", False),  # a statement: wait
                                         ("How do I reset my", False)])
def test_a_finished_question_ends_the_turn_before_the_full_silence(question_16k, text, early):
    q = _trimmed(question_16k)
    call, session, asr, tts = make(asr=FakeAsr(text), tts=SlowTts(delay=0.05), barge_in=False, clock=ManualClock())
    ev = asyncio.run(simulated(call, np.concatenate([q, np.zeros(SR, np.float32)])))
    t = call.timings[0]
    assert t["early_end"] == (1.0 if early else 0.0) and one_reply(ev)
    turn_end = ev[0]  # the transcript follows the turn end at once (speculative ASR)
    assert turn_end.type == "transcript" and len(session.turns) == 1
    # The turn audio ends `early_end_ms` (300) or `end_silence_ms` (500) after the speech.
    call2_cfg = CallConfig()
    assert call2_cfg.early_end_ms < call2_cfg.end_silence_ms


@pytest.mark.unit
def test_early_end_saves_the_difference_in_silence(question_16k):
    q = _trimmed(question_16k)
    x = np.concatenate([q, np.zeros(SR, np.float32)])
    ends = {}
    for text in ("How do I reset my router?", "I want to reset my router."):
        call, session, asr, tts = make(asr=FakeAsr(text), tts=SlowTts(delay=0.05), barge_in=False,
                                       clock=ManualClock())
        got = []
        orig = call._turns.put_nowait
        call._turns.put_nowait = lambda turn, got=got, orig=orig: (got.append(len(turn.audio)), orig(turn))[1]
        asyncio.run(simulated(call, x))
        ends[text] = got[0] / SR
    saved = ends["I want to reset my router."] - ends["How do I reset my router?"]
    # end_silence_ms - early_end_ms of audio, to within one 32 ms VAD frame (simulated time: exact)
    cfg = CallConfig()
    assert abs(saved - (cfg.end_silence_ms - cfg.early_end_ms) / 1000) <= 0.032, saved


@pytest.mark.unit
@pytest.mark.parametrize("barge_in", [True, False])
def test_caller_going_on_after_an_early_end_makes_one_turn(question_16k, barge_in):
    q = _trimmed(question_16k)
    gap = np.zeros(int(0.6 * SR), np.float32)  # past early_end_ms (300), then more words
    x = np.concatenate([q, gap, q, np.zeros(SR, np.float32)])
    session = FakeSession(message=lambda text: f"About: {text}")
    asr = PartsAsr(split_s=len(q) / SR + 0.5)
    call, session, asr, tts = make(session=session, asr=asr, tts=SlowTts(delay=0.05), barge_in=barge_in,
                                   clock=ManualClock())
    ev = asyncio.run(simulated(call, x))
    # The first part was decided (and audited), then superseded: the session was put back
    # and the whole utterance decided as one turn, from both parts' audio.
    assert [t for t, _ in session.turns] == [asr.first, asr.whole]
    assert session.restored and session.restored[0][1:] == ("a1", "caller_continued")
    assert call.timings[0]["early_end"] == 1.0 and call.timings[-1]["continued"] == 1.0
    assert max(asr.calls) / SR > 2 * len(q) / SR  # the last transcription heard both parts
    decisions = [e.decision.message for e in ev if e.type == "decision"]
    assert decisions[-1] == f"About: {asr.whole}"
    # The first reply was cut off (cleared) when the caller went on; the final one was spoken.
    starts = [e.id for e in ev if e.type == "audio_start"]
    assert len(starts) == 2 and [e.id for e in ev if e.type == "clear"] == starts[:1]
    assert [e.type for e in ev][-1] == "audio_end" and ev[-1].id == starts[1]


@pytest.mark.unit
def test_a_new_question_after_the_continuation_window_is_its_own_turn(question_16k):
    q = _trimmed(question_16k)
    gap = np.zeros(int(1.6 * SR), np.float32)
    x = np.concatenate([q, gap, q, np.zeros(SR, np.float32)])
    call, session, asr, tts = make(asr=FakeAsr("How do I reset my router?"), tts=SlowTts(delay=0.05),
                                   barge_in=False, clock=ManualClock())
    ev = asyncio.run(simulated(call, x))
    assert len(session.turns) == 2 and not session.restored
    assert sum(e.type == "audio_end" for e in ev) == 2


@pytest.mark.audio
@pytest.mark.slow
def test_real_runtime_merges_a_question_the_caller_goes_on_with(tmp_path):
    """Real VAD, whisper, engine and piper, at real-time pace: a finished question
    ends the turn early; the caller goes on; one turn for both parts, the first one superseded."""
    import json

    rt = VoiceRuntime.load("fixtures/kb", state_dir=tmp_path)
    try:
        def say(text):  # the caller's voice: piper, as in the fixtures
            pcm, sr = rt.tts.synthesize_all(text, normalize=False, noise_scale=0.0, noise_w_scale=0.0)
            x = pcm.astype(np.float32) / 32768.0 if pcm.dtype == np.int16 else pcm.astype(np.float32)
            return _trimmed(resample(x, sr, SR))

        first = say("How do I reset my home router?")
        rest = say("I mean the Hub 3 in my living room.")
        x = np.concatenate([first, np.zeros(int(0.6 * SR), np.float32), rest, np.zeros(int(1.5 * SR), np.float32)])
        rt.transcriber.warmup()
        # A longer full silence than the default 500 ms leaves a slow machine room to end early.
        # Barge-in off: the caller's words reach the endpointer at once, not after the barge-in
        # detector's decision, so the timing does not depend on it (the fake test above covers both).
        call = rt.new_call(config=CallConfig(barge_in=False, end_silence_ms=800))
        ev = asyncio.run(paced(call, x))
    finally:
        rt.close()
    transcripts = [e.text for e in ev if e.type == "transcript"]
    assert call.timings[0]["early_end"] == 1.0, transcripts
    assert call.timings[-1]["continued"] == 1.0 and len(call.timings) == 2, transcripts
    assert "router" in transcripts[-1].lower() and "living room" in transcripts[-1].lower()  # one turn
    # the early reply was stopped if it had begun (the caller may go on before its first audio)
    starts = [e.id for e in ev if e.type == "audio_start"]
    assert set(starts[:-1]) <= {e.id for e in ev if e.type == "clear"}, starts
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    superseded = [r for r in audit if r.get("kind") == "turn_superseded"]
    turns = [r for r in audit if r.get("decision")]
    assert len(superseded) == 1 and superseded[0]["audit_id"] == turns[0]["audit_id"]
    assert superseded[0]["reason"] == "caller_continued" and len(turns) == 2
