"""Durable append-only JSONL files: the handoff packages and the per-turn audit log.

Each record is written with one write() of a full line and fsync'd before the call returns, so a
crash never leaves a transfer promised to a caller without its package on disk. A torn last line
(power loss mid-write) is closed with a newline before the next record, so it never swallows that
record; readers skip a bad line and go on. Text that cannot be encoded (a lone surrogate from a
client) is replaced, never allowed to fail the write."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Iterator, Mapping

from kb.jsontypes import JsonObject

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(str(path.resolve()), threading.Lock())


class JsonlStore:
    def __init__(self, path: str | Path, fsync: bool = True):
        self.path = Path(path)
        self.fsync = fsync

    def append(self, record: Mapping[str, object]) -> None:
        """A mapping; values json cannot write (a date, a Path) are written as their str()."""
        line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8", "replace")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _lock_for(self.path):
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if _torn(fd):
                    line = b"\n" + line  # a record always starts on a line of its own
                os.write(fd, line)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)

    def bad_lines(self) -> int:
        """Lines that are not a JSON record (torn by a crash): skipped by `read`, counted here."""
        if not self.path.exists():
            return 0
        with self.path.open("r", encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if line.strip() and not _parses(line))

    def read(self) -> Iterator[JsonObject]:
        """The records as written (a JSON object per line)."""
        if not self.path.exists():
            return
        with self.path.open("r", encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn line from a crash; the rest stays readable


def _torn(fd: int) -> bool:
    """Whether the file's last byte is not a newline (a write cut short)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _parses(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except json.JSONDecodeError:
        return False
