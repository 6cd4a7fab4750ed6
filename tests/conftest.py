"""Shared fixtures. PostgreSQL (marker pg): the database is $VOICE_AGENT_TEST_PG, else the one
`scripts/setup.sh --test` started (its URL in .cache/pg/url), else the local default; each test gets
a schema of its own, dropped afterwards, so tests and other users of the database never meet.

An unreachable database skips the pg tests with the reason, except where CI or
VOICE_AGENT_REQUIRE_PG is set (scripts/test.sh sets it): there they fail."""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


def pg_base_url() -> str:
    if os.environ.get("VOICE_AGENT_TEST_PG"):
        return os.environ["VOICE_AGENT_TEST_PG"]
    started = ROOT / ".cache" / "pg" / "url"
    if started.exists() and started.read_text().strip():
        return started.read_text().strip()
    return DEFAULT_PG


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The database URL, checked once per session."""
    url = pg_base_url()
    try:
        import psycopg  # only the pg tests need the driver

        with psycopg.connect(url, connect_timeout=5):
            pass
    except Exception as exc:  # noqa: BLE001 - no driver, no server, no database: all "unreachable"
        why = f"PostgreSQL not reachable at {url}: {' '.join(str(exc).split())}"
        if os.environ.get("CI") or os.environ.get("VOICE_AGENT_REQUIRE_PG"):
            pytest.fail(f"{why} (required here: CI or VOICE_AGENT_REQUIRE_PG is set; see scripts/setup.sh --test)")
        pytest.skip(f"{why} (set VOICE_AGENT_TEST_PG, or run scripts/setup.sh --test)")
    return url


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A URL whose search_path is a fresh schema of this test's own."""
    import psycopg

    from policy.store_pg_schema import url_with_schema

    schema = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield url_with_schema(pg_server, schema)
    finally:
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
