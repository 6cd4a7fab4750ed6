"""The PostgreSQL store against a real database (a schema of its own per test): idempotent writes,
a handoff committed before append returns, migrations applied once when two servers start
together, text jsonb would refuse, and one-line errors for a database that is not there."""
from __future__ import annotations

import socket
import threading

import pytest

from policy.store_api import StoreError
from policy.store_pg_schema import describe, migrations, url_with_schema


def _count(url: str, sql: str, *params: object) -> int:
    import psycopg

    with psycopg.connect(url) as conn:  # a connection of its own: sees only what is committed
        row = conn.execute(sql, params).fetchone()
        return int(row[0]) if row else 0


@pytest.fixture
def store(pg_url):
    from policy.store_pg import PgStore

    s = PgStore(pg_url)
    yield s
    s.shutdown()


@pytest.mark.pg
def test_a_handoff_is_committed_when_append_returns(store, pg_url):
    store.handoffs.append({"id": "h1", "team": "billing", "question": "a person please"})
    assert _count(pg_url, "SELECT count(*) FROM handoffs WHERE id = 'h1' AND state = 'waiting'") == 1


@pytest.mark.pg
def test_every_write_is_idempotent_by_its_id(store, pg_url):
    package = {"id": "h1", "team": "billing", "created_at": "2026-03-01T10:00:00+00:00", "question": "q"}
    store.handoffs.append(package)
    store.handoffs.append(package)  # a retried write
    store.handoffs.append({**package, "question": "changed"})  # the id decides, not the content
    turn = {"kind": "turn", "audit_id": "t1", "question": "q", "decision": {"action": "transfer"}}
    store.audit.append(turn)
    store.audit.append(turn)
    timings = {"kind": "timings", "audit_id": "t1", "timings_ms": {"asr": 120.0}}
    store.audit.append(timings)  # a later line about the same turn is kept beside it
    store.audit.append(timings)
    assert _count(pg_url, "SELECT count(*) FROM handoffs") == 1
    assert [p["question"] for p in store.handoffs.read()] == ["q"]
    assert _count(pg_url, "SELECT count(*) FROM audit WHERE turn_id = 't1'") == 2
    assert _count(pg_url, "SELECT count(*) FROM audit WHERE id = 't1' AND kind = 'turn'") == 1
    assert [r["kind"] for r in store.audit.read()] == ["turn", "timings"]
    assert store.read_handoffs()[0].created_at.startswith("2026-03-01T10:00:00")


@pytest.mark.pg
def test_text_jsonb_refuses_is_stored_replaced(store):
    store.handoffs.append({"id": "h1", "team": "t", "question": "agent please \ud800 and \x00"})
    assert store.read_handoffs()[0].package["question"] == "agent please ? and \ufffd"


@pytest.mark.pg
def test_two_stores_opening_at_once_apply_each_migration_once(pg_url):
    from policy.store_pg import PgStore

    barrier = threading.Barrier(4)
    opened, errors = [], []

    def open_one() -> None:
        barrier.wait(timeout=20)
        try:
            opened.append(PgStore(pg_url))
        except StoreError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not errors and len(opened) == 4
        assert _count(pg_url, "SELECT count(*) FROM schema_migrations") == len(migrations()) >= 1
        opened[0].handoffs.append({"id": "h1", "team": "t"})
        assert [r.id for r in opened[3].read_handoffs()] == ["h1"]
    finally:
        for s in opened:
            s.shutdown()
    from policy.store_pg_schema import connect, migrate

    with connect(pg_url) as conn:
        assert migrate(conn, "here") == []  # a restart applies nothing


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.unit
def test_a_database_that_is_not_there_is_one_line():
    from policy.store_pg import PgStore

    url = f"postgresql://postgres:secret@127.0.0.1:{_closed_port()}/test"
    with pytest.raises(StoreError) as err:
        PgStore(url)
    text = str(err.value)
    assert text.startswith("cannot reach PostgreSQL at postgresql://postgres:***@127.0.0.1:") and "\n" not in text
    assert "secret" not in text


@pytest.mark.unit
def test_url_helpers():
    assert describe("postgresql://u:pw@h:5/db") == "postgresql://u:***@h:5/db"
    assert describe("postgresql://u@h/db") == "postgresql://u@h/db"
    assert (url_with_schema("postgresql://u@h/db?sslmode=disable", "s1")
            == "postgresql://u@h/db?sslmode=disable&options=-csearch_path%3Ds1")


@pytest.mark.pg
@pytest.mark.slow
def test_the_store_bench_measures_both_stores(pg_server):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(root / "run.py"), "bench", "store", "--n", "5", "--gap-ms", "1",
                        "--store", pg_server, "--json"], capture_output=True, text=True, cwd=root, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert [r["store"] for r in out["results"]] == ["jsonl", "postgresql"]
    assert all(r["seen"] == 5 and r["desk_p95_ms"] < 5000 and r["write_p50_ms"] > 0 for r in out["results"])
    assert all(0 < r["checkpoint_p50_ms"] <= r["checkpoint_p95_ms"] for r in out["results"])
    assert out["cores"] >= 1 and len(out["load_average"]) == 3
