"""What one call's loop, speculation and replies share: the call state, the turn record, and the
small operations all three use (emit, clear, a locked session call, a transcription)."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import numpy as np

from policy.session_state import SessionState

from ..audio import Resampler
from ..interfaces import PolicySession, TurnHook
from ..stages.asr import AsrResult
from ..stages.bargein import BargeInDetector
from ..stages.vad import StreamingVad, VadEvent
from .config import CallConfig
from .events import CallEvent, ClearEvent
from .render import Render

if TYPE_CHECKING:  # the runtime creates calls; a call only reads its shared models
    from .runtime import VoiceRuntime

SR = 16000
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(eq=False)
class Turn:
    """One caller turn on its way through the call: its audio (or typed text) and what was
    prepared for it at the pause."""

    audio: np.ndarray | None = None
    text: str | None = None  # typed turn
    ended_at: float = 0.0  # clock time the turn ended (VAD turn_end / text received)
    speculative: asyncio.Task[AsrResult] | None = None  # the transcription made at the pause, same audio
    spec_reply: asyncio.Task[Render | None] | None = None  # the previewed reply, rendering into a buffer
    reason: str = ""
    early: bool = False  # ended before the full end-of-turn silence (see CallConfig.early_end_ms)
    continues: Turn | None = None  # the early-ended turn whose caller went on speaking: this is its rest
    superseded: bool = False  # an early turn that the caller went on with: do not speak its reply
    snapshot: SessionState | None = None  # conversation state before this (early) turn, to undo it when superseded
    audit_id: str = ""
    reply_id: str = ""  # its reply audio, once started


class CallCore:
    """The state of one call. `CallSession` adds the loop, `Speculation` the work done at a pause,
    `Replies` the spoken output; each reads and writes this state only."""

    def __init__(self, runtime: "VoiceRuntime", *, role: str = "public", facets: dict[str, str] | None = None,
                 config: CallConfig | None = None, state: SessionState | None = None,
                 on_turn: TurnHook | None = None):
        self.runtime = runtime
        self.clock = runtime.clock  # every time a call reads: simulated in tests
        self.config = config or CallConfig()
        self.role = state.role if state is not None else role
        engine = runtime.engine
        self.session: PolicySession = (engine.session(state=state) if state is not None
                                       else engine.session(role=role, facets=dict(facets or {})))
        self.on_turn = on_turn  # the server's checkpoint, after each decided turn
        self.id = self.session.session_id
        c = self.config
        self._vad = StreamingVad(end_silence_ms=c.end_silence_ms, max_turn_s=c.max_turn_s, threshold=c.speech_threshold(),
                                 min_speech_ms=c.min_speech_ms, pre_roll_ms=c.speech_pre_roll_ms(),
                                 pause_ms=c.pause_ms if c.speculative_asr else None)
        self._barge = BargeInDetector(threshold=c.vad_threshold) if c.barge_in else None
        self._in_rs = Resampler(c.input_rate, SR)
        self._events: asyncio.Queue[CallEvent | object] = asyncio.Queue()  # events, then DONE
        self._turns: asyncio.Queue[Turn] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._speculative: tuple[int, asyncio.Task[AsrResult]] | None = None  # (turn number, task)
        self._spec_reply: asyncio.Task[Render | None] | None = None  # preview + buffered render for that pause
        self._decide_lock = threading.Lock()  # preview and turn share session state: one at a time
        self._running_turn = False
        self._current: Turn | None = None  # the turn being answered
        self._early_turn: Turn | None = None  # the last early-ended turn, while it may still continue
        self._early_at = 0.0
        self._continuing: Turn | None = None  # speech now in progress continues this early turn
        self._turn_no = 0
        self._playing_id: str | None = None
        self._cleared: set[str] = set()  # replies a `clear` was sent for
        self._cancel_reply = threading.Event()
        self._held = np.zeros(0, dtype=np.float32)  # mic audio kept while a reply plays
        self._closed = False
        self.transferred = False  # a person has the call now: the agent hears and says nothing more
        self.timings: list[dict[str, float]] = []  # per turn, for benchmarks

    def _emit(self, ev: CallEvent) -> None:
        self._events.put_nowait(ev)

    def _clear(self, reply_id: str | None) -> None:
        """Tell the client to drop a reply's unplayed audio (once per reply)."""
        if reply_id is None or reply_id in self._cleared:
            return
        self._cleared.add(reply_id)
        self._emit(ClearEvent(id=reply_id))

    def _locked(self, fn: Callable[P, R], *args: P.args, **kw: P.kwargs) -> R:
        """Run a session method with the per-call lock (in a worker thread)."""
        with self._decide_lock:
            return fn(*args, **kw)

    async def _transcribe(self, audio: np.ndarray) -> AsrResult:
        rt = self.runtime
        # A doubtful short-window hearing is redone over the full 30 s window (~0.6 s more). With a
        # stronger second model loaded, one merely of low log-probability is not: a turn it would
        # have refused is heard afresh by that model anyway. A looping one still is.
        return await asyncio.to_thread(rt.transcriber.transcribe, audio, prompt=rt.asr_prompt(self.role) or "",
                                       fallback="doubtful" if rt.rehear_transcriber is rt.transcriber else "looping")

    # the call loop's (session.py); speculation ends a turn early through it
    _handle_vad: Callable[[list[VadEvent]], None]
