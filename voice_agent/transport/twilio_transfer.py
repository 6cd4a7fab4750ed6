"""The Twilio transfer that reaches a person. The wire has sent the spoken message's media and the
mark `transfer:<handoff id>` after it; once Twilio echoes that mark (the message has played), or
`mark_wait_s` passes without an echo, the live call is updated through the REST API to dial the
team's destination. Exactly one update per transfer, never retried. If it fails, the caller
hears so, the handoff package stays stored, and the audit says what happened either way."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from policy.decision import Handoff
from policy.records import now

from .state import LOG, AuditSink, log_event
from .twilio_config import TwilioConfig
from .twilio_rest import describe_error, redirect_call

__all__ = ["PhoneTransfer", "REDIRECT_FAILED_MESSAGE"]

REDIRECT_FAILED_MESSAGE = ("I'm sorry, I couldn't connect you to a person right now. Your request is saved, "
                           "and someone will call you back.")

Say = Callable[[str], Awaitable[None]]  # speaks a fixed message on the call


class PhoneTransfer:
    """One Twilio call's hand-over to a person (see the module docstring)."""

    def __init__(self, cfg: TwilioConfig | None, call_sid: str, session: str, say: Say,
                 audit: AuditSink | None = None, count: Callable[[str], None] | None = None):
        self.cfg = cfg
        self.call_sid = call_sid
        self.session = session
        self.say = say
        self.audit = audit
        self.count = count  # outcome -> metrics
        self._played: set[str] = set()  # transfer marks Twilio echoed
        self._wake = asyncio.Event()
        self._stopped = False  # the stream ended: the caller hung up, or the call already moved
        self._task: asyncio.Task[None] | None = None
        self._handled: set[str] = set()

    def begin(self, handoff: Handoff) -> None:
        """The transfer mark for `handoff` went out after its message: hand the call over."""
        if handoff.id in self._handled:
            return  # one update per transfer, whatever calls us twice
        self._handled.add(handoff.id)
        self._task = asyncio.create_task(self._hand_over(handoff), name=f"transfer-{self.session}")

    def mark_played(self, name: str) -> None:
        """Twilio echoed one of our marks: the audio before it has played."""
        if name.startswith("transfer:"):
            self._played.add(name.split(":", 1)[1])
            self._wake.set()

    def stream_stopped(self) -> None:
        self._stopped = True
        self._wake.set()

    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    async def close(self) -> None:
        """The connection is ending: a hand-over still waiting for its mark stops waiting (the
        stream is gone); one already talking to Twilio is let finish, within its timeout."""
        self.stream_stopped()
        if self._task is None or self._task.done():
            return
        bound = (self.cfg.timeout_s if self.cfg else 0) + 2.0
        try:
            await asyncio.wait_for(asyncio.shield(self._task), bound)
        except Exception:  # noqa: BLE001 - logged by the task; a stuck one is cancelled
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _hand_over(self, handoff: Handoff) -> None:
        cfg = self.cfg
        if cfg is None:
            await self._record(handoff, "not_configured", ok=False,
                         error="no twilio section in the server config: the call was not redirected to a person")
            return
        dest = cfg.destination(handoff.team)
        record = {"team": handoff.team, "destination": dest.describe()}
        if not self.call_sid:
            await self._record(handoff, "failed", ok=False, error="the start event carried no callSid", **record)
        else:
            waited = await self._wait_for_mark(handoff.id, cfg.mark_wait_s)
            if self._stopped:
                await self._record(handoff, "stream_ended", ok=False, waited_s=waited,
                             error="the stream ended before the transfer message had played", **record)
                return
            t0 = time.monotonic()
            try:
                await asyncio.wait_for(asyncio.to_thread(redirect_call, cfg, self.call_sid, dest), cfg.timeout_s + 1)
            except Exception as e:  # noqa: BLE001 - any failure: tell the caller, record it
                await self._record(handoff, "failed", ok=False, error=describe_error(e) or "timeout", waited_s=waited,
                             rest_ms=round((time.monotonic() - t0) * 1000), **record)
            else:
                await self._record(handoff, "redirected", ok=True, waited_s=waited,
                             rest_ms=round((time.monotonic() - t0) * 1000), **record)
                return
        try:
            await self.say(REDIRECT_FAILED_MESSAGE)
        except Exception:  # noqa: BLE001 - the caller is gone or the voice failed; the record stands
            LOG.warning("could not speak the failed-transfer message (session %s)", self.session, exc_info=True)

    async def _wait_for_mark(self, handoff_id: str, limit_s: float) -> float:
        """Seconds waited for the echo of the transfer mark (at most `limit_s`)."""
        t0 = time.monotonic()
        deadline = t0 + limit_s
        while handoff_id not in self._played and not self._stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except asyncio.TimeoutError:
                break
        return round(time.monotonic() - t0, 3)

    async def _record(self, handoff: Handoff, outcome: str, *, ok: bool, **fields: object) -> None:
        """One audit record and one log line per transfer, whatever the outcome."""
        rec: dict[str, object] = {"kind": "transfer_redirect", "ts": now(), "handoff_id": handoff.id,
                                  "session": self.session, "call_sid": self.call_sid, "ok": ok,
                                  "outcome": outcome, **fields}
        log_event("transfer_redirect", **{k: v for k, v in rec.items() if k not in ("kind", "ts")})
        if self.count is not None:
            self.count(outcome)
        if self.audit is not None:
            try:
                await asyncio.to_thread(self.audit.append, rec)  # fsync'd: off the event loop
            except OSError:
                LOG.exception("could not write the transfer record of handoff %s", handoff.id)
