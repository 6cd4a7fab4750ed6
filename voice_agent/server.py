"""`run.py serve`: the websocket server. Native protocol at `/v1/call`, Twilio Media Streams at
`/twilio`, the browser page at `/`, a health probe at `/healthz` (CONTRACT §5, docs/PROTOCOL.md).

One conversation per connection. The endpoint-independent parts live here: admission against
the concurrent-call limit, the per-connection supervisor (session deadline, graceful shutdown,
abrupt disconnects) and `CallDriver`, which forwards a `CallSession`'s events to the wire and
knows when a call has nothing left in flight. `voice_agent.twilio` holds the Twilio framing.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from voice_agent.protocol import (
    PROTOCOL_VERSION,
    Audio,
    AudioEnd,
    Clear,
    DecisionOut,
    Error,
    Played,
    ProtocolError,
    Ready,
    Start,
    Stop,
    Text,
    Transcript,
    Transfer,
    encode,
    event_schemas,
    parse_client_event,
)
from voice_agent.server_config import ServerConfig, ServerConfigError, load_server_config
from kb.loader import kb_dir_error
from policy.cli import fail

LOG = logging.getLogger("voice_agent.server")
WEB_DIR = Path(__file__).parent / "web"
WEB_FILES = {  # path -> (file, content type); no build step, no CDN
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/pcm-worklet.js": ("pcm-worklet.js", "text/javascript; charset=utf-8"),
}
WS_PATHS = ("/v1/call", "/twilio")

# websockets closes with 1009 on its own above this; between max_frame_bytes and this we answer
# `frame_too_large` first so the client learns why.
HARD_FRAME_FACTOR = 4


class Fatal(Exception):
    """Ends a connection: an `error` event with `code`, then a close with `close_code`."""

    def __init__(self, code: str, message: str, close_code: int = 1008):
        super().__init__(message)
        self.code, self.message, self.close_code = code, message, close_code


def log_event(event: str, **fields: Any) -> None:
    """One JSON line per server event on stderr: easy to grep, easy to ship."""
    LOG.info(json.dumps({"event": event, **fields}, ensure_ascii=False, default=str))


# --------------------------------------------------------------------------- server state


class ServerState:
    """Process-wide: config, warm runtime, the call counter and the shutdown flag."""

    def __init__(self, runtime: Any, config: ServerConfig, *, asr_model: str = "tiny.en",
                 make_call_config: Callable[..., Any] | None = None):
        self.runtime = runtime
        self.config = config
        self.asr_model = asr_model
        self.make_call_config = make_call_config or _default_call_config
        self.active = 0
        self.shutting_down = asyncio.Event()
        self.started = time.monotonic()
        self.calls_total = 0
        self.busy_total = 0

    def admit(self) -> bool:
        """Take a call slot; False past `max_calls` or while shutting down."""
        if self.active >= self.config.max_calls or self.shutting_down.is_set():
            self.busy_total += 1
            return False
        self.active += 1
        self.calls_total += 1
        return True

    def release(self) -> None:
        self.active = max(0, self.active - 1)

    def call_config(self, *, input_rate: int, output_rate: int, output_encoding: str) -> Any:
        return self.make_call_config(
            end_silence_ms=self.config.end_silence_ms, max_turn_s=self.config.max_turn_s,
            asr_model=self.asr_model, input_rate=input_rate, output_rate=output_rate,
            output_encoding=output_encoding,
        )


def _default_call_config(**kw: Any) -> Any:
    from voice_agent.call import CallConfig

    return CallConfig(**kw)


# ---------------------------------------------------------------------------- call driver


def event_kind(ev: Any) -> str:
    """A CallEvent's kind by class name, so the driver does not depend on its `type` strings."""
    return {
        "TranscriptEvent": "transcript", "DecisionEvent": "decision", "AudioStart": "audio_start",
        "AudioChunk": "audio_chunk", "AudioEnd": "audio_end", "ClearEvent": "clear",
        "TransferEvent": "transfer", "ErrorEvent": "error",
    }.get(type(ev).__name__, str(getattr(ev, "type", "unknown")))


