"""One conversation: caller audio is routed (to the endpointer, or to barge-in while a reply
plays), turns are queued and answered one at a time by a worker, and events come out of
`events()` in order. The data flow of a spoken turn reads top to bottom in `_run_turn`."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import AsyncIterator, cast

import numpy as np

from policy.engine import AsrSignal

from ..audio import Resampler, pcm16_to_float
from ..interfaces import TurnResult
from ..stages.vad import VadEvent
from .core import SR, Turn
from .events import CallEvent, DecisionEvent, ErrorEvent, TranscriptEvent
from .render import DONE, Render
from .reply import Replies
from .speculation import Speculation

LOG = logging.getLogger("voice_agent.call")


class CallSession(Speculation, Replies):
    def events(self) -> AsyncIterator[CallEvent]:
        return self._iter_events()

    async def _iter_events(self) -> AsyncIterator[CallEvent]:
        while True:
            ev = await self._events.get()
            if ev is DONE:
                return
            yield cast(CallEvent, ev)

    async def settle(self, timeout_s: float = 10.0) -> None:
        """Wait until the work already started is done: the last pause's transcription, preview
        and render start, and every ended turn up to its spoken reply. A driver on simulated time
        calls this after each chunk, so the call behaves as on a machine that never falls behind:
        deterministic, for tests and offline replays."""
        pending = [t for t in (self._speculative[1] if self._speculative else None, self._spec_reply)
                   if t is not None and not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        if self._worker is not None and not self._worker.done():
            await asyncio.wait_for(self._turns.join(), timeout_s)

    async def feed_audio(self, pcm16: bytes) -> None:
        """Caller audio: PCM16 little-endian mono at `config.input_rate`."""
        if self._closed or self.transferred:
            return
        x = self._in_rs.process(pcm16_to_float(pcm16))
        self._route(x)

    async def text_turn(self, text: str) -> None:
        """A typed turn: skips ASR, otherwise the same path (policy, recheck, TTS). Ignored once the
        call has been handed to a person."""
        if self.transferred:
            return
        self._drop_spec_reply()
        self._ensure_worker()
        await self._turns.put(Turn(text=text, ended_at=self.clock.now()))

    async def end_of_input(self) -> None:
        """No more caller audio: close the last turn and wait until every turn is answered."""
        if self._closed:
            return
        tail = self._in_rs.flush()
        self._in_rs = Resampler(self.config.input_rate, SR)
        self._held = np.zeros(0, np.float32)  # held while a reply played: its echo, not a turn
        self._handle_vad(self._vad.feed(tail) + self._vad.flush())
        self._ensure_worker()
        await self._turns.join()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._cancel_reply.set()
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing anyway
                pass
        if self._speculative is not None:
            self._speculative[1].cancel()
        self._drop_spec_reply()
        await self._events.put(DONE)

    def _route(self, x: np.ndarray) -> None:
        b = self._barge
        if b is not None and self._playing_id is not None:
            hit = b.feed(x)
            self._held = np.concatenate([self._held, x])[-SR * 2 :]
            if hit is not None:
                self._barge_in(hit.onset_s)
                return
            if b.playing():
                return  # the microphone hears our own reply: not a caller turn
            self._playing_id = None  # the reply finished playing; held audio was its echo
            self._held = np.zeros(0, np.float32)
            self._handle_vad(self._vad.feed(x))
            return
        if b is not None:
            b.feed(x)  # keep its VAD state and clock in step with the microphone
        self._handle_vad(self._vad.feed(x))

    def _barge_in(self, onset_s: float) -> None:
        assert self._barge is not None
        reply = self._playing_id
        self._cancel_reply.set()
        self._playing_id = None
        self._clear(reply)
        # Replay the caller's words from just before they started into the endpointer.
        mic_now = self._barge._mic_pos / SR
        back = int((mic_now - onset_s + self.config.speech_pre_roll_ms() / 1000 + 0.1) * SR)
        held = self._held[-back:] if back > 0 else self._held
        self._held = np.zeros(0, np.float32)
        self._barge.reset()
        self._handle_vad(self._vad.feed(held))

    def _handle_vad(self, events: list[VadEvent]) -> None:
        for e in events:
            if e.type == "speech_start":
                self._turn_no += 1
                self._drop_spec_reply()
                self._continuation_check()
            elif e.type == "pause" and self.config.speculative_asr and e.audio is not None \
                    and self._continuing is None:  # a continuation's words so far are only its second half
                if self._speculative is not None:
                    self._speculative[1].cancel()
                self._drop_spec_reply()
                asr = asyncio.ensure_future(self._transcribe(e.audio))
                self._speculative = (self._turn_no, asr)
                # Only when no earlier turn is still being answered: its reply must not wait for
                # our render (one TTS worker), and its turn must be decided before we preview.
                if (self.config.speculative_reply and self.runtime.tts is not None
                        and not self._running_turn and self._turns.empty()):
                    self._spec_reply = asyncio.ensure_future(self._speculate(asr, e.audio))
            elif e.type == "turn_end" and e.audio is not None:
                spec = spec_reply = None
                pause_s = self.config.pause_ms / 1000
                if (self._speculative is not None and self._speculative[0] == self._turn_no
                        and e.reason in ("silence", "flush", "early") and e.trailing_silence_s >= pause_s - 1e-6):
                    spec = self._speculative[1]
                    spec_reply, self._spec_reply = self._spec_reply, None
                self._speculative = None
                self._drop_spec_reply()
                audio, cont, self._continuing = e.audio, self._continuing, None
                if cont is not None and cont.audio is not None:
                    audio = np.concatenate([cont.audio, audio])
                turn = Turn(audio=audio, ended_at=self.clock.now(), speculative=spec, spec_reply=spec_reply,
                             reason=e.reason or "", early=e.reason == "early", continues=cont)
                if turn.early:
                    self._early_turn, self._early_at = turn, self.clock.now()
                self._ensure_worker()
                self._turns.put_nowait(turn)
        if self._spec_reply is not None and self._vad.in_speech and self._vad.last_prob >= self._vad.threshold:
            self._drop_spec_reply()  # the caller spoke again after the pause: that reply is stale
        self._maybe_end_early()

    def _ensure_worker(self) -> None:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._work())

    async def _work(self) -> None:
        while True:
            turn = await self._turns.get()
            self._running_turn = True
            self._current = turn
            try:
                if not self.transferred:  # turns queued before the hand-over are not answered
                    await self._run_turn(turn)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - one bad turn must not end the call
                LOG.exception("turn failed (call %s)", self.id)
                self._emit(ErrorEvent(code="turn_failed", message=f"{type(e).__name__}: {e}"))
            finally:
                self._running_turn = False
                if turn.spec_reply is not None:  # unused (or already cancelled): make sure it stops
                    self._drop_spec_reply(turn.spec_reply)
                self._turns.task_done()

    async def _run_turn(self, turn: Turn) -> None:
        """One turn, top to bottom: hear (ASR, repair) → decide → recheck → speak → record."""
        timings: dict[str, float] = {}
        asr_signal: AsrSignal | None = None
        render: Render | None = None  # the previewed reply's audio, rendered since the pause
        if turn.text is not None:
            text = turn.text
        else:
            text, asr_signal, render = await self._hear(turn, timings)
            timings["early_end"] = 1.0 if turn.early else 0.0
            timings["continued"] = 1.0 if turn.continues is not None else 0.0
        try:
            out = await asyncio.to_thread(self._locked, self._decide, turn, text, asr_signal, timings)
            decision = await asyncio.to_thread(self._locked, self.session.recheck_before_speech, out.decision,
                                               out.audit_id)
        except BaseException:
            if render is not None:
                render.cancel()
            raise
        timings.update(out.timings_ms)
        timings["turn_end_to_decision"] = (self.clock.now() - turn.ended_at) * 1000
        if render is not None and render.text != decision.message:
            render.cancel()  # the final words differ from the preview's: render them afresh
            render = None
        if turn.text is None:
            timings["speculative_reply"] = 1.0 if render is not None else 0.0
            if render is not None:  # how long before the turn ended its render began (< 0: after)
                timings["speculative_reply_lead"] = (turn.ended_at - render.started_at) * 1000
        self._emit(DecisionEvent(decision=decision, timings_ms=dict(timings), said=out.said))
        if turn.superseded:  # the caller went on speaking: the whole turn is decided once they finish
            if render is not None:
                render.cancel()
            return

        first_audio_at = await self._speak_decision(decision, out.normalized_question or text, render)
        if first_audio_at is not None:
            timings["tts_first_audio"] = (first_audio_at - turn.ended_at) * 1000 - timings["turn_end_to_decision"]
            timings["turn_end_to_first_audio"] = (first_audio_at - turn.ended_at) * 1000
        self.timings.append(timings)
        late = {k: v for k, v in timings.items()
                if k.startswith(("asr", "tts", "turn_end", "speculative", "early_end", "continued"))}
        try:
            await asyncio.to_thread(self._locked, self.session.record_timings, out.audit_id, late)
        except Exception:  # noqa: BLE001 - timings are nice to have
            LOG.warning("could not record timings for %s", out.audit_id)

    async def _hear(self, turn: Turn, timings: dict[str, float]) -> tuple[str, AsrSignal, Render | None]:
        """A spoken turn's transcript (the one made at the pause when it is for the same audio),
        its ASR signal, and the previewed reply's render when speculation made one."""
        if turn.audio is None:
            raise RuntimeError("a spoken turn without audio")
        spec_hit = 0.0
        res = None
        render: Render | None = None
        if turn.speculative is not None:
            try:
                res = await turn.speculative
                spec_hit = 1.0
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - redo it below
                res = None
        if res is None:
            res = await self._transcribe(turn.audio)
            if turn.spec_reply is not None:
                self._drop_spec_reply(turn.spec_reply)
                turn.spec_reply = None
        timings["asr"] = res.elapsed_ms
        timings["asr_wait"] = (self.clock.now() - turn.ended_at) * 1000  # turn end → transcript
        timings["asr_speculative"] = spec_hit
        timings["asr_rtf"] = res.elapsed_ms / 1000 / max(res.duration_s, 1e-6)
        raw = text = res.text  # the engine normalizes it, as it does typed turns
        asr_signal = AsrSignal(avg_logprob=res.avg_logprob, no_speech_prob=res.no_speech_prob,
                               low_confidence=res.low_confidence, raw_text=raw)
        self._emit(TranscriptEvent(text=text, final=True, raw_text=raw, low_confidence=res.low_confidence))
        if turn.spec_reply is not None:
            # Same audio, same transcript: the preview must run before this turn, on the
            # conversation as it was; usually it finished (and the render began) long ago.
            spec_reply, turn.spec_reply = turn.spec_reply, None
            try:
                await asyncio.wait({spec_reply})  # unlike `await`, a cancelled call does not cancel it
            except BaseException:
                self._drop_spec_reply(spec_reply)
                raise
            if not spec_reply.cancelled() and spec_reply.exception() is None:
                render = spec_reply.result()
            elif not spec_reply.cancelled():
                LOG.warning("speculative reply failed (call %s): %r", self.id, spec_reply.exception())
        if self.config.asr_repair and turn.audio is not None:
            weighed: list[str] = []
            if render is not None and render.repair_ran:
                repaired = render.repaired  # the pass already ran at the pause, on the same transcript
                timings.update(render.rehear_timings)
                weighed = render.weighed
            else:
                repaired = await self._repair_transcript(turn.audio, text, asr_signal,
                                                         render.decision if render is not None else None, timings,
                                                         weighed)
            timings["asr_repaired"] = 1.0 if repaired else 0.0
            if repaired:
                text, asr_signal, _ = repaired
                self._emit(TranscriptEvent(text=text, final=True, raw_text=raw, low_confidence=False))
            elif weighed:  # the audit line names what else was heard, and why it was not taken
                asr_signal = asr_signal.model_copy(update={"weighed": list(weighed)})
        return text, asr_signal, render

    def _decide(self, turn: Turn, text: str, asr: AsrSignal | None, timings: dict[str, float]) -> TurnResult:
        """The engine turn (in a worker thread, under the call's lock). A continuation first
        undoes the early turn it completes; an early turn keeps what it would undo."""
        cont = turn.continues
        if cont is not None and cont.snapshot is not None:
            self.session.restore(cont.snapshot, superseded=cont.audit_id, reason="caller_continued")
        if turn.early:
            turn.snapshot = self.session.snapshot()
        out = self.session.turn(text, asr=asr, timings_ms=timings)
        turn.audit_id = out.audit_id
        if self.on_turn is not None:  # before the decision goes out: a resumed call knows this turn
            t = time.perf_counter()
            self.on_turn(self.session.snapshot(), out.decision)
            timings["checkpoint"] = (time.perf_counter() - t) * 1000
        return out
