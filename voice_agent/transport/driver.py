"""`CallDriver` runs one call: it forwards the call's events to a wire (the endpoint's framing)
and knows when nothing is left in flight. `AudioGate` holds a transfer until the spoken message
has been sent, for every wire alike."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from websockets.exceptions import ConnectionClosed

from policy.decision import Action, Handoff
from voice_agent.call import CallEvent
from voice_agent.interfaces import CallLike

from .metrics import ServerMetrics
from .state import LOG, log_event

Emit = Callable[[CallEvent], Awaitable[None]]  # one call event onto the wire


class SideWork(Protocol):
    """Work a wire runs beside the call (the Twilio hand-over to a person): it keeps the call busy
    until done, so a stop or a shutdown waits for it, and it is closed with the call."""

    def busy(self) -> bool: ...

    async def close(self) -> None: ...


class CallDriver:
    """Runs one CallSession: forwards its events through `emit` (endpoint framing) and tracks
    what is in flight, so a stop or a shutdown can let the current turn finish first."""

    QUIET_S = 0.4  # no event for this long and nothing open = the call is idle
    PENDING_SPEECH_S = 1.5  # the same, when caller speech has not been transcribed yet

    def __init__(self, call: CallLike, emit: Emit, session: str, endpoint: str, metrics: ServerMetrics | None = None):
        self.call = call
        self.emit = emit
        self.metrics = metrics
        self.session = session
        self.endpoint = endpoint
        self.audio_open: set[str] = set()
        self.turns_pending = 0  # typed or transcribed turns still waiting for their decision
        self.transfer_pending = False  # a transfer decision whose package is not sent yet
        self.transferred = False  # the call went to a person: the agent takes no more turns
        self.last_event = time.monotonic()
        self.decisions = 0
        self.wire_closed = False
        self.turn_audio_s = 0.0  # caller speech with no endpointing pause (turn_too_long report)
        self.quiet_s = 0.0
        self.end_silence_ms = 500
        self.speech_pending = False  # caller speech not transcribed yet
        self.side: list[SideWork] = []
        self.on_handoff: Callable[[Handoff], None] | None = None  # the desk's webhook, set by the server
        self._task: asyncio.Task | None = None
        self._text_tasks: set[asyncio.Task] = set()
        self._text_lock = asyncio.Lock()

    def start(self) -> None:
        self._task = asyncio.create_task(self._pump(), name=f"call-pump-{self.session}")

    async def _pump(self) -> None:
        try:
            async for ev in self.call.events():
                self.last_event = time.monotonic()
                if ev.type == "audio_start":
                    self.audio_open.add(ev.id)
                elif ev.type == "audio_end":
                    self.audio_open.discard(ev.id)
                elif ev.type == "clear":
                    self.audio_open.clear()
                elif ev.type == "transcript" and ev.final:
                    self.turns_pending = max(self.turns_pending, 1)
                    self.speech_pending = False
                    log_event("transcript", session=self.session, endpoint=self.endpoint, text=ev.text)
                elif ev.type == "decision":
                    self.turns_pending = max(0, self.turns_pending - 1)
                    self.speech_pending = False
                    self.decisions += 1
                    d = ev.decision
                    self.transfer_pending = d.action == Action.transfer and d.handoff is not None
                    if d.handoff is not None and self.on_handoff is not None:
                        self.on_handoff(d.handoff)  # committed by the policy before this decision
                    if self.metrics is not None:
                        self.metrics.decision(d, ev.timings_ms)
                    log_event("decision", session=self.session, endpoint=self.endpoint,
                              action=d.action.value,
                              reasons=[r.value for r in d.reasons],
                              citations=[c.doc_id for c in d.citations], kb_version=d.kb_version,
                              handoff=d.handoff.id if d.handoff else None,
                              timings_ms={k: round(v, 1) for k, v in (getattr(ev, "timings_ms", None) or {}).items()})
                elif ev.type == "transfer":
                    self.transfer_pending, self.transferred, self.turns_pending = False, True, 0
                elif ev.type == "error":
                    log_event("call_error", session=self.session, code=ev.code, message=ev.message)
                    if self.metrics is not None:
                        self.metrics.errors.labels(ev.code).inc()
                if self.wire_closed:
                    continue  # keep draining so the call's queue never blocks its worker
                try:
                    await self.emit(ev)
                except Exception as e:  # the socket went away mid-send: stop writing, keep draining
                    if not is_closed_error(e):
                        LOG.exception("emit failed (session %s)", self.session)
                    self.wire_closed = True
        except asyncio.CancelledError:
            raise
        except Exception:
            LOG.exception("call pump failed (session %s)", self.session)

    def submit_text(self, text: str) -> None:
        """Start a typed turn without blocking the reader (audio and `stop` keep flowing); after a
        transfer the caller is talking to a person, and the agent answers nothing more."""
        if self.transferred:
            return
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
        return (bool(self.audio_open) or self.turns_pending > 0 or self.transfer_pending
                or any(s.busy() for s in self.side))

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
        for s in self.side:
            try:
                await s.close()  # bounded by the work itself (the hand-over's REST timeout)
            except Exception:
                LOG.exception("side work failed to close (session %s)", self.session)
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


def is_closed_error(e: BaseException) -> bool:
    return isinstance(e, (ConnectionClosed, ConnectionError))


class AudioGate:
    """Tracks open reply audio; a transfer waits until none is open, so the caller hears the
    whole message before the hand-over. `release` sends one held transfer on the wire."""

    def __init__(self, release: Callable[[Handoff], Awaitable[None]]):
        self._release = release
        self._open: set[str] = set()
        self._held: list[Handoff] = []

    def started(self, audio_id: str) -> None:
        self._open.add(audio_id)

    async def ended(self, audio_id: str) -> None:
        self._open.discard(audio_id)
        await self._flush()

    async def cleared(self) -> None:
        self._open.clear()
        await self._flush()

    async def transfer(self, handoff: Handoff) -> None:
        self._held.append(handoff)
        await self._flush()

    async def _flush(self) -> None:
        while self._held and not self._open:
            await self._release(self._held.pop(0))
