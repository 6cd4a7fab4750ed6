"""The voice pipeline of one call, over the policy engine.

    audio in → resample to 16 kHz → VAD endpointing → ASR → normalize → engine turn
             → pre-TTS recheck → TTS sentence by sentence → resample/encode → audio out

`VoiceRuntime` holds what every call shares (engine, warm ASR model, TTS worker);
`CallSession` is one conversation: asyncio on the outside, CPU work in threads. Events come
out of `events()` in order; the server, replay, mic and bench all consume the same stream.

Latency: when the caller has been quiet for `pause_ms` (200 ms) we already transcribe the turn
so far, decide what we would say (`Session.preview`, which records nothing) and start rendering
that message into a buffer; nothing is emitted. When the turn really ends (`end_silence_ms`,
500 ms) with no more speech, the real turn and pre-TTS recheck run as always, and if the final
message is exactly the previewed one its buffered audio goes out at once; otherwise the early
render is cancelled and the final message is spoken. Speech after the pause discards it all.
Barge-in: while a reply plays, the microphone goes to a `BargeInDetector` that cancels the
reply's echo; when the caller talks over the reply we stop its audio, emit `ClearEvent`, and the
caller's speech (from just before its onset) becomes the next turn.
"""
from __future__ import annotations

import asyncio
import difflib
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from policy.decision import Action, Decision, Handoff, Reason

from .audio import Resampler, float_to_pcm16, mulaw_encode, pcm16_to_float

LOG = logging.getLogger(__name__)
SR = 16000
CHUNK_S = 0.2  # reply audio is sent in pieces of this length, so a barge-in stops it quickly
TTS_FAILED_MESSAGE = ("I'm having trouble with my voice system. I'm transferring you to our {team} team now. "
                      "I'm passing along your question, so you won't need to repeat yourself.")


class CallConfig(BaseModel):
    end_silence_ms: int = 500
    max_turn_s: float = 30.0
    asr_model: str = "tiny.en"
    input_rate: int = 16000
    output_rate: int = 16000
    output_encoding: Literal["pcm16", "mulaw"] = "pcm16"
    barge_in: bool = True
    speculative_asr: bool = True  # transcribe at the first pause, before the turn ends
    speculative_reply: bool = True  # also preview the decision and render its audio at the pause
    # Render a reply at most this many seconds ahead of its playback (None: as fast as possible).
    # Live calls pace so concurrent calls share the CPU for first sentences, not for audio nobody
    # has heard yet (a barge-in would throw it away); replays and evaluation render straight through.
    reply_lead_s: float | None = 2.0
    # When a turn would be refused for lack of evidence, transcribe it once more with the KB's
    # terms as whisper's prompt; use that transcript only if it stays close to the first one and
    # finds evidence ("light payment fee" -> "late payment fee"). The policy still checks it all.
    asr_repair: bool = True
    pause_ms: int = 200
    # End the turn after this much silence instead of `end_silence_ms` when the transcript made
    # at the pause reads as a finished sentence and its reply is ready (None: always wait).
    early_end_ms: int | None = 300
    # A caller who starts speaking again within this many seconds of such an early end was not
    # finished: the reply stops, and both parts are transcribed and decided as one turn. (Speech
    # is confirmed `min_speech_ms` after it starts, so this covers pauses of up to ~1 s in all.)
    continuation_s: float = 0.9
    vad_threshold: float = 0.5
    min_speech_ms: int = 200
    pre_roll_ms: int = 200


# ---------------------------------------------------------------------------------- events


class TranscriptEvent(BaseModel):
    type: Literal["transcript"] = "transcript"
    text: str
    final: bool = True
    raw_text: str = ""  # what ASR heard, before normalization
    low_confidence: bool = False


class DecisionEvent(BaseModel):
    type: Literal["decision"] = "decision"
    decision: Decision
    timings_ms: dict[str, float] = Field(default_factory=dict)


class AudioStart(BaseModel):
    type: Literal["audio_start"] = "audio_start"
    id: str
    sample_rate: int
    encoding: Literal["pcm16", "mulaw"] = "pcm16"


