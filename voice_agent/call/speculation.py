"""Work done at a pause, before the turn ends: the transcript so far, the decision it would get
(with the ASR repair pass), its audio rendered into a buffer; ending the turn early when that reads
complete; and undoing an early end when the caller goes on speaking."""
from __future__ import annotations

import asyncio

import numpy as np

from policy.decision import Action, Decision, Reason
from policy.engine import AsrSignal
from kb.sound import sound_alikes

from ..stages.asr import looks_repetitive
from ..stages.asr_beam import said_words
from ..stages.turn_end import reads_complete
from .core import CallCore
from .rehear import (MAX_ASK_WORDS, Hypothesis, accept, answered_fragment, as_said, fitted_ask, needs_rehearing,
                     new_words, unread_answer, weighed_line)
from .render import Render, cancel_render, finished_ok

MAX_SOUND_ALIKES = 3  # previews per hearing: each costs one policy turn on the refusal path
REHEAR_BEAM = 4  # the second decode's beam: its hearings are weighed, best first


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
        rehear: dict[str, float] = {}
        weighed: list[str] = []
        if self.config.asr_repair:
            repaired = await self._repair_transcript(audio, res.text, signal, decision, rehear, weighed)
            if repaired is not None:
                decision = repaired[2]
        if not decision.message.strip():
            return None
        tts = self.runtime.tts
        if tts is None:
            return None
        render = Render(tts, decision.message, asyncio.get_running_loop(), self.config.reply_lead_s, self.clock)
        render.decision = decision
        render.repair_ran, render.repaired, render.rehear_timings = self.config.asr_repair, repaired, rehear
        render.weighed = weighed
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

    async def _repair_transcript(self, audio: np.ndarray, text: str, signal: AsrSignal, first: Decision | None,
                                 timings: dict[str, float],
                                 weighed: list[str]) -> tuple[str, AsrSignal, Decision] | None:
        """For a turn about to be refused for lack of evidence, or asked again for a doubtful hearing
        or for an answer to our clarify that could not be read: other hypotheses of the same audio
        (`rehear`), the first one that clearly strengthens the turn. Returns (text, signal whose
        `repair` says why, previewed decision), or None to keep the first hearing. `timings` gets
        `rehear` (ms) when hypotheses were weighed: the refusal path's extra cost; `weighed` gets each
        hypothesis previewed and not taken, for the audit line."""
        pending = tuple(self.session.pending_facets) if self.session.pending_question is not None else ()
        decided: Decision = first if first is not None else \
            await asyncio.to_thread(self._locked, self.session.preview, text, asr=signal)
        asked = pending if unread_answer(decided, pending) else ()  # a refusal after our clarify is a refusal
        fragment = answered_fragment(decided, text, signal.avg_logprob)
        if not (needs_rehearing(decided, asked) or fragment):
            return None
        t0 = self.clock.now()
        try:
            return await self._rehear(audio, text, signal, timings, weighed, asked, requests_only=fragment)
        finally:
            timings["rehear"] = (self.clock.now() - t0) * 1000

    async def _rehear(self, audio: np.ndarray, text: str, signal: AsrSignal, timings: dict[str, float],
                      weighed: list[str], asked: tuple[str, ...],
                      requests_only: bool = False) -> tuple[str, AsrSignal, Decision] | None:
        """`requests_only`: an answered fragment, which gives way only to a hearing that asks for a person."""
        async def weigh(h: Hypothesis) -> tuple[str, AsrSignal, Decision] | None:
            return await self._try_hypothesis(h, text, signal, weighed, asked, requests_only)

        # a doubtful hearing's words are no ground for sound-alikes: only a second decode
        for h in [] if signal.low_confidence else self._sound_alikes(text, signal.avg_logprob):
            if (found := await weigh(h)) is not None:
                return found
        # the two decodes run side by side (each model has its own workers): the refusal path waits
        # for the slower one, not for both
        decodes = asyncio.ensure_future(self._second_decode(audio, text, timings))
        decodes.add_done_callback(lambda t: t.cancelled() or t.exception())  # an unused one's error is not news
        try:
            if (fresh := await self._second_model(audio, text, timings)) is not None:
                if (found := await weigh(fresh)) is not None:
                    return found
            for h in await decodes:
                if (found := await weigh(h)) is not None:
                    return found
        finally:
            decodes.cancel()
        if (ask := await self._fitted_ask(audio, text, signal, timings)) is not None:
            return await weigh(ask)
        return None

    async def _second_model(self, audio: np.ndarray, text: str, timings: dict[str, float]) -> Hypothesis | None:
        """The audio heard afresh, without a prompt, by the stronger second model (Moonshine base, else
        whisper base), where one is loaded: on the 456 domain recordings Moonshine mishears 20.4% of
        the words, whisper base 24.9%, tiny.en 27.7%."""
        asr = self.runtime.rehear_transcriber
        if asr is self.runtime.transcriber:
            return None
        res = await asyncio.to_thread(asr.transcribe, audio, prompt="", fallback="never")
        timings["rehear_model"] = res.elapsed_ms
        new = res.text.strip()
        if res.low_confidence or not new or said_words(new) == said_words(text) or looks_repetitive(new):
            return None
        return Hypothesis(new, res.avg_logprob, "second model", decoded=True, repaired_words=new_words(text, new),
                          independent=True)

    async def _second_decode(self, audio: np.ndarray, text: str, timings: dict[str, float]) -> list[Hypothesis]:
        """A decode prompted with the KB's terms and how callers ask for a person: the beam's best
        hearings (where the model can give them), and the sound-alikes of the first."""
        prompt = self.runtime.repair_prompt(self.role)
        if not prompt:
            return []
        asr = self.runtime.transcriber  # the prompt's words bias a hearing: tiny.en's beam keeps to the audio
        hearings = getattr(asr, "hearings", None)
        results = await asyncio.to_thread(hearings, audio, prompt=prompt, n=REHEAR_BEAM) if hearings else \
            [await asyncio.to_thread(asr.transcribe, audio, prompt=prompt, fallback="never")]
        timings["rehear_decode"] = results[0].elapsed_ms
        out: list[Hypothesis] = []
        seen = {said_words(text)}  # punctuation never decides a turn: a hearing that differs only so is no news
        for i, res in enumerate(results):
            new = res.text.strip()
            if res.low_confidence or not new or said_words(new) in seen or looks_repetitive(new):  # the prompt looping
                continue
            seen.add(said_words(new))
            # an answer from a new hearing must stand on a word it heard differently
            decoded = Hypothesis(new, res.avg_logprob, "second decode" if i == 0 else f"second decode, beam {i + 1}",
                                 decoded=True, repaired_words=new_words(text, new), prompted=True)
            out += [decoded, *(self._sound_alikes(new, res.avg_logprob, decoded=True) if i == 0 else [])]
        return out

    async def _fitted_ask(self, audio: np.ndarray, text: str, signal: AsrSignal,
                          timings: dict[str, float]) -> Hypothesis | None:
        """On a short turn: the policy's ways of asking for a person, forced through the decoder,
        against the hearing (`asr_fit`)."""
        fit = getattr(self.runtime.transcriber, "fit", None)  # a transcriber that cannot force texts
        asks = [as_said(p) for p in self.runtime.engine.spoken_requests()]
        if fit is None or not asks or len(text.split()) > MAX_ASK_WORDS:
            return None
        t0 = self.clock.now()
        fits = await asyncio.to_thread(fit, audio, [text, *asks])
        timings["rehear_fit"] = (self.clock.now() - t0) * 1000
        return fitted_ask(asks, fits, signal.avg_logprob)

    def _sound_alikes(self, text: str, logprob: float | None, decoded: bool = False) -> list[Hypothesis]:
        """`text` with one word the KB does not use replaced by its KB sound-alike, per such word."""
        return [Hypothesis(fixed, logprob, f"sounds like: {r}", decoded=decoded, repaired_words=(r.meant,),
                           prompted=decoded)
                for fixed, r in sound_alikes(text, self.runtime.engine.sound_index(self.role))[:MAX_SOUND_ALIKES]]

    async def _try_hypothesis(self, h: Hypothesis, text: str, signal: AsrSignal, weighed: list[str],
                              asked: tuple[str, ...],
                              requests_only: bool = False) -> tuple[str, AsrSignal, Decision] | None:
        sig = AsrSignal(avg_logprob=h.avg_logprob, no_speech_prob=signal.no_speech_prob, low_confidence=False,
                        raw_text=signal.raw_text or text)
        o = await asyncio.to_thread(self._locked, self.session.preview_turn, h.text, asr=sig)
        d = o.decision
        why = accept(h, d, text, signal.avg_logprob, self._evidence_text(d, o.evidence), asked)
        if requests_only and Reason.human_requested not in d.reasons:
            why = None
        if why is None:
            weighed.append(weighed_line(h, d))
            return None
        return h.text, sig.model_copy(update={"repair": why, "weighed": list(weighed)}), d

    def _evidence_text(self, d: Decision, evidence: list[str]) -> str:
        """The headings and text of the sections a decision cites or otherwise rests on."""
        kb = self.runtime.engine.kb
        locators = dict.fromkeys([f"{c.doc_id}#{c.section}" for c in d.citations] + evidence)
        sections = [kb.section(loc) for loc in locators]
        return " ".join(f"{s.heading} {s.text}" for s in sections if s is not None)
