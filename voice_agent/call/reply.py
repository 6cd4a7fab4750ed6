"""Spoken output of a call: a decision's message rendered sentence by sentence (from the buffer
speculation filled, when the words match), resampled and encoded in small chunks so a barge-in
stops it quickly; a TTS failure degrades to a spoken transfer, never dead air."""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import cast

import numpy as np

from policy.compose import team_phrase
from policy.decision import Action, Decision, Reason

from ..audio import Resampler, float_to_pcm16, mulaw_encode
from ..stages.tts import TtsChunk, TtsUnavailable
from .core import SR, CallCore
from .events import AudioChunk, AudioEnd, AudioStart, DecisionEvent, ErrorEvent, TransferEvent
from .render import DONE, Render

CHUNK_S = 0.2  # reply audio is sent in pieces of this length, so a barge-in stops it quickly
TTS_FAILED_MESSAGE = ("I'm having trouble with my voice system. I'm transferring you to our {team} now. "
                      "I'm passing along your question, so you won't need to repeat yourself.")

LOG = logging.getLogger("voice_agent.call")


class Replies(CallCore):
    async def _speak_decision(self, decision: Decision, question: str, render: Render | None = None) -> float | None:
        """Speak the decision (from `render` when its audio was rendered early); a transfer's
        package follows its spoken message. If TTS is down, degrade to a spoken (or at least
        signalled) transfer: never dead air."""
        try:
            first = await self._speak(decision.message, render)
        except TtsUnavailable as e:
            LOG.warning("TTS unavailable (call %s): %s", self.id, e)
            decision = await asyncio.to_thread(self._locked, self._tts_transfer, decision, question)
            self._emit(DecisionEvent(decision=decision))
            try:
                first = await self._speak(decision.message)
            except TtsUnavailable as e2:
                self._emit(ErrorEvent(code="tts_unavailable", message=f"text to speech failed twice: {e2}"))
                first = None
        if decision.action == Action.transfer and decision.handoff is not None:
            self.transferred = True
            self._emit(TransferEvent(handoff=decision.handoff))
        return first

    async def say(self, text: str) -> None:
        """Speak a fixed message outside any turn, even after a transfer (the server telling the
        caller the transfer could not reach a person). No decision, nothing recorded."""
        if self._closed:
            return
        try:
            await self._speak(text)
        except TtsUnavailable as e:
            self._emit(ErrorEvent(code="tts_unavailable", message=f"text to speech failed: {e}"))

    def _tts_transfer(self, decision: Decision, question: str) -> Decision:
        team = (decision.handoff.team if decision.handoff else None) or self.runtime.engine.config.default_team
        message = TTS_FAILED_MESSAGE.format(team=team_phrase(team))
        return self.session.degrade_to_transfer(decision, Reason.tts_unavailable, message, question)

    async def _speak(self, text: str, render: Render | None = None) -> float | None:
        """Emit `text` as audio, from `render` (already rendering, maybe with chunks waiting)
        or from a new render; returns the clock time of its first audio chunk."""
        tts = self.runtime.tts
        if tts is None or not text.strip():
            if render is not None:
                render.cancel()
            return None
        c = self.config
        reply_id = uuid.uuid4().hex[:12]
        if render is None or render.text != text:
            if render is not None:
                render.cancel()
            render = Render(tts, text, asyncio.get_running_loop(), c.reply_lead_s, self.clock)
        self._cancel_reply = cancel = render.cancelled  # a barge-in (or close) cancels this reply
        q, worker = render.q, render.future
        out_rs: Resampler | None = None
        ref_rs: Resampler | None = None
        first: float | None = None
        started = False
        try:
            while True:
                item = await q.get()
                if item is DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                if self._current is not None and self._current.superseded and not cancel.is_set():
                    cancel.set()  # the caller went on after an early end of turn
                    if started:
                        self._clear(reply_id)
                if cancel.is_set():
                    continue
                chunk = cast(TtsChunk, item)  # the queue holds chunks, one exception, then DONE
                pcm = chunk.pcm.astype(np.float32) / 32768.0
                if out_rs is None:
                    out_rs = Resampler(chunk.sample_rate, c.output_rate)
                    ref_rs = Resampler(chunk.sample_rate, SR)
                if not started:
                    started, first = True, self.clock.now()
                    self._start_reply(reply_id)
                self._send(reply_id, out_rs.process(pcm))
                if self._barge is not None and ref_rs is not None and self._playing_id == reply_id:
                    self._barge.push_reference(ref_rs.process(pcm))
            if started and not cancel.is_set():
                if out_rs is not None:
                    self._send(reply_id, out_rs.flush())
                self._emit(AudioEnd(id=reply_id))
        except BaseException:
            if started and not cancel.is_set():
                self._emit(AudioEnd(id=reply_id))  # what was sent is all there is: a held transfer may go
            render.cancel()  # a failed or torn-down reply stops rendering (and frees the TTS worker)
            raise
        finally:
            await worker
        return first

    def _start_reply(self, reply_id: str) -> None:
        """The reply's first audio: announce it, tie it to the turn, and let barge-in listen."""
        c = self.config
        self._emit(AudioStart(id=reply_id, sample_rate=c.output_rate, encoding=c.output_encoding))
        if self._current is not None:
            self._current.reply_id = reply_id
        if self._barge is not None:
            self._barge.reset()
            self._playing_id = reply_id

    def _send(self, reply_id: str, x: np.ndarray) -> None:
        c = self.config
        step = int(c.output_rate * CHUNK_S)
        for i in range(0, len(x), step):
            piece = x[i : i + step]
            data = float_to_pcm16(piece) if c.output_encoding == "pcm16" else mulaw_encode(piece)
            self._emit(AudioChunk(id=reply_id, data=data))