class AudioChunk(BaseModel):
    type: Literal["audio_chunk"] = "audio_chunk"
    id: str
    data: bytes


class AudioEnd(BaseModel):
    type: Literal["audio_end"] = "audio_end"
    id: str


class ClearEvent(BaseModel):
    type: Literal["clear"] = "clear"
    id: str | None = None  # the reply that was cut off


class TransferEvent(BaseModel):
    type: Literal["transfer"] = "transfer"
    handoff: Handoff


class ErrorEvent(BaseModel):
    type: Literal["error"] = "error"
    code: str
    message: str


CallEvent = Union[TranscriptEvent, DecisionEvent, AudioStart, AudioChunk, AudioEnd, ClearEvent, TransferEvent,
                  ErrorEvent]


# --------------------------------------------------------------------------------- runtime


class VoiceRuntime:
    """Process-wide warm models, shared by all calls."""

    def __init__(self, engine: Any, transcriber: Any, tts: Any | None, asr_model: str = "tiny.en"):
        self.engine = engine
        self.transcriber = transcriber
        self.tts = tts
        self.asr_model = asr_model
        self._prompts: dict[str, str | None] = {}

    @classmethod
    def load(cls, kb_dir: str | Path, *, asr_model: str = "tiny.en", state_dir: str | Path = "var",
             policy_file: str | Path | None = None, tts: bool = True) -> "VoiceRuntime":
        from policy.engine import Engine

        from .asr import Transcriber

        engine = Engine.load(kb_dir, policy_file=policy_file, state_dir=state_dir)
        transcriber = Transcriber(asr_model, vocabulary=engine.vocabulary("public"))
        client = None
        if tts:
            from .tts import TtsClient

            client = TtsClient()
            threading.Thread(target=_start_quietly, args=(client,), daemon=True).start()  # loads in parallel
        transcriber.warmup()
        if client is not None:
            client.start()
        return cls(engine, transcriber, client, asr_model)

    def vocabulary(self, role: str) -> list[str]:
        return self.engine.vocabulary(role)  # cached per role by the engine

    def repair_prompt(self, role: str) -> str | None:
        """KB terms (visible to this role) for the second-pass transcription of a refused turn."""
        key = f"repair:{role}"
        if key not in self._prompts:
            from .asr import build_prompt

            self._prompts[key] = build_prompt(self.vocabulary(role))
        return self._prompts[key]

    def asr_prompt(self, role: str) -> str | None:
        """ASR bias per role: a caller never gets a restricted document's words in the prompt."""
        if getattr(self.transcriber, "bias", "prompt") != "prompt":
            return None
        if role not in self._prompts:
            from .asr import build_prompt

            self._prompts[role] = build_prompt(self.vocabulary(role))
        return self._prompts[role]

    def new_call(self, *, role: str = "public", facets: dict[str, str] | None = None,
                 config: CallConfig | None = None) -> "CallSession":
        return CallSession(self, role=role, facets=facets, config=config or CallConfig(asr_model=self.asr_model))

    def close(self) -> None:
        if self.tts is not None:
            self.tts.close()


def _ok(task: asyncio.Task) -> bool:
    """Finished with a result (not cancelled, no exception)."""
    return task.done() and not task.cancelled() and task.exception() is None


def _cancel_render(task: asyncio.Task) -> None:
    """Done-callback of a dropped speculative task: a render it started anyway is cancelled."""
    if not task.cancelled() and task.exception() is None and task.result() is not None:
        task.result().cancel()


def _start_quietly(client: Any) -> None:
    try:
        client.start()
    except Exception:  # noqa: BLE001 - retried (and reported) by the synchronous start
        pass


# ----------------------------------------------------------------------------------- turns


