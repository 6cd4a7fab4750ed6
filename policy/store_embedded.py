"""The default store: JSONL files under the state directory, nothing to install or run.

`handoffs.jsonl` and `audit.jsonl` are exactly what the engine always wrote (policy/store.py). The
desk's lifecycle (claimed, closed) goes to `handoff_events.jsonl`, one event per line, written only
under an exclusive `flock` of that file, so two desk processes never claim the same handoff: each
decides on the events it reads while holding the lock. `follow` tails `handoffs.jsonl`. A call's
checkpoint is one file under `checkpoints/`, replaced whole, under a lock of that folder."""
from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from kb.jsontypes import JsonObject

from .store import JsonlStore
from .store_api import HandoffRow, Outcome, StoreError, checkpoint_epoch, judge_claim, judge_close, text_field

_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


class EmbeddedStore:
    def __init__(self, state_dir: str | Path, fsync: bool = True):
        self.state_dir = Path(state_dir)
        self.fsync = fsync
        self.handoffs = JsonlStore(self.state_dir / "handoffs.jsonl", fsync)
        self.audit = JsonlStore(self.state_dir / "audit.jsonl", fsync)
        self.events = JsonlStore(self.state_dir / "handoff_events.jsonl", fsync)
        self.poll_s = 0.01  # how often `follow` looks at the file's size (a stat, no read)

    def where(self) -> str:
        return str(self.handoffs.path)

    # -- reading ---------------------------------------------------------------------------
    def read_handoffs(self, team: str | None = None, state: str | None = None, last: int = 0) -> list[HandoffRow]:
        rows = [r for r in self._rows().values()
                if (team is None or r.team == team) and (state is None or r.state == state)]
        return rows[-last:] if last > 0 else rows

    def _rows(self) -> dict[str, HandoffRow]:
        """Every package once (the first line of an id wins), with its events applied in order."""
        rows: dict[str, HandoffRow] = {}
        for record in self.handoffs.read():
            row = _row(record)
            if row is not None and row.id not in rows:
                rows[row.id] = row
        for ev in self.events.read():
            row = rows.get(text_field(ev, "id"))
            if row is None:
                continue
            if ev.get("event") == "claimed":
                row.state, row.claimed_by, row.claimed_at = "claimed", text_field(ev, "agent"), text_field(ev, "at")
            elif ev.get("event") == "closed":
                row.state, row.closed_at = "closed", text_field(ev, "at")
        return rows

    # -- the desk's writes -----------------------------------------------------------------
    def _unknown(self, handoff_id: str) -> Outcome | None:
        """Before any lock: with no handoffs file there is nothing to claim (and nothing is created)."""
        return None if self.handoffs.path.exists() else Outcome(False, f"unknown handoff id {handoff_id!r}")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock across processes (and across stores in one process: flock is per open file)."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.events.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise StoreError(f"{self.events.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def claim(self, handoff_id: str, agent: str) -> Outcome:
        if (unknown := self._unknown(handoff_id)) is not None:
            return unknown
        with self._locked():
            row = self._rows().get(handoff_id)
            if (verdict := judge_claim(handoff_id, row, agent)) is not None or row is None:
                return verdict or Outcome(False, f"unknown handoff id {handoff_id!r}")
            at = _now()
            self.events.append({"id": handoff_id, "event": "claimed", "agent": agent, "at": at})
            row.state, row.claimed_by, row.claimed_at = "claimed", agent, at
            return Outcome(True, row=row)

    def close(self, handoff_id: str, agent: str | None = None) -> Outcome:
        if (unknown := self._unknown(handoff_id)) is not None:
            return unknown
        with self._locked():
            row = self._rows().get(handoff_id)
            if (verdict := judge_close(handoff_id, row, agent)) is not None or row is None:
                return verdict or Outcome(False, f"unknown handoff id {handoff_id!r}")
            at = _now()
            self.events.append({"id": handoff_id, "event": "closed", "agent": agent or row.claimed_by, "at": at})
            row.state, row.closed_at = "closed", at
            return Outcome(True, row=row)

    # -- following -------------------------------------------------------------------------
    def follow(self, team: str | None = None, until: threading.Event | None = None) -> Iterator[HandoffRow]:
        path = self.handoffs.path
        offset = _size(path)  # before the replay: what is written meanwhile is tailed (and de-duplicated)
        seen: set[str] = set()
        for row in self.read_handoffs(team, "waiting"):
            seen.add(row.id)
            yield row
        pending = b""  # a line whose newline has not been written yet
        while until is None or not until.is_set():
            size = _size(path)
            if size < offset:  # the file was replaced: read the new one from its start
                offset, pending = 0, b""
            if size == offset:
                if until is not None:
                    until.wait(self.poll_s)
                else:
                    time.sleep(self.poll_s)
                continue
            with path.open("rb") as f:
                f.seek(offset)
                chunk = f.read(size - offset)
            offset += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                new = _row(_parse(line))
                if new is not None and new.id not in seen and (team is None or new.team == team):
                    seen.add(new.id)
                    yield new

    # -- checkpoints -----------------------------------------------------------------------
    def _checkpoint_path(self, call_id: str) -> Path:
        name = call_id if _SAFE_NAME.match(call_id) else hashlib.sha256(call_id.encode()).hexdigest()
        return self.state_dir / "checkpoints" / f"{name}.json"

    def put_checkpoint(self, call_id: str, state: Mapping[str, object]) -> bool:
        with self._checkpoints_locked():
            current = self.get_checkpoint(call_id)
            if current is not None and checkpoint_epoch(current) > checkpoint_epoch(state):
                return False  # the call has moved to another server
            self._write_checkpoint(call_id, state)
            return True

    def swap_checkpoint(self, call_id: str, epoch: int, state: Mapping[str, object]) -> bool:
        with self._checkpoints_locked():
            current = self.get_checkpoint(call_id)
            if current is None or (checkpoint_epoch(current) != epoch and dict(state) != current):
                return False  # unknown, or another server took it first (the same swap again wins)
            self._write_checkpoint(call_id, state)
            return True

    @contextmanager
    def _checkpoints_locked(self) -> Iterator[None]:
        """Checkpoint writes of every process sharing the directory, one at a time (they are short)."""
        folder = self.state_dir / "checkpoints"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"{folder}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write_checkpoint(self, call_id: str, state: Mapping[str, object]) -> None:
        """Written whole to a temporary file, then renamed: a reader sees the old or the new state."""
        path = self._checkpoint_path(call_id)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        data = json.dumps({"call_id": call_id, "updated_at": _now(), "state": dict(state)},
                          ensure_ascii=False, default=str).encode("utf-8", "replace")
        with tmp.open("wb") as f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)

    def get_checkpoint(self, call_id: str) -> JsonObject | None:
        path = self._checkpoint_path(call_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        data = _parse(raw)
        state = data.get("state") if data and data.get("call_id") == call_id else None
        return state if isinstance(state, dict) else None

    def shutdown(self) -> None:
        pass


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _parse(line: bytes) -> JsonObject | None:
    try:
        value = json.loads(line.decode("utf-8", "replace"))
    except json.JSONDecodeError:
        return None  # a line torn by a crash: skipped, as JsonlStore.read does
    return value if isinstance(value, dict) else None


def _row(record: JsonObject | None) -> HandoffRow | None:
    if record is None or not text_field(record, "id"):
        return None
    return HandoffRow(id=text_field(record, "id"), team=text_field(record, "team"),
                      created_at=text_field(record, "created_at"), package=record)
