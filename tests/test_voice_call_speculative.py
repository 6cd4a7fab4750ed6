"""voice_agent.call: the speculative reply (rendered while the caller pauses, dropped when they go on)
and the early end of a turn once the question is finished, with the fakes of tests/voice_call_fakes.py."""
from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from policy.decision import Action
from voice_agent.audio import float_to_pcm16, resample
from voice_agent.call import CallConfig, CallSession, VoiceRuntime
from voice_agent.interfaces import ManualClock
from voice_agent.stages.tts import TtsChunk
from tests.voice_call_fakes import SR, FakeAsr, FakeSession, FakeTts, gather, kinds, make, question_16k


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
    task = asyncio.create_task(gather(call, events))
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
    task = asyncio.create_task(gather(call, events))
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