class _Turn(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    audio: np.ndarray | None = None
    text: str | None = None  # typed turn
    ended_at: float = 0.0  # monotonic time the turn ended (VAD turn_end / text received)
    speculative: Any = None  # asyncio.Task with an AsrResult for the same audio, if any
    spec_reply: Any = None  # asyncio.Task with a buffered `_Render` of the previewed reply (or None)
    reason: str = ""
    early: bool = False  # ended before the full end-of-turn silence (see CallConfig.early_end_ms)
    continues: Any = None  # the early-ended `_Turn` whose caller went on speaking: this is its rest
    superseded: bool = False  # an early turn that the caller went on with: do not speak its reply
    snapshot: Any = None  # conversation state before this (early) turn, to undo it when superseded
    audit_id: str = ""
    reply_id: str = ""  # its reply audio, once started


_DONE = object()
# Refusals for lack of evidence: the ones a misheard word can cause.
_EVIDENCE_REFUSALS = {Reason.no_relevant_evidence, Reason.low_retrieval_score, Reason.required_fact_not_covered,
                      Reason.background_only, Reason.partial_evidence}


class _Render:
    """One TTS render in a worker thread, its chunks buffered in an asyncio queue.

    Rendering starts at once; whoever speaks it drains `q` (chunks, an exception, then `_DONE`).
    `cancel()` makes the thread stop after the chunk it is waiting for and close the TTS
    iterator, which releases the TTS client's lock and cancels the rest in the worker."""

    def __init__(self, tts: Any, text: str, loop: asyncio.AbstractEventLoop, lead_s: float | None = None):
        self.text = text
        self.lead_s = lead_s
        self.decision: Decision | None = None  # the previewed decision this audio speaks
        self.repair_ran = False  # the ASR repair pass already ran for this transcript …
        self.repaired: tuple[str, Any, Decision] | None = None  # … and found this (None: nothing)
        self.q: asyncio.Queue[Any] = asyncio.Queue()
        self.cancelled = threading.Event()
        self._loop = loop
        self.started_at = time.monotonic()
        self.first_chunk_at: float | None = None  # when its first audio was rendered
        self.future = loop.run_in_executor(None, self._run, tts)

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self.q.put_nowait, item)
        except RuntimeError:  # the loop is gone (call torn down): nobody listens any more
            pass

    def _run(self, tts: Any) -> None:
        gen: Iterator[Any] | None = None
        try:
            gen = iter(tts.synthesize(self.text))
            rendered = 0.0  # seconds of audio handed out so far
            for chunk in gen:
                if self.cancelled.is_set():
                    break
                if self.first_chunk_at is None:
                    self.first_chunk_at = time.monotonic()
                self._put(chunk)
                rendered += len(chunk.pcm) / chunk.sample_rate
                # Pacing: stop pulling while far ahead of playback; the worker then blocks on its
                # full pipe, leaving the CPU to other calls' first sentences.
                while self.lead_s is not None and not self.cancelled.is_set() \
                        and rendered - (time.monotonic() - self.first_chunk_at) > self.lead_s:
                    self.cancelled.wait(0.05)
        except BaseException as e:  # noqa: BLE001 - handed to the event loop
            self._put(e)
        finally:
            close = getattr(gen, "close", None)
            if close:
                close()  # a cancelled render stops the rest (and frees the TTS lock)
            self._put(_DONE)

    def cancel(self) -> None:
        self.cancelled.set()


