"""One connection, whatever its wire format: admission, the supervisor (session deadline,
graceful shutdown, abrupt disconnects), how a call is finished, and the caller-audio feed with its
turn-length report. Native and Twilio differ only in how they open a call and frame events."""
from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.typing import Data

from .driver import CallDriver, is_closed_error
from .state import LOG, Fatal, ServerState, log_event

Report = Callable[[str, str], Awaitable[None]]  # (error code, message) to the caller or the log
OnMessage = Callable[[Data], Awaitable["str | None"]]  # one client message → "stop" or None


@dataclass
class Connection:
    """What the skeleton knows of a connection while the endpoint opens its call."""
    session: str
    endpoint: str
    driver: CallDriver | None = None


async def serve_connection(ws: ServerConnection, state: ServerState, endpoint: str, report: Report,
                           open_call: Callable[[Connection], Awaitable[OnMessage]]) -> None:
    """Admit, let the endpoint open its call (setting `conn.driver`), supervise, finish; any
    failure ends in one report and one close, and the call slot is always released."""
    cfg = state.config
    addr = client_address(ws, cfg.trusted_proxies)
    refusal = state.addresses.admit(addr)
    if refusal is not None:
        state.metrics.refused.labels(refusal.code).inc()
        log_event("address_refused", endpoint=endpoint, address=addr, code=refusal.code)
        await report(refusal.code, refusal.message)
        await close_ws(ws, 1013 if refusal.code == "busy" else 1008, refusal.code)
        return
    if not state.admit(endpoint):
        state.addresses.release(addr)
        log_event("busy", endpoint=endpoint, active=state.active, max_calls=cfg.max_calls)
        await report("busy", f"the server is at its limit of {cfg.max_calls} concurrent calls; try again later")
        await close_ws(ws, 1013, "busy")
        return
    conn = Connection(session=uuid.uuid4().hex[:12], endpoint=endpoint)
    t0 = time.monotonic()
    how = "disconnect"
    try:
        on_message = await open_call(conn)
        if conn.driver is None:
            raise RuntimeError(f"{endpoint}: open_call returned without a call")
        state.addresses.token_ok(addr)
        if state.webhook is not None:
            webhook, session = state.webhook, conn.session
            conn.driver.on_handoff = lambda h: webhook.notify(h, session)
        how = await supervise(ws, state, conn.driver, on_message)
        await finish(ws, state, conn.driver, how, report)
    except Fatal as f:
        how = f.code
        if f.code in ("unknown_token", "bad_resume") and (wait := state.addresses.token_failed(addr)):
            log_event("token_backoff", endpoint=endpoint, address=addr, seconds=wait)
        await report(f.code, f.message)
        await _close_driver(conn)
        await close_ws(ws, f.close_code, f.code)
    except Exception as e:
        how = "disconnect" if is_closed_error(e) else "internal"
        if how == "internal":
            LOG.exception("%s session %s failed", endpoint, conn.session)
            await report("internal", "the server failed on this call; please call again")
            await close_ws(ws, 1011, "internal")
        await _close_driver(conn)
    finally:
        state.release()
        state.addresses.release(addr)
        log_event("call_end", session=conn.session, endpoint=endpoint, how=how,
                  seconds=round(time.monotonic() - t0, 2), decisions=conn.driver.decisions if conn.driver else 0)


def client_address(ws: ServerConnection, trusted_proxies: list[str]) -> str:
    """The caller's address: the peer's, or the last X-Forwarded-For hop when the peer is a trusted
    proxy (the hops before it are whatever the client chose to write)."""
    peer = ws.remote_address[0] if ws.remote_address else "unknown"
    peer = str(peer)
    if peer in trusted_proxies and ws.request is not None:
        forwarded = ws.request.headers.get("X-Forwarded-For", "")
        hops = [h.strip() for h in forwarded.split(",") if h.strip()]
        if hops:
            return hops[-1][:64]
    return peer


async def _close_driver(conn: Connection) -> None:
    if conn.driver is not None:
        await conn.driver.close()


