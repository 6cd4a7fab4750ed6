"""The typed seams of the voice path: what a call needs from a clock, a transcriber, a speech
synthesizer and the policy, and what the code driving calls needs from a call and from the
runtime that opens it, as `typing.Protocol`s. The real classes and the test fakes both
implement them, so mypy catches a fake that drifts from the real class."""
from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from typing import TYPE_CHECKING, Protocol

import numpy as np

from policy.decision import Decision, Reason
from policy.session import AsrSignal
from policy.session_state import SessionState

if TYPE_CHECKING:  # only for annotations: the stages import numpy/onnx at their own pace
    from .call.config import CallConfig
    from .call.events import CallEvent
    from .stages.asr import AsrResult, Fallback
    from .stages.tts import TtsChunk


class Clock(Protocol):
    """Seconds on a monotonic scale. Calls read time only through this, so tests can run a call
    on simulated time: deterministic, and faster than real time."""

    def now(self) -> float: ...


class MonotonicClock:
    """The real clock."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """Simulated time for tests and offline runs: it moves only when `advance` is called."""

    def __init__(self, start: float = 0.0):
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Transcriber(Protocol):
    def transcribe(self, pcm: np.ndarray, *, prompt: str | None = None, fallback: Fallback = "doubtful") -> AsrResult: ...


class Synthesizer(Protocol):
    """Renders text sentence by sentence; raises `TtsUnavailable` when it cannot."""

    def synthesize(self, text: str) -> Iterator[TtsChunk]: ...

    def close(self) -> None: ...


class TurnResult(Protocol):
    """What a policy turn hands the call: the decision, its audit id, the question it decided on."""

    @property
    def decision(self) -> Decision: ...
    @property
    def audit_id(self) -> str: ...
    @property
    def normalized_question(self) -> str: ...
    @property
    def said(self) -> str: ...
    @property
    def evidence(self) -> list[str]: ...
    @property
    def timings_ms(self) -> dict[str, float]: ...


class PolicySession(Protocol):
    """One conversation's policy state (`policy.session.Session`), as the call loop drives it:
    a turn, a preview that records nothing, the pre-speech recheck, timings, undo of a turn the
    caller went on with, and the degrade-to-transfer when speech fails."""

    session_id: str
    pending_question: str | None
    pending_facets: list[str]  # the facets our last clarify asked for

    def turn(self, text: str, *, asr: AsrSignal | None = None, faults: Collection[str] = (),
             timings_ms: dict[str, float] | None = None) -> TurnResult: ...

    def preview(self, text: str, *, asr: AsrSignal | None = None) -> Decision: ...

    def preview_turn(self, text: str, *, asr: AsrSignal | None = None) -> TurnResult: ...

    def recheck_before_speech(self, decision: Decision, audit_id: str | None = None) -> Decision: ...

    def record_timings(self, audit_id: str, timings: dict[str, float]) -> None: ...

    def snapshot(self) -> SessionState: ...

    def restore(self, state: SessionState, *, superseded: str | None = None, reason: str = "") -> None: ...

    def degrade_to_transfer(self, decision: Decision, reason: Reason, message: str, question: str) -> Decision: ...


class CallLike(Protocol):
    """One call as the code that drives it sees it (server, replay, evaluation, mic): caller
    audio and typed turns in, `CallEvent`s out. `call.CallSession` is the real one; tests
    drive fakes that emit the real events."""

    def events(self) -> AsyncIterator[CallEvent]: ...

    async def feed_audio(self, pcm16: bytes) -> None: ...

    async def text_turn(self, text: str) -> None: ...

    async def say(self, text: str) -> None: ...

    async def end_of_input(self) -> None: ...

    async def close(self) -> None: ...


# Called after each decided turn with the conversation's state and the decision, in the call's
# worker thread, before the decision is sent on: the server checkpoints the call with it.
TurnHook = Callable[[SessionState, Decision], None]


class CallRuntime(Protocol):
    """What opens calls: `call.VoiceRuntime` (warm models shared by all calls), or a test fake."""

    def new_call(self, *, role: str = "public", facets: dict[str, str] | None = None,
                 config: CallConfig | None = None, state: SessionState | None = None,
                 on_turn: TurnHook | None = None) -> CallLike: ...
