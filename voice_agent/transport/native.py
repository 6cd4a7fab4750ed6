"""The native protocol at `/v1/call` (CONTRACT §5, docs/PROTOCOL.md): waiting for `start`, the
per-message rules (frame size, whole PCM16 samples, typed-turn length), and call events framed as
JSON events plus binary reply audio."""
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import cast

from pydantic import BaseModel
from websockets.asyncio.server import ServerConnection
from websockets.typing import Data

from voice_agent.call import CallEvent

from .connection import Connection, OnMessage, feed_with_turn_limit, recv_before_start, serve_connection
from .driver import AudioGate, CallDriver
from .protocol import (ERROR_CODES, PROTOCOL_VERSION, ErrorCode, Audio, AudioEnd, Clear, DecisionOut, Error, Played,
                       ProtocolError, Ready, Start, Stop, Text, Transcript, Transfer, encode, parse_client_event)
from .resume import open_new, open_resumed
from .state import Fatal, ServerState, log_event
from .config import ServerConfig


class NativeWire:
    """CallEvents → native protocol frames (text JSON events, binary reply audio)."""

    def __init__(self, ws: ServerConnection):
        self.ws = ws
        self.gate = AudioGate(lambda handoff: self.send(Transfer(handoff=handoff)))

    async def send(self, event: BaseModel) -> None:
        await self.ws.send(encode(event))

    async def emit(self, ev: CallEvent) -> None:
        if ev.type == "transcript":
            await self.send(Transcript(final=bool(ev.final), text=ev.text))
        elif ev.type == "decision":
            await self.send(DecisionOut(decision=ev.decision))
        elif ev.type == "audio_start":
            self.gate.started(ev.id)
            await self.send(Audio(id=ev.id, sample_rate=int(ev.sample_rate)))
        elif ev.type == "audio_chunk":
            if ev.data:
                await self.ws.send(bytes(ev.data))
        elif ev.type == "audio_end":
            await self.send(AudioEnd(id=ev.id))
            await self.gate.ended(ev.id)
        elif ev.type == "clear":
            await self.send(Clear())
            await self.gate.cleared()
        elif ev.type == "transfer":
            await self.gate.transfer(ev.handoff)
        elif ev.type == "error":
            await self.send(wire_error(ev.code, str(ev.message)))


def wire_error(code: str, message: str) -> Error:
    """An `error` event; a code the protocol does not list goes out as `call_failed`."""
    return Error(code=cast(ErrorCode, code) if code in ERROR_CODES else "call_failed", message=message)


async def handle_native(ws: ServerConnection, state: ServerState) -> None:
    async def report(code: str, message: str) -> None:
        try:
            await ws.send(encode(wire_error(code, message)))
        except Exception:
            pass  # the socket is already gone; the close that follows says why

    async def open_call(conn: Connection) -> OnMessage:
        return await _open_call(ws, state, conn, report)

    await serve_connection(ws, state, "native", report, open_call)


async def _open_call(ws: ServerConnection, state: ServerState, conn: Connection,
                     report: Callable[[str, str], Awaitable[None]]) -> OnMessage:
    cfg = state.config
    start = await _await_start(ws, state, report)
    if start.resume is not None:  # the role, facets and conversation come from the checkpoint
        opening = await open_resumed(state.checkpoints, start.resume)
    else:
        role = cfg.role_for(start.token)
        if role is None:
            raise Fatal("unknown_token", "the token is not configured on this server", 1008)
        opening = await open_new(state.checkpoints, role, dict(start.caller))
    talk, cp = opening.state, opening.checkpointer
    out_rate = start.output_sample_rate or start.sample_rate
    call = state.runtime.new_call(
        role=talk.role, facets=dict(talk.facets),
        config=state.call_config(input_rate=start.sample_rate, output_rate=out_rate, output_encoding="pcm16"),
        state=talk, on_turn=cp.on_turn if cp is not None else None,
    )
    wire = NativeWire(ws)
    driver = conn.driver = CallDriver(call, wire.emit, conn.session, "native", state.metrics)
    driver.end_silence_ms = cfg.end_silence_ms
    log_event("call_start", session=conn.session, endpoint="native", role=talk.role, facets=sorted(talk.facets),
              sample_rate=start.sample_rate, active=state.active, call_id=talk.session_id, resumed=opening.resumed)
    await wire.send(Ready(session=conn.session, call_id=talk.session_id, resume_token=opening.token,
                          resumed=opening.resumed, turns=talk.turns, role=talk.role, sample_rate=start.sample_rate,
                          output_sample_rate=out_rate))
    driver.start()
    return _message_handler(driver, wire, cfg, start.sample_rate, report)


