"""Work done at a pause, before the turn ends: the transcript so far, the decision it would get
(with the ASR repair pass), its audio rendered into a buffer; ending the turn early when that reads
complete; and undoing an early end when the caller goes on speaking."""
from __future__ import annotations

import asyncio
import difflib

import numpy as np

from policy.decision import Action, Decision, Reason
from policy.engine import AsrSignal

from ..stages.turn_end import reads_complete
from .core import CallCore
from .render import Render, cancel_render, finished_ok

# Refusals for lack of evidence: the ones a misheard word can cause.
_EVIDENCE_REFUSALS = {Reason.no_relevant_evidence, Reason.low_retrieval_score, Reason.required_fact_not_covered,
                      Reason.background_only, Reason.partial_evidence}


class Speculation(CallCore):
    def _maybe_end_early(self) -> None:
        """End the turn now (after `early_end_ms` of silence, not `end_silence_ms`) when what was
        transcribed at the pause is a finished question (or answers our clarifying one) and its
        reply is rendering. Not for transfers: their package goes to a team for good, so they
        wait for the full silence."""
        c, vad = self.config, self._vad
        if c.early_end_ms is None or not vad.in_speech or self._continuing is not None:
            return
        if not c.early_end_ms <= vad.silence_ms < c.end_silence_ms:
            return
        spec = self._speculative
        if spec is None or spec[0] != self._turn_no or not finished_ok(spec[1]):
            return
        res = spec[1].result()
        # A question, or any finished sentence in reply to our clarifying question.
        answering = self.session.pending_question is not None
        if res.low_confidence or not reads_complete(res.text, question=not answering):
            return
        if c.speculative_reply and self.runtime.tts is not None:
            ready = self._spec_reply.result() if self._spec_reply and finished_ok(self._spec_reply) else None
            if ready is None or ready.decision is None or ready.decision.action == Action.transfer:
                return
        ev = vad.end_now()
        if ev is not None:
            self._handle_vad([ev])

    def _continuation_check(self) -> None:
        """Speech started: if it follows an early end closely, the caller was not finished. Stop
        that reply; this speech will be appended to that turn's audio and the two decided as one."""
        early, self._early_turn = self._early_turn, None
        if early is None or self.clock.now() - self._early_at > self.config.continuation_s:
            return
        early.superseded = True
        self._continuing = early
        self._cancel_reply.set()
        if early.reply_id:  # with or without barge-in: the client drops what it has not played
            self._clear(early.reply_id)
            if self._playing_id == early.reply_id:
                self._playing_id = None

    async def _speculate(self, asr: asyncio.Task, audio: np.ndarray) -> Render | None:
        """At a pause: the transcript so far → what we would answer (after the ASR repair pass,
        when it applies) → its audio, buffered."""
        res = await asyncio.shield(asr)  # dropping this reply must not cancel the transcription
        if res.low_confidence or not res.text.strip():
            return None
        signal = AsrSignal(avg_logprob=res.avg_logprob, no_speech_prob=res.no_speech_prob,
                           low_confidence=res.low_confidence, raw_text=res.text)
        decision = await asyncio.to_thread(self._locked, self.session.preview, res.text, asr=signal)
        repaired = None
        if self.config.asr_repair:
            repaired = await self._repair_transcript(audio, res.text, signal, decision)
            if repaired is not None:
                decision = repaired[2]
        if not decision.message.strip():
            return None
        tts = self.runtime.tts
        if tts is None:
            return None
        render = Render(tts, decision.message, asyncio.get_running_loop(), self.config.reply_lead_s, self.clock)
        render.decision = decision
        render.repair_ran, render.repaired = self.config.asr_repair, repaired
        return render

    def _drop_spec_reply(self, task: asyncio.Task | None = None) -> None:
        """Discard a speculative reply: stop its preview, or cancel its render (closing the TTS
        iterator, so the real reply is not kept waiting for the TTS worker)."""
        if task is None:
            task, self._spec_reply = self._spec_reply, None
        if task is None:
            return
        if task.done():
            render = task.result() if not task.cancelled() and task.exception() is None else None
            if render is not None:
                render.cancel()
        else:
            task.add_done_callback(cancel_render)
            task.cancel()

    async def _repair_transcript(self, audio: np.ndarray, text: str, signal: AsrSignal,
                                 first: Decision | None) -> tuple[str, AsrSignal, Decision] | None:
        """A second, KB-biased transcription for a turn about to be refused for lack of evidence.
        Returns (text, signal, previewed decision) when it stays close to the first transcript
        and finds evidence."""
        decided: Decision = first if first is not None else \
            await asyncio.to_thread(self._locked, self.session.preview, text, asr=signal)
        if decided.action != Action.refuse or not set(decided.reasons) & _EVIDENCE_REFUSALS:
            return None
        prompt = self.runtime.repair_prompt(self.role)
        if not prompt:
            return None
        res = await asyncio.to_thread(self.runtime.transcriber.transcribe, audio, prompt=prompt, fallback=False)
        new = res.text.strip()
        if res.low_confidence or not new or new.lower() == text.strip().lower():
            return None
        # a repair changes a word or two; a different sentence is the prompt talking, not the caller
        if difflib.SequenceMatcher(None, text.lower().split(), new.lower().split()).ratio() < 0.6:
            return None
        sig = AsrSignal(avg_logprob=res.avg_logprob, no_speech_prob=res.no_speech_prob, low_confidence=False,
                        raw_text=new)
        second = await asyncio.to_thread(self._locked, self.session.preview, new, asr=sig)
        return (new, sig, second) if second.action != Action.refuse else None
