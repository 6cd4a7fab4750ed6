"""The native websocket protocol (`/v1/call`), version 1: one small pydantic model per event.

Text frames carry one JSON event with a `type`; binary frames carry audio (PCM16 little-endian
mono: caller audio at the `start` sample rate, reply audio at the rate its `audio` event names).
`docs/PROTOCOL.md` is generated from these models (`python3 run.py serve --print-schemas`).
"""
from __future__ import annotations

import json
from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from kb.jsontypes import JsonObject
from policy.decision import Decision

# Call events that go on the wire as they are: one class each, shared with the call layer.
from ..call.events import AudioEnd
from ..call.events import TransferEvent as Transfer

__all__ = [
    "PROTOCOL_VERSION",
    "ERROR_CODES",
    "ProtocolError",
    "Resume", "Start", "Text", "Played", "Stop", "ClientEvent",
    "Ready", "Transcript", "DecisionOut", "Audio", "AudioEnd", "Clear", "Transfer", "Error", "ServerEvent",
    "parse_client_event",
    "encode",
    "event_schemas",
]

PROTOCOL_VERSION = 1

# Every `error` event carries one of these codes. Fatal ones are followed by a close.
ERROR_CODES: dict[str, str] = {
    "bad_json": "a text frame was not a JSON object",
    "unknown_event": "a JSON event with a missing or unknown `type`",
    "bad_event": "a known event with missing or invalid fields",
    "not_started": "audio or a turn before `start`, or no `start` in time (fatal when late)",
    "already_started": "a second `start` on the same connection",
    "bad_protocol": "`start.protocol` is not a version this server speaks (fatal)",
    "bad_sample_rate": "`start.sample_rate` is not supported (fatal)",
    "bad_audio": "a binary frame that is not whole PCM16 samples",
    "frame_too_large": "a websocket message over the server's frame limit (fatal, close 1009)",
    "busy": "the server is at its concurrent-call limit (fatal, close 1013)",
    "unknown_token": "`start.token` is not configured on the server (fatal, close 1008)",
    "bad_resume": "`start.resume` names no call with that token in the store, a call handed to a person, or one "
                  "another server resumed first (fatal, close 1008)",
    "rate_limited": "this address is over a per-address limit: connection rate or wrong-token backoff (fatal, "
                    "close 1008)",
    "session_too_long": "the call exceeded the server's session limit (fatal)",
    "idle_timeout": "the client sent nothing (no audio, no event) for the server's idle limit (fatal)",
    "turn_too_long": "a caller turn exceeded the turn limit; it was cut or ignored",
    "too_many_errors": "too many protocol errors on one connection (fatal)",
    "internal": "the server failed; the call ends",
    "turn_failed": "the voice pipeline failed on one turn; the call goes on",
    "tts_unavailable": "text to speech failed twice on a turn (the turn became a transfer)",
    "call_failed": "another voice pipeline failure",
}
ErrorCode = Literal[
    "bad_json", "unknown_event", "bad_event", "not_started", "already_started", "bad_protocol",
    "bad_sample_rate", "bad_audio", "frame_too_large", "busy", "unknown_token", "bad_resume", "rate_limited",
    "session_too_long", "turn_too_long", "too_many_errors", "internal", "idle_timeout",
    "turn_failed", "tts_unavailable", "call_failed",
]


