"""`run.py client`: stream a WAV file to a running server, the way a phone line would.

Native (`/v1/call`): `start`, then 20 ms PCM16 binary frames, then `stop`. Twilio (`--twilio`,
`/twilio`): `connected`, `start` (streamSid/callSid/mediaFormat), 20 ms base64 μ-law 8 kHz
`media` frames, `stop`; marks the server sends are echoed back, as Twilio does once the audio
before them has played. Prints every server event as one JSON line (reply audio frames are
summarized) and can save the reply audio. `stream_call()` is the same thing as a library call,
used by `bench load` and the tests.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
from pydantic import BaseModel, Field
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from kb.jsontypes import JsonObject
from voice_agent.audio import AudioError, float_to_pcm16, mulaw_decode, mulaw_encode, resample, write_wav
from voice_agent.audio_files import read_audio

__all__ = ["CallResult", "stream_call", "speech_ends", "cli"]

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
    close_code: int | None = None
    close_reason: str = ""
    busy: bool = False

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
class _Call:
    """One streamed call in progress; `stream_call` drives it. The receiver and sender share
    the result being filled in, the reply-audio summary counters and the call's identifiers."""

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
        elif kind == "decision":
            res.decisions.append(cast(JsonObject, ev["decision"]))
        elif kind == "transcript" and ev.get("final"):
            res.transcripts.append(cast(str, ev.get("text", "")))
        elif kind == "transfer":
            res.transfers.append(cast(JsonObject, ev.get("handoff") or {}))
        elif kind == "error":
            res.errors.append(ev)
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
        start_t = time.monotonic()
        for i in range(frames):
            msg = self._frame_message(i, x[i * n : (i + 1) * n])
            if self.realtime:
                delay = start_t + i * FRAME_MS / 1000.0 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await ws.send(msg)
            end = (i + 1) * n
            if any(i * n < e <= end for e in self.ends):
                self.res.speech_end_s.append(self.now())
                self.res.first_audio_s.append(None)
            if not self.realtime and i % 50 == 49:
                await asyncio.sleep(0)  # let the receiver run

    async def _send_start(self, ws: ClientConnection) -> None:
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
            await ws.send(json.dumps(start))

    async def _send_stop(self, ws: ClientConnection) -> None:
        if self.twilio:
            await ws.send(json.dumps({"event": "stop", "sequenceNumber": "9999", "streamSid": self.stream_sid,
                                      "stop": {"accountSid": "AC" + "0" * 32, "callSid": self.call_sid}}))
        else:
            await ws.send(json.dumps({"type": "stop"}))

    async def conversation(self, ws: ClientConnection) -> None:
        recv_task = asyncio.create_task(self.receive(ws))
        try:
            await self._send_start(ws)
            for text in self.texts or []:
                await ws.send(json.dumps({"type": "text", "text": text}))
            if len(self.x):
                await self.send_audio(ws)
            await self._send_stop(ws)
        except ConnectionClosed:
            pass  # the server ended the call early (busy, error): the receiver has the reason
        try:
            await recv_task
        except ConnectionClosed:
            pass


async def stream_call(
    url: str,
    audio: np.ndarray | None = None,
    audio_rate: int = 16000,
    *,
    twilio: bool = False,
    token: str | None = None,
    caller: dict[str, str] | None = None,
    texts: list[str] | None = None,
    realtime: bool = True,
    sample_rate: int = 16000,
    tail_silence_s: float = 1.0,
    on_event: Callable[[JsonObject], None] | None = None,
    reply_audio: bytearray | None = None,
    timeout_s: float = 120.0,
) -> CallResult:
    """Run one call against `url`; returns when the server closes the connection."""
    wire_rate = 8000 if twilio else sample_rate
    x = np.zeros(0, dtype=np.float32) if audio is None else resample(np.asarray(audio, np.float32), audio_rate, wire_rate)
    ends = set(speech_ends(x, wire_rate)) if len(x) else set()
    if len(x) and tail_silence_s > 0:  # the server's endpointer needs trailing quiet to end the turn
        x = np.concatenate([x, np.zeros(int(tail_silence_s * wire_rate), np.float32)])
    call = _Call(CallResult(reply_rate=8000 if twilio else 0), x, ends, wire_rate * FRAME_MS // 1000, twilio=twilio,
                 token=token, caller=caller, texts=texts, realtime=realtime, sample_rate=sample_rate,
                 on_event=on_event, reply_audio=reply_audio)
    res = call.res
    async with connect(url, max_size=2**22, compression=None, open_timeout=10, close_timeout=5) as ws:
        try:
            await asyncio.wait_for(call.conversation(ws), timeout_s)
        finally:
            res.close_code = ws.close_code
            res.close_reason = ws.close_reason or ""
    if res.close_code == 1013 or res.close_reason == "busy":
        res.busy = True
    return res