class CallDriver:
    """Runs one CallSession: forwards its events through `emit` (endpoint framing) and tracks
    what is in flight, so a stop or a shutdown can let the current turn finish first."""

    QUIET_S = 0.4  # no event for this long and nothing open = the call is idle
    PENDING_SPEECH_S = 1.5  # the same, when caller speech has not been transcribed yet

    def __init__(self, call: Any, emit: Callable[[str, Any], Awaitable[None]], session: str, endpoint: str):
        self.call = call
        self.emit = emit
        self.session = session
        self.endpoint = endpoint
        self.audio_open: set[Any] = set()
        self.turns_pending = 0  # typed or transcribed turns still waiting for their decision
        self.transfer_pending = False  # a transfer decision whose package is not sent yet
        self.last_event = time.monotonic()
        self.decisions = 0
        self.wire_closed = False
        self.turn_audio_s = 0.0  # caller speech with no endpointing pause (turn_too_long report)
        self.quiet_s = 0.0
        self.end_silence_ms = 500
        self.speech_pending = False  # caller speech not transcribed yet
        self._task: asyncio.Task | None = None
        self._text_tasks: set[asyncio.Task] = set()
        self._text_lock = asyncio.Lock()

    def start(self) -> None:
        self._task = asyncio.create_task(self._pump(), name=f"call-pump-{self.session}")

    async def _pump(self) -> None:
        try:
            async for ev in self.call.events():
                self.last_event = time.monotonic()
                kind = event_kind(ev)
                if kind == "audio_start":
                    self.audio_open.add(ev.id)
                elif kind == "audio_end":
                    self.audio_open.discard(ev.id)
                elif kind == "clear":
                    self.audio_open.clear()
                elif kind == "transcript" and ev.final:
                    self.turns_pending = max(self.turns_pending, 1)
                    self.speech_pending = False
                    log_event("transcript", session=self.session, endpoint=self.endpoint, text=ev.text)
                elif kind == "decision":
                    self.turns_pending = max(0, self.turns_pending - 1)
                    self.speech_pending = False
                    self.decisions += 1
                    d = ev.decision
                    self.transfer_pending = getattr(d.action, "value", d.action) == "transfer" and d.handoff is not None
                    log_event("decision", session=self.session, endpoint=self.endpoint,
                              action=getattr(d.action, "value", d.action),
                              reasons=[getattr(r, "value", r) for r in d.reasons],
                              citations=[c.doc_id for c in d.citations], kb_version=d.kb_version,
                              handoff=d.handoff.id if d.handoff else None,
                              timings_ms={k: round(v, 1) for k, v in (getattr(ev, "timings_ms", None) or {}).items()})
                elif kind == "transfer":
                    self.transfer_pending = False
                elif kind == "error":
                    log_event("call_error", session=self.session, code=ev.code, message=ev.message)
                if self.wire_closed:
                    continue  # keep draining so the call's queue never blocks its worker
                try:
                    await self.emit(kind, ev)
                except Exception as e:  # the socket went away mid-send: stop writing, keep draining
                    if not _is_closed_error(e):
                        LOG.exception("emit failed (session %s)", self.session)
                    self.wire_closed = True
        except asyncio.CancelledError:
            raise
        except Exception:
            LOG.exception("call pump failed (session %s)", self.session)

    def submit_text(self, text: str) -> None:
        """Start a typed turn without blocking the reader (audio and `stop` keep flowing)."""
        self.turns_pending += 1
        self.last_event = time.monotonic()
        task = asyncio.create_task(self._text_turn(text))
        self._text_tasks.add(task)
        task.add_done_callback(self._text_tasks.discard)

    async def _text_turn(self, text: str) -> None:
        async with self._text_lock:  # typed turns are answered in the order they were sent
            try:
                await self.call.text_turn(text)
            except Exception:
                LOG.exception("text turn failed (session %s)", self.session)
                self.turns_pending = max(0, self.turns_pending - 1)

    def busy(self) -> bool:
        return bool(self.audio_open) or self.turns_pending > 0 or self.transfer_pending

    async def drain(self, timeout: float) -> bool:
        """Finish what is in flight: flush the endpointer, wait for the last turn's decision,
        audio and transfer. True when idle, False on timeout."""
        deadline = time.monotonic() + timeout
        try:
            if self._text_tasks:
                await asyncio.wait_for(asyncio.gather(*self._text_tasks, return_exceptions=True), timeout)
            await asyncio.wait_for(self.call.end_of_input(), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            return False
        except Exception:
            LOG.exception("end_of_input failed (session %s)", self.session)
        while time.monotonic() < deadline:
            if self._task is not None and self._task.done():
                return True
            # Caller speech with no transcript yet: its turn may still be in ASR, so wait longer.
            quiet_needed = self.PENDING_SPEECH_S if self.speech_pending else self.QUIET_S
            quiet = time.monotonic() - self.last_event >= quiet_needed
            if quiet and not self.busy():
                return True
            await asyncio.sleep(0.05)
        return False

    async def close(self) -> None:
        """Close the call and stop the pump; bounded so a stuck worker cannot hold the server."""
        for t in list(self._text_tasks):
            t.cancel()
        try:
            await asyncio.wait_for(self.call.close(), 5.0)
        except Exception:
            LOG.warning("call close failed or timed out (session %s)", self.session)
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 0.5)
            except Exception:
                self._task.cancel()
                try:
                    await self._task
                except BaseException:
                    pass


