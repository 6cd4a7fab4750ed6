"""What every handoff/audit store offers, whichever keeps the data: the embedded JSONL files
(policy/store_embedded.py, the default) or PostgreSQL (policy/store_pg.py).

A handoff is `waiting` when written, `claimed` by one desk agent, then `closed`. The engine writes
through the two append-only logs (`handoffs`, `audit`); the desk (`run.py handoffs`) lists, follows,
claims and closes; `put_checkpoint`/`get_checkpoint`/`swap_checkpoint` keep a call's state by call
id, fenced by its epoch so that a resumed call has one owner."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Protocol

from kb.jsontypes import JsonObject

STATES = ("waiting", "claimed", "closed")


class StoreError(OSError):
    """A store that cannot be opened, reached or written: one line, said to the user as is. An
    OSError, like the disk errors the JSONL store raises, so callers handle both alike."""


@dataclass
class HandoffRow:
    """One handoff package with where it stands at the desk."""

    id: str
    team: str
    created_at: str
    package: JsonObject
    state: str = "waiting"
    claimed_by: str | None = None
    claimed_at: str | None = None
    closed_at: str | None = None

    def desk(self) -> JsonObject:
        """The lifecycle fields, as `run.py handoffs --json` adds them beside the package."""
        return {"state": self.state, "claimed_by": self.claimed_by, "claimed_at": self.claimed_at,
                "closed_at": self.closed_at}


@dataclass
class Outcome:
    """What a claim or close did: `ok`, else `why` not (one line for the desk agent)."""

    ok: bool
    why: str = ""
    row: HandoffRow | None = field(default=None)


class RecordLog(Protocol):
    """An append-only log of JSON records (`JsonlStore` is one)."""

    def append(self, record: Mapping[str, object]) -> None: ...

    def read(self) -> Iterator[JsonObject]: ...


class HandoffStore(Protocol):
    """The engine writes `handoffs` (a package is durable when `append` returns, before the caller
    hears "transferring you") and `audit` (one record per turn, plus late lines about it)."""

    @property
    def handoffs(self) -> RecordLog: ...

    @property
    def audit(self) -> RecordLog: ...

    def where(self) -> str:
        """Where the data lives, for messages (a PostgreSQL password is masked)."""
        ...

    def read_handoffs(self, team: str | None = None, state: str | None = None, last: int = 0) -> list[HandoffRow]:
        """Handoffs oldest first, optionally of one team and state; `last` keeps the newest N."""
        ...

    def claim(self, handoff_id: str, agent: str) -> Outcome:
        """Take a waiting handoff; never two agents for one handoff. Claiming it again as the same
        agent is ok (a retried command)."""
        ...

    def close(self, handoff_id: str, agent: str | None = None) -> Outcome:
        """Close a claimed handoff (as its agent, when `agent` is given). Closing twice is ok."""
        ...

    def follow(self, team: str | None = None, until: threading.Event | None = None) -> Iterator[HandoffRow]:
        """The waiting handoffs, then each new one as it is written, until `until` is set."""
        ...

    def put_checkpoint(self, call_id: str, state: Mapping[str, object]) -> bool:
        """Keep the latest state of a call (replaces the previous one), unless the stored state has
        a higher epoch (`checkpoint_epoch`): another server has taken the call over, and this write
        from the one that lost it is refused (False)."""
        ...

    def swap_checkpoint(self, call_id: str, epoch: int, state: Mapping[str, object]) -> bool:
        """Replace a call's state only if the stored one is at `epoch` (compare-and-set): of
        several servers resuming a call from the same epoch, exactly one gets True."""
        ...

    def get_checkpoint(self, call_id: str) -> JsonObject | None:
        """The latest state of a call, None if none was kept."""
        ...

    def shutdown(self) -> None:
        """Release connections (a no-op for files)."""
        ...


def checkpoint_epoch(state: Mapping[str, object]) -> int:
    """A checkpoint's epoch: its owner's generation (0 where the call started, +1 per resume)."""
    value = state.get("epoch", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def handoff_id(record: Mapping[str, object]) -> str:
    """A package's id; the store's key, so a retried write is one handoff."""
    value = record.get("id")
    if not isinstance(value, str) or not value:
        raise StoreError("a handoff package needs a non-empty string 'id'")
    return value


def text_field(record: Mapping[str, object], key: str) -> str:
    value = record.get(key)
    return value if isinstance(value, str) else ""


def judge_claim(hid: str, row: HandoffRow | None, agent: str) -> Outcome | None:
    """The answer to a claim that needs no write; None when the handoff is waiting (claim it)."""
    if row is None:
        return Outcome(False, f"unknown handoff id {hid!r}")
    if row.state == "claimed":
        if row.claimed_by == agent:
            return Outcome(True, row=row)  # the same agent again: a retried command
        return Outcome(False, f"handoff {hid} is already claimed by {row.claimed_by}", row)
    if row.state == "closed":
        return Outcome(False, f"handoff {hid} is already closed", row)
    return None


def judge_close(hid: str, row: HandoffRow | None, agent: str | None) -> Outcome | None:
    """The answer to a close that needs no write; None when the handoff is claimed (by `agent`)."""
    if row is None:
        return Outcome(False, f"unknown handoff id {hid!r}")
    if row.state == "closed":
        return Outcome(True, row=row)
    if row.state == "waiting":
        return Outcome(False, f"handoff {hid} is waiting; claim it before closing it", row)
    if agent is not None and row.claimed_by != agent:
        return Outcome(False, f"handoff {hid} is claimed by {row.claimed_by}, not {agent}", row)
    return None
