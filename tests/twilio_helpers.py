"""Test doubles for Twilio's two sides, both real network peers on loopback: `StandIn`, an HTTP
server in a thread standing for the REST API (it records every request: method, path, form body,
auth header), and `TwilioPeer`, a websocket client playing Twilio's side of a Media Stream."""
from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import numpy as np
from websockets.asyncio.client import ClientConnection

from voice_agent.audio import mulaw_encode

SID = "AC" + "0123456789abcdef" * 2
TOKEN = "test-auth-token"


@dataclass
class Recorded:
    method: str
    path: str
    form: dict[str, str]
    auth: str
    at: float  # time.monotonic() when it arrived


class StandIn:
    """The REST API's stand-in: answers every request with `status` (after `delay_s`)."""

    def __init__(self, status: int = 200, delay_s: float = 0.0):
        self.status, self.delay_s = status, delay_s
        self.requests: list[Recorded] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                form = {k: v[0] for k, v in parse_qs(body).items()}
                outer.requests.append(Recorded("POST", self.path, form, self.headers.get("Authorization", ""),
                                               time.monotonic()))
                time.sleep(outer.delay_s)
                ok = outer.status < 400
                payload = {"sid": self.path.rsplit("/", 1)[-1].removesuffix(".json"), "status": "in-progress"} if ok \
                    else {"code": 20500, "message": "stand-in failure", "status": outer.status}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(outer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout test)

            do_GET = do_POST

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "StandIn":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def updates(self, call_sid: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == f"/2010-04-01/Accounts/{SID}/Calls/{call_sid}.json"]


def basic_auth(sid: str = SID, token: str = TOKEN) -> str:
    return "Basic " + base64.b64encode(f"{sid}:{token}".encode()).decode()


def twilio_section(base_url: str, **kw: object) -> dict:
    """A `twilio:` server config section pointing at a stand-in: billing dials, tech support
    rings a SIP desk, every other team waits in the `support` queue."""
    return {"account_sid": SID, "auth_token": TOKEN, "api_base": base_url,
            "teams": {"billing": {"dial": "+15550100"}, "tech_support": {"sip": "sip:desk@example.com"}},
            "default": {"enqueue": "support"}, **kw}


@dataclass
class TwilioPeer:
    """Twilio's side of one Media Stream: `start`, caller audio as 20 ms μ-law frames, key presses,
    and marks echoed as Twilio does once the audio before them has played. With `hold_transfer`
    a transfer mark is echoed only when the test calls `play_transfer()`."""

    ws: ClientConnection
    hold_transfer: bool = False
    stream_sid: str = field(default_factory=lambda: "MZ" + uuid_hex())
    call_sid: str = field(default_factory=lambda: "CA" + uuid_hex())
    messages: list[dict] = field(default_factory=list)
    marks_at: dict[str, float] = field(default_factory=dict)  # mark name -> when it arrived
    held: list[str] = field(default_factory=list)
    _reader: asyncio.Task | None = None

    async def start(self, params: dict[str, str] | None = None) -> None:
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send({"event": "start", "sequenceNumber": "1", "streamSid": self.stream_sid,
                          "start": {"streamSid": self.stream_sid, "callSid": self.call_sid, "accountSid": SID,
                                    "tracks": ["inbound"], "customParameters": params or {},
                                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})
        self._reader = asyncio.create_task(self._read())

    async def speak(self, x8k: np.ndarray, tail_s: float = 1.2) -> None:
        """Caller audio (float, 8 kHz) and trailing quiet, as fast as the socket takes it."""
        mulaw = mulaw_encode(np.concatenate([x8k.astype(np.float32), np.zeros(int(tail_s * 8000), np.float32)]))
        for i in range(0, len(mulaw), 160):
            await self._send({"event": "media", "streamSid": self.stream_sid,
                              "media": {"track": "inbound", "payload": base64.b64encode(mulaw[i:i + 160]).decode()}})
            if i % 8000 == 0:
                await asyncio.sleep(0)

    async def press(self, digit: str) -> None:
        await self._send({"event": "dtmf", "streamSid": self.stream_sid, "dtmf": {"track": "inbound_track", "digit": digit}})

    async def play_transfer(self) -> None:
        for name in self.held:
            await self._echo(name)
        self.held.clear()

    async def stop(self) -> None:
        await self._send({"event": "stop", "streamSid": self.stream_sid, "stop": {"callSid": self.call_sid}})

    def marks(self) -> list[str]:
        return [m["mark"]["name"] for m in self.messages if m.get("event") == "mark"]

    async def wait_mark(self, prefix: str, count: int = 1, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [m for m in self.marks() if m.startswith(prefix)]
            if len(found) >= count:
                return found[count - 1]
            await asyncio.sleep(0.02)
        raise AssertionError(f"no mark {prefix}* (#{count}) within {timeout}s; marks: {self.marks()}")

    async def closed(self, timeout: float = 30.0) -> None:
        if self._reader is not None:
            await asyncio.wait_for(self._reader, timeout)

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for raw in self.ws:
                m = json.loads(raw)
                self.messages.append(m)
                if m.get("event") == "mark":
                    name = m["mark"]["name"]
                    self.marks_at[name] = time.monotonic()
                    if self.hold_transfer and name.startswith("transfer:"):
                        self.held.append(name)
                    else:
                        await self._echo(name)
        except ConnectionClosed:
            pass

    async def _echo(self, name: str) -> None:
        await self._send({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})

    async def _send(self, msg: dict) -> None:
        await self.ws.send(json.dumps(msg))


def uuid_hex() -> str:
    import uuid

    return uuid.uuid4().hex
