"""A native call that survives its connection: when the websocket drops mid-call (no close frame,
or a server going away: 1001, 1011, 1012), the client reconnects to the next server of its list
and resumes the call with `ready.call_id` and `ready.resume_token` (docs/PROTOCOL.md, "Resuming
a call").

Typed turns go one at a time, each once the previous one's decision came, so the client knows
which ones the server decided: on a resume, `ready.turns` counts them (typed turns are sent before
any audio, one turn each), and only the rest are sent, none twice. Audio goes on from the first
frame not sent."""
from __future__ import annotations

import asyncio
import json

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from .client_stream import CallStream

__all__ = ["resuming_call", "DROPPED"]

# Close codes after which the call is resumed elsewhere: no close frame (the server died or the
# network broke), the server going away or restarting, a server fault.
DROPPED = {1001, 1006, 1011, 1012}
BUSY = 1013  # at its call limit: while resuming, the next server may have room
PAUSE_S = 0.2  # between reconnections


async def resuming_call(stream: CallStream, urls: list[str], *, attempts: int | None = None) -> None:
    """Run the call over as many connections as it takes, trying `urls` in turn (from the first),
    at most `attempts` connections (default: two rounds of the list)."""
    limit = attempts or 2 * len(urls)
    for n in range(limit):
        url = urls[n % len(urls)]
        stream.res.urls.append(url)
        try:
            async with connect(url, max_size=2**22, compression=None, open_timeout=10, close_timeout=5) as ws:
                try:
                    ended = await _one_connection(stream, ws)
                finally:
                    stream.res.close_code, stream.res.close_reason = ws.close_code, ws.close_reason or ""
        except (OSError, asyncio.TimeoutError, InvalidHandshake) as e:  # this server is not there
            if n == limit - 1:
                raise
            stream.emit({"type": "reconnect", "url": url, "why": f"{type(e).__name__}: {e}"})
            await asyncio.sleep(PAUSE_S)
            continue
        if ended:
            return
        stream.emit({"type": "reconnect", "url": url, "why": f"closed {stream.res.close_code}"})
        await asyncio.sleep(PAUSE_S)


async def _one_connection(stream: CallStream, ws: ClientConnection) -> bool:
    """One connection of the call; True when the call is over (stopped, or ended by the server for
    a reason another server would give too), False when it dropped and should be resumed."""
    stream.ready.clear()
    recv = asyncio.create_task(stream.receive(ws))
    try:
        await stream.send_start(ws)
        if await _until(stream.ready, recv):
            if await _send_turns(stream, ws, recv):
                if len(stream.x):
                    await stream.send_audio(ws)
                await stream.send_stop(ws)
    except ConnectionClosed:
        pass  # the receiver has the reason
    try:
        await recv
    except ConnectionClosed:
        pass
    code = ws.close_code
    resuming = stream.res.call_id is not None
    return not (code in DROPPED or (resuming and code == BUSY))


async def _send_turns(stream: CallStream, ws: ClientConnection, recv: asyncio.Task[None]) -> bool:
    """The typed turns the server has not decided yet, each after the previous one's decision.
    False when the connection ended on the way."""
    texts = stream.texts or []
    if stream.res.resumes:  # what the server decided, whether or not its decision reached us
        stream.next_text = max(stream.next_text, min(stream.server_turns, len(texts)))
    while stream.next_text < len(texts):
        last = stream.res.decisions[-1] if stream.res.decisions else {}
        if stream.res.transfers or last.get("action") == "transfer":
            break  # a person has the call: the agent answers nothing more
        stream.progress.clear()
        await ws.send(json.dumps({"type": "text", "text": texts[stream.next_text]}))
        if not await _until(stream.progress, recv):
            return False
        stream.next_text += 1
    return True


async def _until(event: asyncio.Event, recv: asyncio.Task[None]) -> bool:
    """Wait for `event` while the connection lasts; whether it came."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter, recv}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not waiter.done():
            waiter.cancel()
    return event.is_set()
