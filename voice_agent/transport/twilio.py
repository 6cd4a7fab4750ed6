"""Twilio Media Streams at `/twilio`: the wire format Twilio documents, and its call handler.

Inbound (Twilio → us): `connected`, `start` (streamSid, callSid, mediaFormat, customParameters),
`media` (base64 μ-law 8 kHz mono), `mark` (echoed when the audio before it has played),
`dtmf`, `stop`. Outbound (us → Twilio): `media`, `mark`, `clear`; nothing else, since Twilio
rejects messages it does not know. So decisions and transcripts go to the server log only, and
a transfer is a `mark` named `transfer:<handoff id>` sent after the spoken message's media (the
package is already stored: the engine writes it before the decision exists). When that mark
has played, `twilio_transfer.PhoneTransfer` moves the live call to the team's person through
the REST API (the server config's `twilio:` section). Key 0 on the keypad asks for a person.

Caller identity comes from the TwiML `<Parameter>`s of `<Stream>`: `token` (→ role, as on the
native endpoint) and any other parameter as a caller facet (e.g. `customer_type`).
"""
from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError
from websockets.asyncio.server import ServerConnection
from websockets.typing import Data

from kb.jsontypes import JsonObject
from policy.decision import Handoff
from voice_agent.call import CallEvent

from ..audio import mulaw_decode
from .config import ServerConfig
from .connection import Connection, OnMessage, feed_with_turn_limit, recv_before_start, serve_connection
from .driver import AudioGate, CallDriver
from .protocol import ProtocolError, json_object
from .state import Fatal, ServerState, log_event
from .twilio_transfer import PhoneTransfer

__all__ = [
    "MediaFormat", "StartInfo", "TwilioStart", "TwilioMedia", "TwilioMark", "TwilioDtmf", "TwilioStop",
    "TwilioConnected", "parse_twilio", "media_message", "mark_message", "clear_message",
    "FRAME_BYTES", "DTMF_HUMAN_KEY", "DTMF_HUMAN_REQUEST", "handle_twilio",
]

FRAME_BYTES = 160  # 20 ms of μ-law at 8 kHz: the frame size Twilio itself sends
# Key 0 is a typed turn in words the policy's human-request patterns read (policy/default_policy.yaml),
# so it is decided, recorded and transferred (with its package) like a spoken request.
DTMF_HUMAN_KEY, DTMF_HUMAN_REQUEST = "0", "I want to talk to a person"
CountError = Callable[[ProtocolError], None]  # logs a protocol error; raises Fatal past the limit


class TwilioConnected(BaseModel):
    event: Literal["connected"]
    protocol: str = "Call"
    version: str = "1.0.0"


class MediaFormat(BaseModel):
    encoding: str = "audio/x-mulaw"
    sampleRate: int = 8000
    channels: int = 1


class StartInfo(BaseModel):
    streamSid: str = ""
    accountSid: str = ""
    callSid: str = ""
    tracks: list[str] = Field(default_factory=lambda: ["inbound"])
    mediaFormat: MediaFormat = Field(default_factory=MediaFormat)
    customParameters: JsonObject = Field(default_factory=dict)


class TwilioStart(BaseModel):
    event: Literal["start"]
    sequenceNumber: str | int | None = None
    streamSid: str = ""
    start: StartInfo


class MediaInfo(BaseModel):
    track: str = "inbound"
    chunk: str | int | None = None
    timestamp: str | int | None = None
    payload: str


class TwilioMedia(BaseModel):
    event: Literal["media"]
    sequenceNumber: str | int | None = None
    streamSid: str = ""
    media: MediaInfo


class MarkInfo(BaseModel):
    name: str


class TwilioMark(BaseModel):
    event: Literal["mark"]
    sequenceNumber: str | int | None = None
    streamSid: str = ""
    mark: MarkInfo


class DtmfInfo(BaseModel):
    track: str = "inbound_track"
    digit: str = Field(max_length=8)  # one key press; a longer string is not DTMF and is not logged


class TwilioDtmf(BaseModel):
    event: Literal["dtmf"]
    sequenceNumber: str | int | None = None
    streamSid: str = ""
    dtmf: DtmfInfo


class TwilioStop(BaseModel):
    event: Literal["stop"]
    sequenceNumber: str | int | None = None
    streamSid: str = ""
    stop: JsonObject = Field(default_factory=dict)