# ----------------------------------------------------------------------------------- CLI


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run.py client", description="Stream a WAV file to a running voice agent server.")
    ap.add_argument("wav", nargs="?", help="caller audio (any WAV; resampled as needed)")
    ap.add_argument("--url", default="ws://127.0.0.1:8765/v1/call")
    ap.add_argument("--twilio", action="store_true", help="speak Twilio Media Streams framing (use the /twilio URL)")
    ap.add_argument("--token", help="credential mapping to a caller role on the server")
    ap.add_argument("--caller", nargs="+", action="extend", default=[], metavar="K=V", help="caller facets")
    ap.add_argument("--text", action="append", default=[], help="send a typed turn (native only); repeatable")
    ap.add_argument("--out", help="write the reply audio to this WAV")
    ap.add_argument("--rate", type=int, default=16000, help="native: sample rate of the frames sent (default 16000)")
    pace = ap.add_mutually_exclusive_group()
    pace.add_argument("--realtime", dest="realtime", action="store_true", default=True, help="20 ms frames in real time (default)")
    pace.add_argument("--fast", dest="realtime", action="store_false", help="send as fast as possible")
    ap.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    args = ap.parse_args(argv)
    # `--caller a=b call.wav`: the WAV may have been swallowed by --caller's nargs.
    facets = []
    for item in args.caller:
        if "=" not in item and args.wav is None:
            args.wav = item
        else:
            facets.append(item)
    args.caller = facets
    return args


def _report(res: CallResult, reply: bytearray, out: str | None) -> int:
    """Save the reply audio if asked, print the call summary; the exit code says whether the
    call ended normally."""
    if out and reply:
        pcm = np.frombuffer(bytes(reply[: len(reply) - len(reply) % 2]), dtype="<i2")
        try:
            write_wav(out, pcm, res.reply_rate or 16000)
        except AudioError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(json.dumps({"type": "reply_saved", "path": str(Path(out)), "seconds": round(len(pcm) / (res.reply_rate or 16000), 2)}))
    lat = res.latencies_ms
    print(json.dumps({"type": "call_summary", "close_code": res.close_code, "decisions": len(res.decisions),
                      "errors": [e.get("code") for e in res.errors], "latency_ms": lat}), flush=True)
    if res.busy:
        print("error: server busy (at its concurrent-call limit); try again later", file=sys.stderr)
        return 1
    if res.close_code not in (1000, 1001, None):
        print(f"error: server closed the call with {res.close_code} {res.close_reason}".rstrip(), file=sys.stderr)
        return 1
    return 0


def cli(argv: list[str]) -> int:
    args = _parse(argv)
    caller: dict[str, str] = {}
    for item in args.caller:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            print(f"error: --caller {item!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        caller[k.strip()] = v.strip()
    if not args.wav and not args.text:
        print("error: give a WAV file to stream (or --text for a typed turn)", file=sys.stderr)
        return 2
    if args.url.split("?", 1)[0].rstrip("/").endswith("/twilio"):
        args.twilio = True  # the /twilio endpoint only speaks Twilio's framing
    if args.twilio and args.text:
        print("error: --text needs the native protocol; Twilio streams carry audio only", file=sys.stderr)
        return 2
    if not args.url.startswith(("ws://", "wss://")):
        print(f"error: --url {args.url}: expected ws://HOST:PORT/v1/call or .../twilio", file=sys.stderr)
        return 2
    audio, rate = None, 16000
    if args.wav:
        try:
            audio, rate = read_audio(args.wav)
        except AudioError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    reply = bytearray()

    def show(ev: JsonObject) -> None:
        print(json.dumps(ev, ensure_ascii=False), flush=True)

    try:
        res = asyncio.run(stream_call(
            args.url, audio, rate, twilio=args.twilio, token=args.token, caller=caller, texts=args.text,
            realtime=args.realtime, sample_rate=args.rate, on_event=show, reply_audio=reply, timeout_s=args.timeout,
        ))
    except (OSError, asyncio.TimeoutError) as e:
        print(f"error: cannot complete the call at {args.url}: {e or type(e).__name__}", file=sys.stderr)
        return 1
    except Exception as e:  # handshake refused (404, 426...), bad URL
        print(f"error: {args.url}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return _report(res, reply, args.out)