def _is_closed_error(e: BaseException) -> bool:
    from websockets.exceptions import ConnectionClosed

    return isinstance(e, (ConnectionClosed, ConnectionError))


# --------------------------------------------------------------------- connection supervisor


async def supervise(ws: Any, state: ServerState, driver: CallDriver,
                    on_message: Callable[[Any], Awaitable[str | None]]) -> str:
    """Read client messages until the client stops, disconnects, the session runs out, or the
    server shuts down. Returns how it ended: stop | disconnect | shutdown | session_too_long |
    the Fatal code. Never lets a client message start work once the end is decided."""
    from websockets.exceptions import ConnectionClosed

    halt = asyncio.Event()
    in_recv = False

    async def reader() -> str:
        nonlocal in_recv
        while not halt.is_set():
            in_recv = True
            try:
                msg = await ws.recv()
            finally:
                in_recv = False
            if halt.is_set():
                return "halted"
            if await on_message(msg) == "stop":
                return "stop"
        return "halted"

    read_task = asyncio.create_task(reader())
    shutdown_task = asyncio.create_task(state.shutting_down.wait())
    deadline_task = asyncio.create_task(asyncio.sleep(state.config.max_session_s))
    try:
        done, _ = await asyncio.wait({read_task, shutdown_task, deadline_task}, return_when=asyncio.FIRST_COMPLETED)
        if read_task in done:
            try:
                read_task.result()
                return "stop"
            except ConnectionClosed:
                return "disconnect"
            except Fatal:
                raise
        # Shutdown or deadline: take no new client input; let a message being handled finish.
        halt.set()
        if in_recv:
            read_task.cancel()
        try:
            await read_task
        except (asyncio.CancelledError, ConnectionClosed, Fatal):
            pass
        return "shutdown" if shutdown_task in done else "session_too_long"
    finally:
        for t in (read_task, shutdown_task, deadline_task):
            if not t.done():
                t.cancel()
        await asyncio.gather(read_task, shutdown_task, deadline_task, return_exceptions=True)


async def finish(ws: Any, state: ServerState, driver: CallDriver, how: str,
                 send_error: Callable[[str, str], Awaitable[None]]) -> None:
    """Close a call the way `supervise` said it ended."""
    if how in ("stop", "shutdown"):
        idle = await driver.drain(state.config.drain_timeout_s)
        if not idle:
            LOG.warning("session %s: in-flight turn did not finish within %.0fs", driver.session,
                        state.config.drain_timeout_s)
    elif how == "session_too_long":
        await send_error("session_too_long", f"the call exceeded the {state.config.max_session_s:g}s session limit")
    t = time.monotonic()
    await driver.close()
    t_call = time.monotonic() - t
    code = {"stop": 1000, "shutdown": 1001, "disconnect": 1000}.get(how, 1008)
    await _close(ws, code, how)
    log_event("call_closed", session=driver.session, how=how, call_close_ms=round(t_call * 1000),
              ws_close_ms=round((time.monotonic() - t - t_call) * 1000))