_INBOUND: dict[str, type[BaseModel]] = {
    "connected": TwilioConnected, "start": TwilioStart, "media": TwilioMedia,
    "mark": TwilioMark, "dtmf": TwilioDtmf, "stop": TwilioStop,
}


def parse_twilio(raw: str | bytes) -> BaseModel:
    """One Twilio text frame → its model, or `ProtocolError` (bad_json / unknown_event / bad_event)."""
    data = json_object(raw, "Twilio frame")
    kind = data.get("event")
    model = _INBOUND.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ProtocolError("unknown_event", f"unknown Twilio event {kind!r}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        raise ProtocolError("bad_event", f"{kind}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def media_message(stream_sid: str, mulaw: bytes) -> str:
    return json.dumps({"event": "media", "streamSid": stream_sid,
                       "media": {"payload": base64.b64encode(mulaw).decode("ascii")}})


def mark_message(stream_sid: str, name: str) -> str:
    return json.dumps({"event": "mark", "streamSid": stream_sid, "mark": {"name": name}})


def clear_message(stream_sid: str) -> str:
    return json.dumps({"event": "clear", "streamSid": stream_sid})


class TwilioWire:
    """CallEvents → Twilio outbound messages. Reply audio is μ-law 8 kHz in 20 ms frames, each
    reply closed by a mark named `reply:<id>`; a transfer mark follows the reply's media."""

    def __init__(self, ws: ServerConnection, stream_sid: str, transfer: PhoneTransfer):
        self.ws = ws
        self.sid = stream_sid
        self.transfer = transfer
        self.gate = AudioGate(self._transfer)
        self._rest = b""  # μ-law bytes short of a whole frame

    async def _transfer(self, handoff: Handoff) -> None:
        """After the spoken message: the mark, then the hand-over (which waits for its echo)."""
        await self.ws.send(mark_message(self.sid, f"transfer:{handoff.id}"))
        self.transfer.begin(handoff)

    async def emit(self, ev: CallEvent) -> None:
        if ev.type == "audio_start":
            self.gate.started(ev.id)
            self._rest = b""
        elif ev.type == "audio_chunk":
            await self._media(bytes(ev.data))
        elif ev.type == "audio_end":
            if self._rest:
                await self.ws.send(media_message(self.sid, self._rest))
                self._rest = b""
            await self.ws.send(mark_message(self.sid, f"reply:{ev.id}"))
            await self.gate.ended(ev.id)
        elif ev.type == "clear":
            self._rest = b""
            await self.ws.send(clear_message(self.sid))
            await self.gate.cleared()
        elif ev.type == "transfer":
            await self.gate.transfer(ev.handoff)
        # transcripts, decisions and errors: Twilio has no message for them; the driver logs them

    async def _media(self, data: bytes) -> None:
        buf = self._rest + data
        whole = len(buf) - len(buf) % FRAME_BYTES
        for i in range(0, whole, FRAME_BYTES):
            await self.ws.send(media_message(self.sid, buf[i : i + FRAME_BYTES]))
        self._rest = buf[whole:]


async def handle_twilio(ws: ServerConnection, state: ServerState) -> None:
    """One Twilio media stream = one call. Errors Twilio has no message for go to the log and end
    in a close whose reason is the error code (busy → 1013, unknown_token → 1008)."""
    errors = 0
    session = ""

    async def report(code: str, message: str) -> None:
        log_event("twilio_error", session=session, code=code, message=message)

    def count_error(e: ProtocolError) -> None:
        nonlocal errors
        errors += 1
        log_event("twilio_error", session=session, code=e.code, message=e.message)
        if errors >= state.config.max_protocol_errors:
            raise Fatal("too_many_errors", f"{errors} protocol errors on this stream", 1008)

    async def open_call(conn: Connection) -> OnMessage:
        nonlocal session
        session = conn.session
        start = await _await_twilio_start(ws, state, count_error)
        driver, transfer = _new_driver(ws, state, conn, start)
        conn.driver = driver
        driver.start()
        return _message_handler(driver, transfer, state.config, count_error)

    await serve_connection(ws, state, "twilio", report, open_call)


def _new_driver(ws: ServerConnection, state: ServerState, conn: Connection,
                start: TwilioStart) -> tuple[CallDriver, PhoneTransfer]:
    cfg, info = state.config, start.start
    params = {str(k): str(v) for k, v in info.customParameters.items()}
    role = cfg.role_for(params.pop("token", None))
    if role is None:
        raise Fatal("unknown_token", "the token parameter is not configured on this server", 1008)
    fmt = info.mediaFormat
    if fmt.encoding.lower() != "audio/x-mulaw" or fmt.sampleRate != 8000 or fmt.channels != 1:
        raise Fatal("bad_sample_rate", f"media format {fmt.encoding} {fmt.sampleRate} Hz x{fmt.channels} is not "
                    "supported; Twilio streams audio/x-mulaw 8000 Hz mono")
    sid = start.streamSid or info.streamSid
    call = state.runtime.new_call(role=role, facets=params,
                                  config=state.call_config(input_rate=8000, output_rate=8000, output_encoding="mulaw"))
    transfer = PhoneTransfer(cfg.twilio, info.callSid, conn.session, call.say, state.audit,
                             lambda outcome: state.metrics.redirects.labels(outcome).inc())
    driver = CallDriver(call, TwilioWire(ws, sid, transfer).emit, conn.session, "twilio", state.metrics)
    driver.side.append(transfer)
    driver.end_silence_ms = cfg.end_silence_ms
    log_event("call_start", session=conn.session, endpoint="twilio", role=role, facets=sorted(params),
              stream_sid=sid, call_sid=info.callSid, active=state.active)
    return driver, transfer


def _message_handler(driver: CallDriver, transfer: PhoneTransfer, cfg: ServerConfig,
                     count_error: CountError) -> OnMessage:
    turn_limit_bytes = int(cfg.max_turn_s * 8000 * 2)

    async def report_cut(code: str, message: str) -> None:
        pass  # Twilio has no message for it; the feed already logs `turn_too_long`

    async def on_message(msg: Data) -> str | None:
        try:
            ev = _parse_frame(msg, cfg)
            if isinstance(ev, TwilioMedia):
                if ev.media.track in ("inbound", "inbound_track"):
                    await feed_with_turn_limit(driver, _pcm_of(ev), 8000, turn_limit_bytes, report_cut)
            elif isinstance(ev, TwilioMark):
                transfer.mark_played(ev.mark.name)  # playback reached it; only a transfer waits on it
            elif isinstance(ev, TwilioStop):
                transfer.stream_stopped()  # the call has ended (or already moved): never redirect it now
                return "stop"
            elif isinstance(ev, TwilioDtmf):
                human = ev.dtmf.digit == DTMF_HUMAN_KEY and not driver.transferred
                log_event("dtmf", session=driver.session, digit=ev.dtmf.digit, human_request=human)
                if human:
                    driver.submit_text(DTMF_HUMAN_REQUEST)
            elif isinstance(ev, TwilioStart):
                raise ProtocolError("already_started", "a second start on this stream")
            return None
        except ProtocolError as e:
            count_error(e)
            return None

    return on_message


def _parse_frame(msg: Data, cfg: ServerConfig) -> BaseModel:
    if isinstance(msg, (bytes, bytearray, memoryview)):
        raise ProtocolError("bad_event", "Twilio sends text frames only")
    size = len(msg.encode("utf-8", "surrogatepass"))  # the limit is in bytes, as on the native endpoint
    if size > cfg.max_frame_bytes:
        raise Fatal("frame_too_large", f"message of {size} bytes; the limit is {cfg.max_frame_bytes}", 1009)
    return parse_twilio(msg)


def _pcm_of(ev: TwilioMedia) -> bytes:
    try:
        mulaw = base64.b64decode(ev.media.payload, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError("bad_audio", "media.payload is not base64") from None
    return (np.clip(mulaw_decode(mulaw), -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


async def _await_twilio_start(ws: ServerConnection, state: ServerState, count_error: CountError) -> TwilioStart:
    """Skip `connected`; anything else before `start` is a (counted) protocol error."""
    cfg = state.config
    deadline = time.monotonic() + cfg.start_timeout_s
    while True:
        msg = await recv_before_start(ws, state, deadline)
        try:
            if isinstance(msg, (bytes, bytearray, memoryview)):
                raise ProtocolError("not_started", "binary frame before start")
            ev = _parse_frame(msg, cfg)
            if isinstance(ev, TwilioStart):
                return ev
            if not isinstance(ev, TwilioConnected):
                raise ProtocolError("not_started", f"{ev.event} before start")  # type: ignore[attr-defined]
        except ProtocolError as e:
            count_error(e)