class CallSession:
    def __init__(self, runtime: VoiceRuntime, *, role: str = "public", facets: dict[str, str] | None = None,
                 config: CallConfig | None = None):
        from .bargein import BargeInDetector
        from .vad import StreamingVad

        self.runtime = runtime
        self.config = config or CallConfig()
        self.role = role
        self.session = runtime.engine.session(role=role, facets=dict(facets or {}))
        self.id = self.session.session_id
        c = self.config
        self._vad = StreamingVad(end_silence_ms=c.end_silence_ms, max_turn_s=c.max_turn_s, threshold=c.vad_threshold,
                                 min_speech_ms=c.min_speech_ms, pre_roll_ms=c.pre_roll_ms,
                                 pause_ms=c.pause_ms if c.speculative_asr else None)
        self._barge = BargeInDetector(threshold=c.vad_threshold) if c.barge_in else None
        self._in_rs = Resampler(c.input_rate, SR)
        self._events: asyncio.Queue[Any] = asyncio.Queue()
        self._turns: asyncio.Queue[Any] = asyncio.Queue()
        self._worker: asyncio.Task | None = None
        self._speculative: tuple[int, asyncio.Task] | None = None  # (turn number, task)
        self._spec_reply: asyncio.Task | None = None  # preview + buffered render for that pause
        self._decide_lock = threading.Lock()  # preview and turn share session state: one at a time
        self._running_turn = False
        self._current: _Turn | None = None  # the turn being answered
        self._early_turn: _Turn | None = None  # the last early-ended turn, while it may still continue
        self._early_at = 0.0
        self._continuing: _Turn | None = None  # speech now in progress continues this early turn
        self._turn_no = 0
        self._playing_id: str | None = None
        self._cleared: set[str] = set()  # replies a `clear` was sent for
        self._cancel_reply = threading.Event()
        self._held = np.zeros(0, dtype=np.float32)  # mic audio kept while a reply plays
        self._closed = False
        self.timings: list[dict[str, float]] = []  # per turn, for benchmarks

    # -- public API --------------------------------------------------------------------------
    def events(self) -> AsyncIterator[CallEvent]:
        return self._iter_events()

    async def _iter_events(self) -> AsyncIterator[CallEvent]:
        while True:
            ev = await self._events.get()
            if ev is _DONE:
                return
            yield ev

    async def feed_audio(self, pcm16: bytes) -> None:
        """Caller audio: PCM16 little-endian mono at `config.input_rate`."""
        if self._closed:
            return
        x = self._in_rs.process(pcm16_to_float(pcm16))
        self._route(x)

    async def text_turn(self, text: str) -> None:
        """A typed turn: skips ASR, otherwise the same path (policy, recheck, TTS)."""
        self._drop_spec_reply()
        self._ensure_worker()
        await self._turns.put(_Turn(text=text, ended_at=time.monotonic()))

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
        await self._events.put(_DONE)

    # -- audio routing -----------------------------------------------------------------------
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
        back = int((mic_now - onset_s + self.config.pre_roll_ms / 1000 + 0.1) * SR)
        held = self._held[-back:] if back > 0 else self._held
        self._held = np.zeros(0, np.float32)
        self._barge.reset()
        self._handle_vad(self._vad.feed(held))

    def _handle_vad(self, events: list[Any]) -> None:
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
                turn = _Turn(audio=audio, ended_at=time.monotonic(), speculative=spec, spec_reply=spec_reply,
                             reason=e.reason or "", early=e.reason == "early", continues=cont)
                if turn.early:
                    self._early_turn, self._early_at = turn, time.monotonic()
                self._ensure_worker()
                self._turns.put_nowait(turn)
        if self._spec_reply is not None and self._vad.in_speech and self._vad.last_prob >= self._vad.threshold:
            self._drop_spec_reply()  # the caller spoke again after the pause: that reply is stale
        self._maybe_end_early()

    # -- early end of turn -------------------------------------------------------------------
    def _maybe_end_early(self) -> None:
        """End the turn now (after `early_end_ms` of silence, not `end_silence_ms`) when what was
        transcribed at the pause is a finished question (or answers our clarifying one) and its
        reply is rendering. Not for transfers: their package goes to a team for good, so they
        wait for the full silence."""
        from .turn_end import reads_complete

        c, vad = self.config, self._vad
        if c.early_end_ms is None or not vad.in_speech or self._continuing is not None:
            return
        if not c.early_end_ms <= vad.silence_ms < c.end_silence_ms:
            return
        spec = self._speculative
        if spec is None or spec[0] != self._turn_no or not _ok(spec[1]):
            return
        res = spec[1].result()
        # A question, or any finished sentence in reply to our clarifying question.
        answering = self.session.pending_question is not None
        if res.low_confidence or not reads_complete(res.text, question=not answering):
            return
        if c.speculative_reply and self.runtime.tts is not None:
            if self._spec_reply is None or not _ok(self._spec_reply) or self._spec_reply.result() is None:
                return
            d = self._spec_reply.result().decision
            if d is None or d.action == Action.transfer:
                return
        ev = vad.end_now()
        if ev is not None:
            self._handle_vad([ev])

    def _continuation_check(self) -> None:
        """Speech started: if it follows an early end closely, the caller was not finished. Stop
        that reply; this speech will be appended to that turn's audio and the two decided as one."""
        early, self._early_turn = self._early_turn, None
        if early is None or time.monotonic() - self._early_at > self.config.continuation_s:
            return
        early.superseded = True
        self._continuing = early
        self._cancel_reply.set()
        if early.reply_id:  # with or without barge-in: the client drops what it has not played
            self._clear(early.reply_id)
            if self._playing_id == early.reply_id:
                self._playing_id = None

    def _clear(self, reply_id: str | None) -> None:
        """Tell the client to drop a reply's unplayed audio (once per reply)."""
        if reply_id is None or reply_id in self._cleared:
            return
        self._cleared.add(reply_id)
        self._emit(ClearEvent(id=reply_id))

    # -- speculative reply -------------------------------------------------------------------
    async def _speculate(self, asr: asyncio.Task, audio: np.ndarray) -> _Render | None:
        """At a pause: the transcript so far → what we would answer (after the ASR repair pass,
        when it applies) → its audio, buffered."""
        from policy.engine import AsrSignal

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
        render = _Render(self.runtime.tts, decision.message, asyncio.get_running_loop(), self.config.reply_lead_s)
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
            if not task.cancelled() and task.exception() is None and task.result() is not None:
                task.result().cancel()
        else:
            task.add_done_callback(_cancel_render)
            task.cancel()

    def _locked(self, fn: Any, *args: Any, **kw: Any) -> Any:
        """Run a session method with the per-call lock (in a worker thread)."""
        with self._decide_lock:
            return fn(*args, **kw)

    # -- the turn worker ---------------------------------------------------------------------
    def _ensure_worker(self) -> None:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._work())

    async def _work(self) -> None:
        while True:
            turn = await self._turns.get()
            self._running_turn = True
            self._current = turn
            try:
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

    async def _transcribe(self, audio: np.ndarray) -> Any:
        rt = self.runtime
        return await asyncio.to_thread(rt.transcriber.transcribe, audio, prompt=rt.asr_prompt(self.role) or "")

    async def _repair_transcript(self, audio: np.ndarray, text: str, signal: Any,
                                 first: Decision | None) -> tuple[str, Any, Decision] | None:
        """A second, KB-biased transcription for a turn about to be refused for lack of evidence.
        Returns (text, signal, previewed decision) when it stays close to the first transcript
        and finds evidence."""
        from policy.engine import AsrSignal

        if first is None:
            first = await asyncio.to_thread(self._locked, self.session.preview, text, asr=signal)
        if first.action != Action.refuse or not set(first.reasons) & _EVIDENCE_REFUSALS:
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

    async def _run_turn(self, turn: _Turn) -> None:
        from policy.engine import AsrSignal

        timings: dict[str, float] = {}
        asr_signal = None
        render: _Render | None = None  # the previewed reply's audio, rendered since the pause
        if turn.text is not None:
            text = turn.text
        else:
            spec_hit = 0.0
            res = None
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
            timings["asr_wait"] = (time.monotonic() - turn.ended_at) * 1000  # turn end → transcript
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
            if self.config.asr_repair and not res.low_confidence and turn.audio is not None:
                if render is not None and render.repair_ran:
                    repaired = render.repaired  # the pass already ran at the pause, on the same transcript
                else:
                    repaired = await self._repair_transcript(turn.audio, text, asr_signal,
                                                             render.decision if render is not None else None)
                timings["asr_repaired"] = 1.0 if repaired else 0.0
                if repaired:
                    text, asr_signal, _ = repaired
                    self._emit(TranscriptEvent(text=text, final=True, raw_text=raw, low_confidence=False))

        if turn.text is None:
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
        timings["turn_end_to_decision"] = (time.monotonic() - turn.ended_at) * 1000
        if render is not None and render.text != decision.message:
            render.cancel()  # the final words differ from the preview's: render them afresh
            render = None
        if turn.text is None:
            timings["speculative_reply"] = 1.0 if render is not None else 0.0
            if render is not None:  # how long before the turn ended its render began (< 0: after)
                timings["speculative_reply_lead"] = (turn.ended_at - render.started_at) * 1000
        self._emit(DecisionEvent(decision=decision, timings_ms=dict(timings)))
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

    def _decide(self, turn: _Turn, text: str, asr: Any, timings: dict[str, float]) -> Any:
        """The engine turn (in a worker thread, under the call's lock). A continuation first
        undoes the early turn it completes; an early turn keeps what it would undo."""
        cont = turn.continues
        if cont is not None and cont.snapshot is not None:
            self.session.restore(cont.snapshot, superseded=cont.audit_id, reason="caller_continued")
        if turn.early:
            turn.snapshot = self.session.snapshot()
        out = self.session.turn(text, asr=asr, timings_ms=timings)
        turn.audit_id = out.audit_id
        return out

    async def _speak_decision(self, decision: Decision, question: str, render: _Render | None = None) -> float | None:
        """Speak the decision (from `render` when its audio was rendered early); a transfer's
        package follows its spoken message. If TTS is down, degrade to a spoken (or at least
        signalled) transfer: never dead air."""
        from .tts import TtsUnavailable

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
            self._emit(TransferEvent(handoff=decision.handoff))
        return first

    def _tts_transfer(self, decision: Decision, question: str) -> Decision:
        team = (decision.handoff.team if decision.handoff else None) or self.session.engine.config.default_team
        message = TTS_FAILED_MESSAGE.format(team=team.replace("_", " "))
        return self.session.degrade_to_transfer(decision, Reason.tts_unavailable, message, question)

    async def _speak(self, text: str, render: _Render | None = None) -> float | None:
        """Emit `text` as audio, from `render` (already rendering, maybe with chunks waiting)
        or from a new render; returns the monotonic time of the first audio chunk."""
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
            render = _Render(tts, text, asyncio.get_running_loop(), c.reply_lead_s)
        self._cancel_reply = cancel = render.cancelled  # a barge-in (or close) cancels this reply
        q, worker = render.q, render.future
        out_rs: Resampler | None = None
        ref_rs: Resampler | None = None
        first: float | None = None
        started = False
        try:
            while True:
                item = await q.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                if self._current is not None and self._current.superseded and not cancel.is_set():
                    cancel.set()  # the caller went on after an early end of turn
                    if started:
                        self._clear(reply_id)
                if cancel.is_set():
                    continue
                pcm = item.pcm.astype(np.float32) / 32768.0
                if out_rs is None:
                    out_rs = Resampler(item.sample_rate, c.output_rate)
                    ref_rs = Resampler(item.sample_rate, SR)
                if not started:
                    self._emit(AudioStart(id=reply_id, sample_rate=c.output_rate, encoding=c.output_encoding))
                    started = True
                    if self._current is not None:
                        self._current.reply_id = reply_id
                    if self._barge is not None:
                        self._barge.reset()
                        self._playing_id = reply_id
                if first is None:
                    first = time.monotonic()
                self._send(reply_id, out_rs.process(pcm))
                if self._barge is not None and ref_rs is not None and self._playing_id == reply_id:
                    self._barge.push_reference(ref_rs.process(pcm))
            if started and not cancel.is_set():
                if out_rs is not None:
                    self._send(reply_id, out_rs.flush())
                self._emit(AudioEnd(id=reply_id))
        except BaseException:
            render.cancel()  # a failed or torn-down reply stops rendering (and frees the TTS worker)
            raise
        finally:
            await worker
        return first

    def _send(self, reply_id: str, x: np.ndarray) -> None:
        c = self.config
        step = int(c.output_rate * CHUNK_S)
        for i in range(0, len(x), step):
            piece = x[i : i + step]
            data = float_to_pcm16(piece) if c.output_encoding == "pcm16" else mulaw_encode(piece)
            self._emit(AudioChunk(id=reply_id, data=data))

    def _emit(self, ev: Any) -> None:
        self._events.put_nowait(ev)
