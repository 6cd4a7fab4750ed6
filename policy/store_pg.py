"""The PostgreSQL store (psycopg 3 with a connection pool), for several servers and desk agents
sharing one database.

Every write is one autocommit statement keyed by its id (`ON CONFLICT DO NOTHING`), so a retried
write is harmless and a handoff is committed when `append` returns. A new handoff NOTIFYs
`voice_agent_handoffs` in the same statement; `follow` LISTENs on a connection of its own. A claim is
one `UPDATE ... WHERE state = 'waiting'`: the row lock makes exactly one of two agents win; a call's
checkpoint is taken over the same way (`WHERE epoch = ...`). The
schema comes from the versioned files in policy/migrations (policy/store_pg_schema.py).

psycopg is imported inside functions: the default (JSONL) store never needs it installed."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

from kb.jsontypes import JsonObject

from .store_api import (HandoffRow, Outcome, StoreError, checkpoint_epoch, handoff_id, judge_claim, judge_close,
                        text_field)
from .store_pg_schema import CONNECT_TIMEOUT_S, connect, describe, has_timeout, migrate, one_line

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

CHANNEL = "voice_agent_handoffs"
_COLS = "id, team, state, claimed_by, claimed_at, closed_at, created_at, package"
_INSERT_HANDOFF = (
    "WITH ins AS (INSERT INTO handoffs (id, team, created_at, package)"
    " VALUES (%s, %s, COALESCE(%s::timestamptz, now()), %s::jsonb) ON CONFLICT (id) DO NOTHING RETURNING id, team)"
    " SELECT pg_notify('" + CHANNEL + "', json_build_object('id', id, 'team', team, 'schema', current_schema())::text)"
    " FROM ins")
_INSERT_AUDIT = ("INSERT INTO audit (id, turn_id, kind, record) VALUES (%s, %s, %s, %s::jsonb)"
                 " ON CONFLICT (id) DO NOTHING")
_LIST = ("SELECT * FROM (SELECT " + _COLS + " FROM handoffs WHERE (%s::text IS NULL OR team = %s)"
         " AND (%s::text IS NULL OR state = %s) ORDER BY created_at DESC, id DESC LIMIT %s) t ORDER BY created_at, id")
_CLAIM = ("UPDATE handoffs SET state = 'claimed', claimed_by = %s, claimed_at = now()"
          " WHERE id = %s AND state = 'waiting' RETURNING " + _COLS)
_CLOSE = ("UPDATE handoffs SET state = 'closed', closed_at = now() WHERE id = %s AND state = 'claimed'"
          " AND (%s::text IS NULL OR claimed_by = %s) RETURNING " + _COLS)
_PUT_CHECKPOINT = ("INSERT INTO checkpoints (call_id, epoch, state) VALUES (%s, %s, %s::jsonb) ON CONFLICT (call_id)"
                   " DO UPDATE SET state = EXCLUDED.state, epoch = EXCLUDED.epoch, updated_at = now()"
                   " WHERE checkpoints.epoch <= EXCLUDED.epoch RETURNING call_id")
# The row lock orders two swaps from one epoch; the second sees the first's epoch and matches nothing.
# The same swap again (retried after a broken connection) finds its own state and still wins.
_SWAP_CHECKPOINT = ("UPDATE checkpoints SET state = %s::jsonb, epoch = %s, updated_at = now()"
                    " WHERE call_id = %s AND (epoch = %s OR (epoch = %s AND state = %s::jsonb)) RETURNING call_id")

Params = Sequence[object]


class PgStore:
    """Open with `PgStore(url)`: checks the database answers and applies pending migrations first."""

    def __init__(self, url: str, *, max_connections: int = 4):
        self.url = url
        self._where = describe(url)
        with connect(url) as conn:
            migrate(conn, self._where)
        self._pool = _pool(url, max_connections, self._where)
        self.handoffs = _Log(self, "handoffs")
        self.audit = _Log(self, "audit")
        self.wait_s = 0.25  # how long `follow` waits for a notification before looking at `until`

    def where(self) -> str:
        return self._where

    def _run(self, query: str, params: Params = ()) -> list[tuple[object, ...]]:
        """One statement on a pooled (autocommit) connection; its rows, if it returns any. A broken
        connection is retried once: every write is keyed by its id, so running it twice is safe."""
        import psycopg  # lazily: only a PostgreSQL store needs it

        for attempt in (1, 2):
            try:
                with self._pool.connection() as conn:
                    cur = conn.execute(query.encode(), params)
                    return list(cur.fetchall()) if cur.description else []
            except psycopg.OperationalError as exc:
                if attempt == 2:
                    raise StoreError(f"PostgreSQL at {self._where}: {one_line(exc)}") from None
            except psycopg.Error as exc:
                raise StoreError(f"PostgreSQL at {self._where}: {one_line(exc)}") from None
        return []

    # -- the engine's writes ---------------------------------------------------------------
    def append_handoff(self, record: Mapping[str, object]) -> None:
        hid = handoff_id(record)
        self._run(_INSERT_HANDOFF, (hid, text_field(record, "team"), _timestamp(record.get("created_at")),
                                    json_text(record)))

    def append_audit(self, record: Mapping[str, object]) -> None:
        key, turn, kind = audit_key(record)
        self._run(_INSERT_AUDIT, (key, turn, kind, json_text(record)))

    def records(self, table: str) -> Iterator[JsonObject]:
        column = {"handoffs": "package", "audit": "record"}[table]
        for (value,) in self._run(f"SELECT {column} FROM {table} ORDER BY created_at, id"):
            if isinstance(value, dict):
                yield value

    # -- the desk --------------------------------------------------------------------------
    def read_handoffs(self, team: str | None = None, state: str | None = None, last: int = 0) -> list[HandoffRow]:
        return [_row(r) for r in self._run(_LIST, (team, team, state, state, last if last > 0 else None))]

    def _get(self, hid: str) -> HandoffRow | None:
        rows = self._run(f"SELECT {_COLS} FROM handoffs WHERE id = %s", (hid,))
        return _row(rows[0]) if rows else None

    def claim(self, handoff_id: str, agent: str) -> Outcome:
        return self._move(handoff_id, _CLAIM, (agent, handoff_id), lambda row: judge_claim(handoff_id, row, agent))

    def close(self, handoff_id: str, agent: str | None = None) -> Outcome:
        return self._move(handoff_id, _CLOSE, (handoff_id, agent, agent),
                          lambda row: judge_close(handoff_id, row, agent))

    def _move(self, handoff_id: str, sql: str, params: Params,
              judge: Callable[[HandoffRow | None], Outcome | None]) -> Outcome:
        """One lifecycle step as one UPDATE; when it changes nothing, the row as it now stands says
        why (tried again if the row changed in between)."""
        for _ in range(3):
            rows = self._run(sql, params)
            if rows:
                return Outcome(True, row=_row(rows[0]))
            verdict = judge(self._get(handoff_id))
            if verdict is not None:
                return verdict
        return Outcome(False, f"handoff {handoff_id} is changing under us; try again")

    def follow(self, team: str | None = None, until: threading.Event | None = None) -> Iterator[HandoffRow]:
        import psycopg  # lazily: only a PostgreSQL store needs it

        try:
            with connect(self.url) as conn:
                yield from self._follow(conn, team, until)
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL at {self._where}: {one_line(exc)}") from None

    def _follow(self, conn: "psycopg.Connection[tuple[object, ...]]", team: str | None,
                until: threading.Event | None) -> Iterator[HandoffRow]:
        """LISTEN first, then the waiting ones: a handoff written in between is in both, and yielded once."""
        conn.execute(f"LISTEN {CHANNEL}")
        schema_row = conn.execute("SELECT current_schema()").fetchone()
        schema = schema_row[0] if schema_row else None
        seen: set[str] = set()
        waiting = conn.execute(_LIST.encode(), (team, team, "waiting", "waiting", None)).fetchall()
        for row in map(_row, waiting):
            seen.add(row.id)
            yield row
        while until is None or not until.is_set():
            ids = []
            for note in conn.notifies(timeout=self.wait_s, stop_after=1):
                payload = _payload(note.payload)
                hid = text_field(payload, "id")
                if (payload.get("schema") == schema and hid and hid not in seen
                        and (team is None or payload.get("team") == team)):
                    ids.append(hid)
            if ids:
                found = conn.execute(f"SELECT {_COLS} FROM handoffs WHERE id = ANY(%s) ORDER BY created_at, id",
                                     (ids,)).fetchall()
                for row in map(_row, found):
                    seen.add(row.id)
                    yield row

    # -- checkpoints -----------------------------------------------------------------------
    def put_checkpoint(self, call_id: str, state: Mapping[str, object]) -> bool:
        return bool(self._run(_PUT_CHECKPOINT, (call_id, checkpoint_epoch(state), json_text(state))))

    def swap_checkpoint(self, call_id: str, epoch: int, state: Mapping[str, object]) -> bool:
        text, new = json_text(state), checkpoint_epoch(state)
        return bool(self._run(_SWAP_CHECKPOINT, (text, new, call_id, epoch, new, text)))

    def get_checkpoint(self, call_id: str) -> JsonObject | None:
        rows = self._run("SELECT state FROM checkpoints WHERE call_id = %s", (call_id,))
        return rows[0][0] if rows and isinstance(rows[0][0], dict) else None

    def shutdown(self) -> None:
        self._pool.close()


class _Log:
    """`engine.handoffs` / `engine.audit` over PostgreSQL: append and read, like JsonlStore."""

    def __init__(self, store: PgStore, table: str):
        self.store, self.table = store, table

    def append(self, record: Mapping[str, object]) -> None:
        if self.table == "handoffs":
            self.store.append_handoff(record)
        else:
            self.store.append_audit(record)

    def read(self) -> Iterator[JsonObject]:
        return self.store.records(self.table)


def _pool(url: str, max_connections: int, where: str) -> "ConnectionPool":
    from psycopg_pool import ConnectionPool, PoolTimeout  # lazily: only a PostgreSQL store needs it

    kwargs: dict[str, object] = {"autocommit": True}
    if not has_timeout(url):
        kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
    pool = ConnectionPool(url, min_size=1, max_size=max_connections, kwargs=kwargs, open=False,
                          name="voice-agent-store", timeout=10.0)
    try:
        pool.open(wait=True, timeout=10.0)
    except PoolTimeout:
        pool.close()
        raise StoreError(f"cannot reach PostgreSQL at {where}: no connection within 10 s") from None
    return pool


def json_text(record: Mapping[str, object]) -> str:
    """The record as JSON jsonb accepts: values json cannot write become their str() (as in the JSONL
    store), text that cannot be encoded becomes "?", and NUL (which jsonb refuses) becomes U+FFFD."""
    text = json.dumps(dict(record), ensure_ascii=False, default=str)
    return text.encode("utf-8", "replace").decode("utf-8").replace("\\u0000", "\\ufffd")


def audit_key(record: Mapping[str, object]) -> tuple[str, str | None, str]:
    """(row id, turn id, kind). A turn's own record is keyed by its turn id; the lines written about
    it later (timings, superseded, a failed recheck) by turn id, kind and their content, so none
    displaces the turn, and a retried write of any of them is still one row."""
    turn = record.get("audit_id")
    turn_id = turn if isinstance(turn, str) and turn else None
    kind = text_field(record, "kind") or "record"
    if kind == "turn" and turn_id:
        return turn_id, turn_id, kind
    digest = hashlib.sha256(json.dumps(dict(record), sort_keys=True, default=str).encode("utf-8", "replace"))
    return f"{turn_id or '-'}:{kind}:{digest.hexdigest()[:24]}", turn_id, kind


def _timestamp(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)


def _iso(value: object) -> str | None:
    return value.isoformat() if isinstance(value, dt.datetime) else None


def _row(r: tuple[object, ...]) -> HandoffRow:
    hid, team, state, by, claimed_at, closed_at, created_at, package = r
    return HandoffRow(id=str(hid), team=str(team), state=str(state), claimed_by=by if isinstance(by, str) else None,
                      claimed_at=_iso(claimed_at), closed_at=_iso(closed_at), created_at=_iso(created_at) or "",
                      package=package if isinstance(package, dict) else {})


def _payload(text: str) -> JsonObject:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