async def _close(ws: Any, code: int, reason: str) -> None:
    try:
        await asyncio.wait_for(ws.close(code, reason[:120]), 3.0)
    except Exception:
        pass


# -------------------------------------------------------------------------- native endpoint


class NativeWire:
    """CallEvents → native protocol frames (text JSON events, binary reply audio)."""

    def __init__(self, ws: Any):
        self.ws = ws
        self._open_audio: set[Any] = set()
        self._held_transfers: list[Any] = []  # a transfer waits for the spoken message's audio_end

    async def send(self, event: Any) -> None:
        await self.ws.send(encode(event))

    async def emit(self, kind: str, ev: Any) -> None:
        if kind == "transcript":
            await self.send(Transcript(final=bool(ev.final), text=ev.text))
        elif kind == "decision":
            await self.send(DecisionOut(decision=ev.decision))
        elif kind == "audio_start":
            self._open_audio.add(ev.id)
            await self.send(Audio(id=ev.id, sample_rate=int(ev.sample_rate)))
        elif kind == "audio_chunk":
            if ev.data:
                await self.ws.send(bytes(ev.data))
        elif kind == "audio_end":
            self._open_audio.discard(ev.id)
            await self.send(AudioEnd(id=ev.id))
            if not self._open_audio:
                await self._release_transfers()
        elif kind == "clear":
            self._open_audio.clear()
            await self.send(Clear())
            await self._release_transfers()
        elif kind == "transfer":
            self._held_transfers.append(ev.handoff)
            if not self._open_audio:
                await self._release_transfers()
        elif kind == "error":
            await self.send(Error(code=_known_code(ev.code), message=str(ev.message)))

    async def _release_transfers(self) -> None:
        while self._held_transfers:
            await self.send(Transfer(handoff=self._held_transfers.pop(0)))


def _known_code(code: str) -> str:
    from voice_agent.protocol import ERROR_CODES

    return code if code in ERROR_CODES else "call_failed"


async def handle_native(ws: Any, state: ServerState) -> None:
    cfg = state.config

    async def send_error(code: str, message: str) -> None:
        try:
            await ws.send(encode(Error(code=code, message=message)))
        except Exception:
            pass

    if not state.admit():
        log_event("busy", endpoint="native", active=state.active, max_calls=cfg.max_calls)
        await send_error("busy", f"the server is at its limit of {cfg.max_calls} concurrent calls; try again later")
        await _close(ws, 1013, "busy")
        return
    driver: CallDriver | None = None
    session = uuid.uuid4().hex[:12]
    t0 = time.monotonic()
    how = "disconnect"
    try:
        start = await _await_start(ws, state, send_error)
        role = cfg.role_for(start.token)
        if role is None:
            raise Fatal("unknown_token", "the token is not configured on this server", 1008)
        out_rate = start.output_sample_rate or start.sample_rate
        call = state.runtime.new_call(
            role=role, facets=dict(start.caller),
            config=state.call_config(input_rate=start.sample_rate, output_rate=out_rate, output_encoding="pcm16"),
        )
        wire = NativeWire(ws)
        driver = CallDriver(call, wire.emit, session, "native")
        driver.end_silence_ms = cfg.end_silence_ms
        log_event("call_start", session=session, endpoint="native", role=role, facets=sorted(start.caller),
                  sample_rate=start.sample_rate, active=state.active)
        await wire.send(Ready(session=session, role=role, sample_rate=start.sample_rate, output_sample_rate=out_rate))
        driver.start()
        errors = 0
        turn_limit_bytes = int(cfg.max_turn_s * start.sample_rate * 2)

        async def on_message(msg: Any) -> str | None:
            nonlocal errors
            try:
                if isinstance(msg, (bytes, bytearray, memoryview)):
                    _check_size(len(msg), cfg)
                    if len(msg) % 2:
                        raise ProtocolError("bad_audio", f"binary frame of {len(msg)} bytes is not whole PCM16 samples")
                    await _feed_with_turn_limit(driver, bytes(msg), start.sample_rate, turn_limit_bytes, wire)
                    return None
                _check_size(len(msg.encode("utf-8", "surrogatepass")), cfg)
                ev = parse_client_event(msg)
                if isinstance(ev, Text):
                    text = ev.text.strip()
                    if len(text) > cfg.max_text_chars:
                        raise ProtocolError("turn_too_long", f"typed turn of {len(text)} characters; the limit is {cfg.max_text_chars}")
                    if not text:
                        raise ProtocolError("bad_event", "text: empty turn")
                    driver.submit_text(text)
                elif isinstance(ev, Stop):
                    return "stop"
                elif isinstance(ev, Start):
                    raise ProtocolError("already_started", "this connection already sent start")
                elif isinstance(ev, Played):
                    pass  # playback bookkeeping is the client's; nothing waits on it server-side
                return None
            except ProtocolError as e:
                errors += 1
                await wire.send(Error(code=e.code, message=e.message))
                if errors >= cfg.max_protocol_errors:
                    raise Fatal("too_many_errors", f"{errors} protocol errors on this connection", 1008) from None
                return None

        how = await supervise(ws, state, driver, on_message)
        await finish(ws, state, driver, how, send_error)
    except Fatal as f:
        how = f.code
        await send_error(f.code, f.message)
        if driver is not None:
            await driver.close()
        await _close(ws, f.close_code, f.code)
    except Exception as e:
        if _is_closed_error(e):
            how = "disconnect"
        else:
            how = "internal"
            LOG.exception("session %s failed", session)
            await send_error("internal", "the server failed on this call; please call again")
            await _close(ws, 1011, "internal")
        if driver is not None:
            await driver.close()
    finally:
        state.release()
        log_event("call_end", session=session, endpoint="native", how=how,
                  seconds=round(time.monotonic() - t0, 2), decisions=driver.decisions if driver else 0)


