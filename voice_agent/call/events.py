"""The events a call emits, in order: the only call-event types. The server frames them for its
wire, replay and evaluation read them directly; each carries its kind in `type`."""
from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, Field

from policy.decision import Decision, Handoff


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
    said: str = ""  # the turn as the policy read it: fillers dropped, numbers and misheard KB words repaired


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
    """Reply audio `id` is complete (also a native-protocol event)."""

    type: Literal["audio_end"] = "audio_end"
    id: str


class ClearEvent(BaseModel):
    type: Literal["clear"] = "clear"
    id: str | None = None  # the reply that was cut off


class TransferEvent(BaseModel):
    """The call goes to a human; the handoff package is already stored (also a native-protocol
    event, sent once the spoken message's audio has ended)."""

    type: Literal["transfer"] = "transfer"
    handoff: Handoff


class ErrorEvent(BaseModel):
    type: Literal["error"] = "error"
    code: str
    message: str


CallEvent = Union[TranscriptEvent, DecisionEvent, AudioStart, AudioChunk, AudioEnd, ClearEvent, TransferEvent,
                  ErrorEvent]