async def supervise(ws: ServerConnection, state: ServerState, driver: CallDriver,
                    on_message: OnMessage) -> str:
    """Read client messages until the client stops, disconnects, goes silent, the session runs
    out, or the server shuts down. Returns how it ended: stop | disconnect | shutdown |
    session_too_long | idle_timeout | the Fatal code. Never lets a client message start work once
    the end is decided."""
    halt = asyncio.Event()
    in_recv = False
    heard = [time.monotonic()]  # when the client last sent anything

    async def reader() -> str:
        nonlocal in_recv
        while not halt.is_set():
            in_recv = True
            try:
                msg = await ws.recv()
            finally:
                in_recv = False
            heard[0] = time.monotonic()
            if halt.is_set():
                return "halted"
            if await on_message(msg) == "stop":
                return "stop"
        return "halted"

    read_task = asyncio.create_task(reader())
    ends = {asyncio.create_task(state.shutting_down.wait()): "shutdown",
            asyncio.create_task(asyncio.sleep(state.config.max_session_s)): "session_too_long",
            asyncio.create_task(_silence(driver, heard, state.config.idle_timeout_s)): "idle_timeout"}
    try:
        done, _ = await asyncio.wait({read_task, *ends}, return_when=asyncio.FIRST_COMPLETED)
        if read_task in done:
            try:
                read_task.result()
                return "stop"
            except ConnectionClosed:
                return "disconnect"
        # Shutdown, deadline or silence: take no new client input; let a message being handled finish.
        halt.set()
        if in_recv:
            read_task.cancel()
        try:
            await read_task
        except (asyncio.CancelledError, ConnectionClosed, Fatal):
            pass
        return next(how for task, how in ends.items() if task in done)
    finally:
        for t in (read_task, *ends):
            if not t.done():
                t.cancel()
        await asyncio.gather(read_task, *ends, return_exceptions=True)


async def _silence(driver: CallDriver, heard: list[float], limit_s: float) -> None:
    """Returns once the client has sent nothing for `limit_s` while no reply of ours was in flight
    (a caller listening to a reply is not idle): a squatter holding a call slot."""
    while True:
        await asyncio.sleep(min(limit_s / 4, 1.0))
        if driver.busy():
            heard[0] = max(heard[0], time.monotonic())
        elif time.monotonic() - heard[0] >= limit_s:
            return


async def finish(ws: ServerConnection, state: ServerState, driver: CallDriver, how: str,
                 send_error: Callable[[str, str], Awaitable[None]]) -> None:
    """Close a call the way `supervise` said it ended."""
    if how in ("stop", "shutdown"):
        idle = await driver.drain(state.config.drain_timeout_s)
        if not idle:
            LOG.warning("session %s: in-flight turn did not finish within %.0fs", driver.session,
                        state.config.drain_timeout_s)
    elif how == "session_too_long":
        await send_error("session_too_long", f"the call exceeded the {state.config.max_session_s:g}s session limit")
    elif how == "idle_timeout":
        await send_error("idle_timeout", f"nothing was sent for {state.config.idle_timeout_s:g}s; the call is closed")
    t = time.monotonic()
    await driver.close()
    t_call = time.monotonic() - t
    code = {"stop": 1000, "shutdown": 1001, "disconnect": 1000}.get(how, 1008)
    await close_ws(ws, code, how)
    log_event("call_closed", session=driver.session, how=how, call_close_ms=round(t_call * 1000),
              ws_close_ms=round((time.monotonic() - t - t_call) * 1000))


async def close_ws(ws: ServerConnection, code: int, reason: str) -> None:
    try:
        await asyncio.wait_for(ws.close(code, reason[:120]), 3.0)
    except Exception:
        pass


async def feed_with_turn_limit(driver: CallDriver, pcm: bytes, rate: int, limit_bytes: int,
                               report: Report) -> None:
    """Feed caller audio and tell the client when a turn runs past max_turn_s: that much
    loud-enough audio with no pause of end_silence_ms. The call's own endpointer cuts such a
    turn at that length (CallConfig.max_turn_s) and answers it; the server only reports it."""
    await driver.call.feed_audio(pcm)
    seconds = len(pcm) / (2 * rate)
    if is_voiced(pcm):
        driver.turn_audio_s += seconds
        driver.quiet_s = 0.0
        driver.speech_pending = True
    else:
        driver.quiet_s += seconds
        if driver.quiet_s * 1000 >= driver.end_silence_ms:
            driver.turn_audio_s = 0.0
    if driver.turn_audio_s * rate * 2 > limit_bytes:
        driver.turn_audio_s = 0.0
        await report("turn_too_long", f"the turn passed {limit_bytes / (2 * rate):g}s of speech and was cut")
        log_event("turn_too_long", session=driver.session)


def is_voiced(pcm: bytes) -> bool:
    x = np.frombuffer(pcm, dtype="<i2")
    if x.size == 0:
        return False
    rms = math.sqrt(float(np.mean(x.astype(np.float32) ** 2)))
    return rms > 150.0  # about -47 dBFS: silence and line noise stay below


async def recv_before_start(ws: ServerConnection, state: ServerState, deadline: float) -> Data:
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
