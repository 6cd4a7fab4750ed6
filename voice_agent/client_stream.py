"""One streamed call as the client sees it: what it sends (start, 20 ms audio frames or typed
turns, stop; Twilio framing with `twilio`) and what it collects from the server's events into a
`CallResult`. `voice_agent/client.py` runs it over one connection, `client_resume.py` over several
when the connection drops mid-call."""
from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from pydantic import BaseModel, Field
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from kb.jsontypes import JsonObject
from voice_agent.audio import float_to_pcm16, mulaw_decode, mulaw_encode

__all__ = ["CallResult", "CallStream", "speech_ends", "FRAME_MS"]

FRAME_MS = 20


class CallResult(BaseModel):
    """What one streamed call saw. Times are seconds since the connection opened."""

    events: list[JsonObject] = Field(default_factory=list)  # text events, in order (no audio frames)
    decisions: list[JsonObject] = Field(default_factory=list)
    transcripts: list[str] = Field(default_factory=list)  # final transcripts
    transfers: list[JsonObject] = Field(default_factory=list)  # native handoffs / Twilio mark names
    errors: list[JsonObject] = Field(default_factory=list)
    audio_frames: int = 0
    audio_bytes: int = 0
    reply_rate: int = 0
    speech_end_s: list[float] = Field(default_factory=list)  # when each caller turn's speech ended
    first_audio_s: list[float | None] = Field(default_factory=list)  # first reply audio after each
    close_code: int | None = None  # of the last connection
    close_reason: str = ""
    busy: bool = False
    call_id: str | None = None  # native: `ready.call_id`
    urls: list[str] = Field(default_factory=list)  # every server the call was on, in order
    resumes: int = 0  # reconnections that resumed the call (`ready.resumed`)

    @property
    def latencies_ms(self) -> list[float]:
        """End of caller speech → first reply audio byte, per answered turn."""
        return [round((a - e) * 1000.0, 1) for e, a in zip(self.speech_end_s, self.first_audio_s) if a is not None]


def speech_ends(x: np.ndarray, rate: int, *, gap_ms: int = 500, floor_db: float = -40.0) -> list[int]:
    """Sample index where each caller utterance ends (energy in 20 ms frames; utterances are
    separated by at least `gap_ms` of quiet, as the server's endpointer needs)."""
    n = rate * FRAME_MS // 1000
    frames = len(x) // n
    if frames == 0:
        return []
    e = np.sqrt(np.mean(x[: frames * n].reshape(frames, n).astype(np.float64) ** 2, axis=1) + 1e-12)
    voiced = 20 * np.log10(e) > max(floor_db, 20 * np.log10(e.max() + 1e-12) - 35.0)
    ends, last, gap = [], None, gap_ms // FRAME_MS
    for i, v in enumerate(voiced):
        if v:
            if last is not None and i - last > gap:
                ends.append((last + 1) * n)
            last = i
    if last is not None:
        ends.append((last + 1) * n)
    return ends