class ProtocolError(Exception):
    """A client message the server cannot use; becomes an `error` event with `code`."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# ------------------------------------------------------------------------- client → server


class Resume(BaseModel):
    """The call a reconnecting client goes on with: `ready.call_id` and `ready.resume_token`."""

    model_config = {"extra": "forbid"}
    call_id: str = Field(min_length=1, max_length=64)
    token: str = Field(min_length=1, max_length=256)


class Start(BaseModel):
    """First event of a call: protocol version, caller audio format, credentials, caller facets."""

    model_config = {"extra": "forbid"}
    type: Literal["start"] = "start"
    protocol: int = PROTOCOL_VERSION
    sample_rate: int = Field(16000, description="rate of the caller's binary PCM16 frames")
    output_sample_rate: int | None = Field(None, description="rate for reply audio (default: sample_rate)")
    token: str | None = Field(None, description="maps to the caller's role server-side; none = public")
    caller: dict[str, str] = Field(default_factory=dict, description="known caller facets, e.g. customer_type")
    resume: Resume | None = Field(None, description="go on with a call whose connection was lost, on any server "
                                                    "sharing its store; `token` and `caller` are then ignored")


class Text(BaseModel):
    """A typed caller turn (no audio)."""

    model_config = {"extra": "forbid"}
    type: Literal["text"] = "text"
    text: str


class Played(BaseModel):
    """The client finished playing reply audio `id`."""

    model_config = {"extra": "forbid"}
    type: Literal["played"] = "played"
    id: str | int


class Stop(BaseModel):
    """The caller hung up: the server finishes the turn in flight, sends its events, closes."""

    model_config = {"extra": "forbid"}
    type: Literal["stop"] = "stop"


ClientEvent = Annotated[Union[Start, Text, Played, Stop], Field(discriminator="type")]
_CLIENT = TypeAdapter(ClientEvent)
_CLIENT_TYPES = {"start", "text", "played", "stop"}


# ------------------------------------------------------------------------- server → client


class Ready(BaseModel):
    """The call is open; `session` names this connection in server logs, `call_id` the call (its
    audit records' `session`) across reconnections."""

    type: Literal["ready"] = "ready"
    session: str
    call_id: str
    resume_token: str = Field(description="with `call_id`, resumes this call after a lost connection; the same "
                                          "for the whole call; the server keeps only its hash")
    resumed: bool = Field(False, description="the call goes on from its checkpoint (start.resume)")
    turns: int = Field(0, description="turns the call has decided so far")
    protocol: int = PROTOCOL_VERSION
    role: str = "public"
    sample_rate: int = Field(16000, description="caller audio rate the server expects")
    output_sample_rate: int = Field(16000, description="rate of reply audio")


class Transcript(BaseModel):
    type: Literal["transcript"] = "transcript"
    final: bool
    text: str


class DecisionOut(BaseModel):
    """What the turn decided (CONTRACT §2); `decision.message` is what is spoken."""

    type: Literal["decision"] = "decision"
    decision: Decision


class Audio(BaseModel):
    """Reply audio `id` begins: binary PCM16 frames follow until `audio_end`."""

    type: Literal["audio"] = "audio"
    id: str | int
    sample_rate: int
    encoding: Literal["pcm16"] = "pcm16"


class Clear(BaseModel):
    """The caller barged in: drop any reply audio not yet played."""

    type: Literal["clear"] = "clear"


class Error(BaseModel):
    type: Literal["error"] = "error"
    code: ErrorCode
    message: str


ServerEvent = Annotated[
    Union[Ready, Transcript, DecisionOut, Audio, AudioEnd, Clear, Transfer, Error], Field(discriminator="type")
]


# ---------------------------------------------------------------------------- codec


def json_object(raw: str | bytes, what: str = "text frame") -> JsonObject:
    """A text frame as a JSON object, or `ProtocolError("bad_json")`: never a traceback, however
    deep or broken the JSON (both endpoints parse their frames through this)."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise ProtocolError("bad_json", f"{what} is not JSON ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise ProtocolError("bad_json", f"expected a JSON object, got {type(data).__name__}")
    return data


def parse_client_event(raw: str | bytes) -> Start | Text | Played | Stop:
    """One client text frame → its event model, or `ProtocolError` with a specific code."""
    data = json_object(raw)
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in _CLIENT_TYPES:
        raise ProtocolError("unknown_event", f"unknown event type {kind!r}; expected one of {sorted(_CLIENT_TYPES)}")
    try:
        return _CLIENT.validate_python(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"][1:]) or kind
        raise ProtocolError("bad_event", f"{kind}: {where}: {first['msg']}") from None


def encode(event: BaseModel) -> str:
    """A server event as one JSON text frame (a Decision without its internal debug field)."""
    if isinstance(event, DecisionOut):
        return json.dumps({"type": "decision", "decision": event.decision.public_dict()}, ensure_ascii=False)
    return event.model_dump_json()


def event_schemas() -> dict[str, JsonObject]:
    """JSON Schema of every event, keyed `client.<type>` / `server.<type>`."""
    out: dict[str, JsonObject] = {}
    for side, models in (("client", (Start, Text, Played, Stop)),
                         ("server", (Ready, Transcript, DecisionOut, Audio, AudioEnd, Clear, Transfer, Error))):
        for m in models:
            kind = m.model_fields["type"].default
            out[f"{side}.{kind}"] = m.model_json_schema()
    return out