def _message_handler(driver: CallDriver, wire: NativeWire, cfg: ServerConfig, rate: int,
                     report: Callable[[str, str], Awaitable[None]]) -> OnMessage:
    errors = 0
    turn_limit_bytes = int(cfg.max_turn_s * rate * 2)

    async def on_message(msg: Data) -> str | None:
        nonlocal errors
        try:
            if isinstance(msg, (bytes, bytearray, memoryview)):
                check_size(len(msg), cfg)
                if len(msg) % 2:
                    raise ProtocolError("bad_audio", f"binary frame of {len(msg)} bytes is not whole PCM16 samples")
                await feed_with_turn_limit(driver, bytes(msg), rate, turn_limit_bytes, report)
                return None
            check_size(len(msg.encode("utf-8", "surrogatepass")), cfg)
            ev = parse_client_event(msg)
            if isinstance(ev, Text):
                _submit_text(driver, ev.text.strip(), cfg)
            elif isinstance(ev, Stop):
                return "stop"
            elif isinstance(ev, Start):
                raise ProtocolError("already_started", "this connection already sent start")
            elif isinstance(ev, Played):
                pass  # playback bookkeeping is the client's; nothing waits on it server-side
            return None
        except ProtocolError as e:
            errors += 1
            await wire.send(wire_error(e.code, e.message))
            if errors >= cfg.max_protocol_errors:
                raise Fatal("too_many_errors", f"{errors} protocol errors on this connection", 1008) from None
            return None

    return on_message


def _submit_text(driver: CallDriver, text: str, cfg: ServerConfig) -> None:
    if len(text) > cfg.max_text_chars:
        raise ProtocolError("turn_too_long", f"typed turn of {len(text)} characters; the limit is {cfg.max_text_chars}")
    if not text:
        raise ProtocolError("bad_event", "text: empty turn")
    driver.submit_text(text)


def check_size(n: int, cfg: ServerConfig) -> None:
    if n > cfg.max_frame_bytes:
        raise Fatal("frame_too_large", f"message of {n} bytes; the limit is {cfg.max_frame_bytes}", 1009)


async def _await_start(ws: ServerConnection, state: ServerState, report: Callable[[str, str], Awaitable[None]]) -> Start:
    """Read until a valid `start`; other events before it get `not_started` (non-fatal)."""
    cfg = state.config
    deadline = time.monotonic() + cfg.start_timeout_s
    errors = 0
    while True:
        msg = await recv_before_start(ws, state, deadline)
        try:
            if isinstance(msg, (bytes, bytearray, memoryview)):
                check_size(len(msg), cfg)
                raise ProtocolError("not_started", "audio before start; send {\"type\": \"start\", ...} first")
            check_size(len(msg), cfg)
            ev = parse_client_event(msg)
            if not isinstance(ev, Start):
                raise ProtocolError("not_started", f"{ev.type} before start; send {{\"type\": \"start\", ...}} first")
        except ProtocolError as e:
            errors += 1
            await report(e.code, e.message)
            if errors >= cfg.max_protocol_errors:
                raise Fatal("too_many_errors", f"{errors} protocol errors before start", 1008) from None
            continue
        if ev.protocol != PROTOCOL_VERSION:
            raise Fatal("bad_protocol", f"protocol {ev.protocol} is not supported; this server speaks {PROTOCOL_VERSION}")
        for name, rate in (("sample_rate", ev.sample_rate), ("output_sample_rate", ev.output_sample_rate)):
            if rate is not None and rate not in cfg.sample_rates:
                raise Fatal("bad_sample_rate", f"{name} {rate} is not supported; use one of {cfg.sample_rates}")
        return ev
