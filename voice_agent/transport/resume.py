"""Calls that outlive their connection: after every decided turn the server checkpoints the call in
the store (its conversation, role, the hash of its resume token and the epoch of the server that
owns it), so a client whose websocket dropped can reconnect to any server sharing the store and go
on (`start.resume`, docs/PROTOCOL.md).

A resume is a compare-and-set on the epoch: of two servers resuming one call, one wins and the
other answers `bad_resume`; the server that lost the call can no longer overwrite its checkpoint.
Only the token's sha256 is stored. Store calls block (a file write, a PostgreSQL round trip), so
the event loop runs them in a thread; turns already run in the call's worker thread."""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
import socket
import time
import uuid
from dataclasses import dataclass

from pydantic import BaseModel, ValidationError

from policy.decision import Action, Decision
from policy.session_state import SessionState

from .protocol import Resume
from .state import LOG, CheckpointStore, Fatal, log_event


class CallCheckpoint(BaseModel):
    """What the store keeps per call (keyed by `call_id`, the conversation's session id)."""

    call_id: str
    role: str  # the caller's role as the call began: a resume never takes it from the new start
    token_sha256: str
    epoch: int = 0  # 0 where the call began, +1 per resume; the store refuses older epochs' writes
    owner: str = ""  # the server process (host:pid) and take-over that wrote it
    transferred: bool = False  # a person has the call: there is nothing left to resume
    session: SessionState


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Checkpointer:
    """Writes one call's checkpoint; its `on_turn` is the call's turn hook (voice_agent/interfaces.py)."""

    def __init__(self, store: CheckpointStore, call_id: str, role: str, token_sha256: str, epoch: int = 0):
        self.store, self.call_id, self.role = store, call_id, role
        self.token_sha256, self.epoch, self.owner = token_sha256, epoch, _owner()
        self.lost = False  # another server has resumed the call

    def record(self, session: SessionState, transferred: bool = False) -> CallCheckpoint:
        return CallCheckpoint(call_id=self.call_id, role=self.role, token_sha256=self.token_sha256,
                              epoch=self.epoch, owner=self.owner, transferred=transferred, session=session)

    def save(self, session: SessionState, transferred: bool = False) -> bool:
        """Write the checkpoint (blocking). False when the store refused it: the call moved on."""
        ok = self.store.put_checkpoint(self.call_id, self.record(session, transferred).model_dump(mode="json"))
        if not ok and not self.lost:
            self.lost = True
            log_event("call_taken_over", call_id=self.call_id, epoch=self.epoch)
        return ok

    def on_turn(self, session: SessionState, decision: Decision) -> None:
        """After each decided turn; a store that fails costs the call its resume, not the turn."""
        try:
            self.save(session, transferred=decision.action == Action.transfer and decision.handoff is not None)
        except Exception as exc:  # noqa: BLE001 - StoreError, disk errors: the caller still hears the reply
            LOG.warning("checkpoint of call %s failed: %s", self.call_id, exc)


@dataclass
class Opening:
    """How a native call begins: its conversation, its resume token, and who checkpoints it."""

    state: SessionState
    token: str
    resumed: bool = False
    checkpointer: Checkpointer | None = None


async def open_new(store: CheckpointStore | None, role: str, facets: dict[str, str]) -> Opening:
    """A new call: a fresh resume token, and a first checkpoint, so the call can be resumed from
    `ready` on (a store that fails leaves the call going, without a resume)."""
    state = SessionState(role=role, facets=dict(facets))
    token = secrets.token_urlsafe(24)
    if store is None:
        return Opening(state, token)
    cp = Checkpointer(store, state.session_id, role, token_digest(token))
    try:
        await asyncio.to_thread(cp.save, state)
    except Exception as exc:  # noqa: BLE001 - the call itself does not need the store yet
        LOG.warning("first checkpoint of call %s failed: %s", state.session_id, exc)
    return Opening(state, token, checkpointer=cp)


async def open_resumed(store: CheckpointStore | None, req: Resume) -> Opening:
    """Take a call over from its checkpoint: the token must match, and this server must win the
    epoch's compare-and-set. Anything else ends the connection with `bad_resume`."""
    if store is None:
        raise Fatal("bad_resume", "this server keeps no call checkpoints; start a new call")
    t0 = time.perf_counter()
    try:
        raw = await asyncio.to_thread(store.get_checkpoint, req.call_id)
        found = CallCheckpoint.model_validate(raw) if raw is not None else None
    except ValidationError:
        found = None
    except OSError as exc:  # StoreError: the database went away
        raise Fatal("internal", f"cannot reach the call store to resume: {exc}", 1011) from None
    if found is None or not hmac.compare_digest(found.token_sha256, token_digest(req.token)):
        raise Fatal("bad_resume", "no call to resume with that call_id and token")
    if found.transferred:
        raise Fatal("bad_resume", f"call {req.call_id} was handed to a person; it cannot be resumed")
    cp = Checkpointer(store, found.call_id, found.role, found.token_sha256, epoch=found.epoch + 1)
    record = cp.record(found.session).model_dump(mode="json")
    try:
        won = await asyncio.to_thread(store.swap_checkpoint, found.call_id, found.epoch, record)
    except OSError as exc:
        raise Fatal("internal", f"cannot reach the call store to resume: {exc}", 1011) from None
    if not won:
        raise Fatal("bad_resume", f"call {req.call_id} was resumed on another server")
    log_event("call_resumed", call_id=found.call_id, epoch=cp.epoch, turns=found.session.turns,
              previous_owner=found.owner, ms=round((time.perf_counter() - t0) * 1000, 1))
    return Opening(found.session, req.token, resumed=True, checkpointer=cp)