def _check_size(n: int, cfg: ServerConfig) -> None:
    if n > cfg.max_frame_bytes:
        raise Fatal("frame_too_large", f"message of {n} bytes; the limit is {cfg.max_frame_bytes}", 1009)


async def _feed_with_turn_limit(driver: CallDriver, pcm: bytes, rate: int, limit_bytes: int, wire: NativeWire | None) -> None:
    """Feed caller audio and tell the client when a turn runs past max_turn_s: that much
    loud-enough audio with no pause of end_silence_ms. The call's own endpointer cuts such a
    turn at that length (CallConfig.max_turn_s) and answers it; the server only reports it."""
    await driver.call.feed_audio(pcm)
    seconds = len(pcm) / (2 * rate)
    if _is_voiced(pcm):
        driver.turn_audio_s += seconds
        driver.quiet_s = 0.0
        driver.speech_pending = True
    else:
        driver.quiet_s += seconds
        if driver.quiet_s * 1000 >= driver.end_silence_ms:
            driver.turn_audio_s = 0.0
    if driver.turn_audio_s * rate * 2 > limit_bytes:
        driver.turn_audio_s = 0.0
        if wire is not None:
            await wire.send(Error(code="turn_too_long", message=f"the turn passed {limit_bytes / (2 * rate):g}s of speech and was cut"))
        log_event("turn_too_long", session=driver.session)


def _is_voiced(pcm: bytes) -> bool:
    import numpy as np

    x = np.frombuffer(pcm, dtype="<i2")
    if x.size == 0:
        return False
    rms = math.sqrt(float(np.mean(x.astype(np.float32) ** 2)))
    return rms > 150.0  # about -47 dBFS: silence and line noise stay below