@dataclass
class CallStream:
    """One streamed call in progress; `stream_call` drives it. The receiver and sender share
    the result being filled in, the reply-audio summary counters and the call's identifiers
    (its resume token and how far it got, for a call that reconnects)."""

    res: CallResult
    x: np.ndarray  # caller audio at the wire rate, trailing quiet included
    ends: set[int]  # sample indices where caller utterances end
    n: int  # samples per frame
    twilio: bool
    token: str | None
    caller: dict[str, str] | None
    texts: list[str] | None
    realtime: bool
    sample_rate: int
    on_event: Callable[[JsonObject], None] | None
    reply_audio: bytearray | None
    t0: float = field(default_factory=time.monotonic)
    stream_sid: str = field(default_factory=lambda: "MZ" + uuid.uuid4().hex)
    call_sid: str = field(default_factory=lambda: "CA" + uuid.uuid4().hex)
    pending_frames: list[int] = field(default_factory=lambda: [0, 0])  # frames, bytes since the last summary
    resume_token: str | None = None  # `ready.resume_token`: with res.call_id, resumes the call elsewhere
    server_turns: int = 0  # `ready.turns` of the latest connection
    next_text: int = 0  # the first typed turn not decided yet, as far as the client knows
    next_frame: int = 0  # the first audio frame not sent yet (a resumed call goes on from there)
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # this connection's `ready` came
    progress: asyncio.Event = field(default_factory=asyncio.Event)  # a turn ended (decision, turn error)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def emit(self, ev: JsonObject) -> None:
        self.res.events.append(ev)
        if self.on_event:
            self.on_event(ev)

    def note_audio(self, nbytes: int) -> None:
        res = self.res
        t = self.now()
        res.audio_frames += 1
        res.audio_bytes += nbytes
        self.pending_frames[0] += 1
        self.pending_frames[1] += nbytes
        for i, a in enumerate(res.first_audio_s):
            if a is None and t >= res.speech_end_s[i]:
                res.first_audio_s[i] = t

    def summary(self, key: str, ident: object) -> None:
        """Emit one line standing for the reply audio frames received since the last one."""
        pending = self.pending_frames
        if pending[0]:
            rate = self.res.reply_rate or 16000
            per_sample = 1 if self.twilio else 2
            self.emit({key: "audio_frames", "id": ident, "frames": pending[0], "bytes": pending[1],
                       "seconds": round(pending[1] / per_sample / rate, 3)})
            pending[0] = pending[1] = 0

    async def receive(self, ws: ClientConnection) -> None:
        async for msg in ws:
            if isinstance(msg, bytes):  # native reply audio
                self.note_audio(len(msg))
                if self.reply_audio is not None:
                    self.reply_audio.extend(msg)
                continue
            try:
                ev = json.loads(msg)
            except ValueError:
                self.emit({"type": "unparsed", "text": msg[:200]})
                continue
            if self.twilio:
                await self._on_twilio(ws, ev)
            else:
                await self._on_native(ws, ev)

    async def _on_twilio(self, ws: ClientConnection, ev: JsonObject) -> None:
        # The casts state the shape Twilio's (and our server's) messages have.
        kind = ev.get("event")
        if kind == "media":
            data = base64.b64decode(cast(str, cast(JsonObject, ev.get("media", {})).get("payload", "")))
            self.note_audio(len(data))
            if self.reply_audio is not None:
                self.reply_audio.extend(float_to_pcm16(mulaw_decode(data)))
            return
        if kind == "mark":
            mark = cast(JsonObject, ev.get("mark", {}))
            self.summary("event", mark.get("name"))
            name = str(mark.get("name", ""))
            if name.startswith("transfer:"):
                self.res.transfers.append({"mark": name, "handoff_id": name.split(":", 1)[1]})
            self.emit(ev)
            # Twilio echoes a mark once the audio before it has played.
            await ws.send(json.dumps({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}}))
            return
        if kind == "clear":
            self.summary("event", None)
        self.emit(ev)

    async def _on_native(self, ws: ClientConnection, ev: JsonObject) -> None:
        # The casts state the shape of the protocol's server events (docs/PROTOCOL.md).
        res = self.res
        kind = ev.get("type")
        if kind == "audio":
            res.reply_rate = int(cast(int, ev.get("sample_rate") or 0))
        elif kind == "audio_end":
            self.summary("type", ev.get("id"))
            await ws.send(json.dumps({"type": "played", "id": ev.get("id")}))
        elif kind == "clear":
            self.summary("type", None)
        elif kind == "ready":
            res.call_id, self.resume_token = cast(str, ev.get("call_id")), cast(str, ev.get("resume_token"))
            self.server_turns = int(cast(int, ev.get("turns") or 0))
            res.resumes += bool(ev.get("resumed"))
            self.ready.set()
        elif kind == "decision":
            res.decisions.append(cast(JsonObject, ev["decision"]))
            self.progress.set()
        elif kind == "transcript" and ev.get("final"):
            res.transcripts.append(cast(str, ev.get("text", "")))
        elif kind == "transfer":
            res.transfers.append(cast(JsonObject, ev.get("handoff") or {}))
            self.progress.set()
        elif kind == "error":
            res.errors.append(ev)
            self.progress.set()
            if ev.get("code") == "busy":
                res.busy = True
        self.emit(ev)

    def _frame_message(self, i: int, chunk: np.ndarray) -> str | bytes:
        if self.twilio:
            return json.dumps({"event": "media", "sequenceNumber": str(i + 3), "streamSid": self.stream_sid,
                               "media": {"track": "inbound", "chunk": str(i + 1),
                                         "timestamp": str(i * FRAME_MS),
                                         "payload": base64.b64encode(mulaw_encode(chunk)).decode()}})
        return float_to_pcm16(chunk)

    async def send_audio(self, ws: ClientConnection) -> None:
        x, n = self.x, self.n
        frames = len(x) // n + (1 if len(x) % n else 0)
        start_t, first = time.monotonic(), self.next_frame
        for i in range(first, frames):
            msg = self._frame_message(i, x[i * n : (i + 1) * n])
            if self.realtime:
                delay = start_t + (i - first) * FRAME_MS / 1000.0 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await ws.send(msg)
            self.next_frame = i + 1
            end = (i + 1) * n
            if any(i * n < e <= end for e in self.ends):
                self.res.speech_end_s.append(self.now())
                self.res.first_audio_s.append(None)
            if not self.realtime and i % 50 == 49:
                await asyncio.sleep(0)  # let the receiver run

    async def send_start(self, ws: ClientConnection) -> None:
        """The first message of a connection: a new call's `start`, or, once `ready` gave the call
        an id and a token, the `start` that resumes it."""
        if self.twilio:
            await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            params = dict(self.caller or {})
            if self.token:
                params["token"] = self.token
            await ws.send(json.dumps({
                "event": "start", "sequenceNumber": "1", "streamSid": self.stream_sid,
                "start": {"accountSid": "AC" + "0" * 32, "streamSid": self.stream_sid, "callSid": self.call_sid,
                          "tracks": ["inbound"], "customParameters": params,
                          "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
        else:
            start: JsonObject = {"type": "start", "protocol": 1, "sample_rate": self.sample_rate,
                                     "caller": dict(self.caller or {})}
            if self.token:
                start["token"] = self.token
            if self.res.call_id and self.resume_token:
                start["resume"] = {"call_id": self.res.call_id, "token": self.resume_token}
            await ws.send(json.dumps(start))

    async def send_stop(self, ws: ClientConnection) -> None:
        if self.twilio:
            await ws.send(json.dumps({"event": "stop", "sequenceNumber": "9999", "streamSid": self.stream_sid,
                                      "stop": {"accountSid": "AC" + "0" * 32, "callSid": self.call_sid}}))
        else:
            await ws.send(json.dumps({"type": "stop"}))

    async def conversation(self, ws: ClientConnection) -> None:
        recv_task = asyncio.create_task(self.receive(ws))
        try:
            await self.send_start(ws)
            for text in self.texts or []:
                await ws.send(json.dumps({"type": "text", "text": text}))
            if len(self.x):
                await self.send_audio(ws)
            await self.send_stop(ws)
        except ConnectionClosed:
            pass  # the server ended the call early (busy, error): the receiver has the reason
        try:
            await recv_task
        except ConnectionClosed:
            pass


