"""voice_agent.call: the call pipeline. Fakes (tests/voice_call_fakes.py) stand in for the engine,
ASR and TTS to isolate the flow (ordering, degrade-to-transfer, barge-in); the real VAD and barge-in
detector run. One slow test drives the real engine, whisper and piper."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from policy.decision import Action, Reason
from voice_agent.audio import float_to_pcm16, load_audio, pcm16_to_float, resample
from voice_agent.call import CallConfig, VoiceRuntime
from voice_agent.stages.tts import TtsUnavailable
from tests.voice_call_fakes import (SR, FakeAsr, FakeSession, FakeTts, collect, drive, gather, has_espeak, kinds, make,
                                    question_16k, until)


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
        task = asyncio.create_task(gather(call, events))
        await call.text_turn("When is my bill due?")  # reply of 4 s starts "playing" at mic time 0
        await until(events, "audio_end")
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
        task = asyncio.create_task(gather(call, events))
        await call.text_turn("I want a human")
        await until(events, "audio_end")
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
        task = asyncio.create_task(gather(call, events))
        await call.text_turn("When is my bill due?")
        await until(events, "audio_end")
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