async def recv_before_start(ws: Any, state: ServerState, deadline: float) -> Any:
    """One message while waiting for `start`: bounded by the start timeout, and abandoned when
    the server shuts down (a silent connection must not hold up shutdown)."""
    left = deadline - time.monotonic()
    if left > 0 and not state.shutting_down.is_set():
        recv = asyncio.ensure_future(ws.recv())  # websockets' recv() is safe to cancel
        stop = asyncio.ensure_future(state.shutting_down.wait())
        done, _ = await asyncio.wait({recv, stop}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        for t in (recv, stop):
            if t not in done:
                t.cancel()
        await asyncio.gather(recv, stop, return_exceptions=True)
        if recv in done:
            return recv.result()
    if state.shutting_down.is_set():
        raise Fatal("busy", "the server is shutting down; call again in a moment", 1001)
    raise Fatal("not_started", f"no start event within {state.config.start_timeout_s:g}s", 1008)


async def _await_start(ws: Any, state: ServerState, send_error: Callable[[str, str], Awaitable[None]]) -> Start:
    """Read until a valid `start`; other events before it get `not_started` (non-fatal)."""
    cfg = state.config
    deadline = time.monotonic() + cfg.start_timeout_s
    errors = 0
    while True:
        msg = await recv_before_start(ws, state, deadline)
        try:
            if isinstance(msg, (bytes, bytearray, memoryview)):
                _check_size(len(msg), cfg)
                raise ProtocolError("not_started", "audio before start; send {\"type\": \"start\", ...} first")
            _check_size(len(msg), cfg)
            ev = parse_client_event(msg)
            if not isinstance(ev, Start):
                raise ProtocolError("not_started", f"{ev.type} before start; send {{\"type\": \"start\", ...}} first")
        except ProtocolError as e:
            errors += 1
            await send_error(e.code, e.message)
            if errors >= cfg.max_protocol_errors:
                raise Fatal("too_many_errors", f"{errors} protocol errors before start", 1008) from None
            continue
        if ev.protocol != PROTOCOL_VERSION:
            raise Fatal("bad_protocol", f"protocol {ev.protocol} is not supported; this server speaks {PROTOCOL_VERSION}")
        for name, rate in (("sample_rate", ev.sample_rate), ("output_sample_rate", ev.output_sample_rate)):
            if rate is not None and rate not in cfg.sample_rates:
                raise Fatal("bad_sample_rate", f"{name} {rate} is not supported; use one of {cfg.sample_rates}")
        return ev


# ------------------------------------------------------------------------------ HTTP + serve


def _process_request(state: ServerState) -> Callable[[Any, Any], Any]:
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    def respond(status: int, reason: str, body: bytes, ctype: str) -> Response:
        headers = Headers([("Content-Type", ctype), ("Content-Length", str(len(body))),
                           ("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")])
        return Response(status, reason, headers, body)

    def process_request(connection: Any, request: Any) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path in WS_PATHS:
            return None  # websocket handshake (websockets answers 426 to a plain GET)
        if path == "/healthz":
            body = json.dumps({"ok": not state.shutting_down.is_set(), "active_calls": state.active,
                               "max_calls": state.config.max_calls, "protocol": PROTOCOL_VERSION}).encode()
            return respond(200, "OK", body, "application/json")
        if path in WEB_FILES:
            name, ctype = WEB_FILES[path]
            try:
                body = (WEB_DIR / name).read_bytes()
            except OSError:
                return respond(500, "Internal Server Error", f"missing {name}\n".encode(), "text/plain")
            return respond(200, "OK", body, ctype)
        return respond(404, "Not Found", f"no route {path}; try /, /v1/call, /twilio\n".encode(), "text/plain")

    return process_request


async def open_server(state: ServerState, host: str = "127.0.0.1", port: int = 0) -> Any:
    """Start listening; returns the websockets Server (its port: `server_port(server)`)."""
    from websockets.asyncio.server import serve

    from voice_agent.twilio import handle_twilio

    async def handler(ws: Any) -> None:
        path = ws.request.path.split("?", 1)[0]
        if path == "/twilio":
            await handle_twilio(ws, state)
        else:
            await handle_native(ws, state)

    return await serve(
        handler, host, port,
        process_request=_process_request(state),
        max_size=state.config.max_frame_bytes * HARD_FRAME_FACTOR,
        compression=None,  # audio does not compress; deflate would only burn the 2 cores
        ping_interval=20, ping_timeout=20, close_timeout=5,
    )


def server_port(server: Any) -> int:
    return int(next(iter(server.sockets)).getsockname()[1])


async def run_until_signal(state: ServerState, host: str, port: int) -> int:
    """Serve until SIGTERM/SIGINT, then stop accepting, let in-flight turns finish, exit 0."""
    server = await open_server(state, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    actual = server_port(server)
    # Tests and `bench load` read this line to learn the port (`--port 0` picks a free one).
    print(f"listening on ws://{host}:{actual} (native /v1/call, twilio /twilio, page /)", flush=True)
    log_event("listening", host=host, port=actual, max_calls=state.config.max_calls, pid=os.getpid())
    await stop.wait()
    log_event("shutdown", active_calls=state.active)
    state.shutting_down.set()  # handlers drain their in-flight turn, then close 1001
    server.close(close_connections=False)
    try:
        await asyncio.wait_for(server.wait_closed(), state.config.drain_timeout_s + 5)
    except asyncio.TimeoutError:
        LOG.warning("shutdown: connections still open after the drain timeout; closing them")
    log_event("stopped", calls_total=state.calls_total, busy_total=state.busy_total)
    return 0


def _parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run.py serve", description="Run the websocket server (native /v1/call + Twilio /twilio + page /).")
    ap.add_argument("--kb", help="knowledge base directory")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed on stdout)")
    ap.add_argument("--config", help="server YAML (tokens, limits); default ./server.yaml when present")
    ap.add_argument("--max-calls", type=int, help="concurrent-call limit (overrides the config)")
    ap.add_argument("--asr-model", default="tiny.en")
    ap.add_argument("--state-dir", default="var", help="where audits and handoff packages are stored")
    ap.add_argument("--policy", help="policy YAML (default: the built-in policy)")
    ap.add_argument("--tts-workers", type=int, default=None,
                    help="piper worker processes shared by all calls (default: one per concurrent call, at most 4)")
    ap.add_argument("--print-schemas", action="store_true", help="print the JSON Schema of every protocol event and exit")
    return ap.parse_args(argv)


def cli(argv: list[str]) -> int:
    args = _parse_args(argv)
    if args.print_schemas:
        print(json.dumps({"protocol": PROTOCOL_VERSION, "events": event_schemas()}, indent=2))
        return 0
    if not args.kb:
        print("error: serve needs --kb DIR (the knowledge base to answer from)", file=sys.stderr)
        return 2
    if err := kb_dir_error(args.kb):
        return fail(err)
    if not (0 <= args.port <= 65535):
        print(f"error: --port {args.port}: must be 0..65535", file=sys.stderr)
        return 2
    if args.max_calls is not None and not 1 <= args.max_calls <= 256:
        print(f"error: --max-calls {args.max_calls}: must be 1..256", file=sys.stderr)
        return 2
    try:
        config = load_server_config(args.config)
    except ServerConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.max_calls is not None:
        config = config.model_copy(update={"max_calls": args.max_calls})
    tts_workers = args.tts_workers if args.tts_workers is not None else min(config.max_calls, 4)
    if not 1 <= tts_workers <= 16:
        print(f"error: --tts-workers {tts_workers}: must be 1..16", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from voice_agent.call import VoiceRuntime

        t0 = time.monotonic()
        runtime = VoiceRuntime.load(args.kb, asr_model=args.asr_model, state_dir=args.state_dir,
                                    policy_file=args.policy, tts=tts_workers == 1)
        if tts_workers > 1:
            # Concurrent calls: with one worker every reply waits for the whole previous reply
            # to render; a small pool lets replies start in parallel.
            from voice_agent.tts import TtsPool

            runtime.tts = TtsPool(tts_workers).start()
        unknown = sorted(set(config.tokens.values()) - runtime.engine.roles())
        if unknown:
            print(f"error: {args.config or 'server config'}: token role(s) {', '.join(unknown)} not used by any "
                  f"document of {args.kb} (known: {', '.join(sorted(runtime.engine.roles()))})", file=sys.stderr)
            return 2
        log_event("runtime_loaded", seconds=round(time.monotonic() - t0, 2), kb=args.kb, tts_workers=tts_workers)
    except Exception as e:  # a bad KB, a missing model package: one actionable line, no traceback
        print(f"error: cannot load the voice runtime for {args.kb}: {e}", file=sys.stderr)
        return 2

    async def main() -> int:
        state = ServerState(runtime, config, asr_model=args.asr_model)
        try:
            return await run_until_signal(state, args.host, args.port)
        except OSError as e:
            print(f"error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
            return 2

    try:
        rc = asyncio.run(main())
    finally:
        close = getattr(runtime, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                LOG.warning("runtime close failed", exc_info=True)
        logging.shutdown()  # flush the log handlers before the process exits
    return rc
