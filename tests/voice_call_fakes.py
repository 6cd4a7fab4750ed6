"""Fakes for the call pipeline tests: an engine, ASR and TTS that stand in for the real ones so a
test isolates the flow (ordering, degrade-to-transfer, barge-in), and the helpers that drive a call."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from policy.decision import Action, Decision, Handoff, Reason
from voice_agent.stages.asr import AsrResult
from voice_agent.audio import load_audio
from voice_agent.call import CallConfig, CallSession, VoiceRuntime
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
                               evidence=[], timings_ms={"retrieve": 1.0, "policy": 1.0, **(timings_ms or {})})

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

    def preview_turn(self, text, *, asr=None):
        return SimpleNamespace(decision=self.preview(text, asr=asr), evidence=[])

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
    pending_facets: list[str] = []

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


async def until(events, kind, timeout=10.0):
    for _ in range(int(timeout / 0.01)):
        if any(e.type == kind for e in events):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind} event")


async def gather(call, events):
    async for ev in call.events():
        events.append(ev)
