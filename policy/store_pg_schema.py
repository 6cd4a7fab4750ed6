"""Connecting to PostgreSQL and bringing its schema up to date.

The schema is the numbered SQL files in policy/migrations (`001_init.sql`, ...), shipped in the
package. Each is applied once, in order, and recorded in `schema_migrations`; the whole check runs in
one transaction under an advisory lock (per schema), so two servers starting together neither apply a
file twice nor trip over each other's half-created tables.

psycopg is imported inside functions: the default (JSONL) store never needs it installed."""
from __future__ import annotations

import re
import urllib.parse
from importlib import resources
from typing import TYPE_CHECKING

from .store_api import StoreError

if TYPE_CHECKING:
    import psycopg

_MIGRATION = re.compile(r"^(\d+)_(\w+)\.sql$")
CONNECT_TIMEOUT_S = 5


def one_line(exc: BaseException) -> str:
    """A driver's message on one line (libpq's span several, with tabs)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def describe(url: str) -> str:
    """The URL with its password masked, for messages and listings."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def url_with_schema(url: str, schema: str) -> str:
    """The URL with `search_path` set to one schema (a test's or a benchmark's own tables)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query)
    options = " ".join([v for k, v in query if k == "options"] + [f"-csearch_path={schema}"])
    query = [(k, v) for k, v in query if k != "options"] + [("options", options)]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query, quote_via=urllib.parse.quote)))


def connect(url: str) -> "psycopg.Connection[tuple[object, ...]]":
    """An autocommit connection; a database that does not answer is a StoreError of one line."""
    try:
        import psycopg  # lazily: only a PostgreSQL store needs it
    except ImportError:
        raise StoreError("the PostgreSQL store needs psycopg: pip install 'psycopg[binary]' psycopg-pool") from None
    try:
        if has_timeout(url):
            return psycopg.connect(url, autocommit=True)
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise StoreError(f"cannot reach PostgreSQL at {describe(url)}: {one_line(exc)}") from None


def has_timeout(url: str) -> bool:
    """Whether the URL sets its own connect timeout; without one we set ours, so that an
    unreachable host never hangs a command."""
    from psycopg.conninfo import conninfo_to_dict  # lazily: only a PostgreSQL store needs it

    try:
        return "connect_timeout" in conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - a malformed URL is reported by connect() itself, in one line
        return False


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, SQL) of every migration file in the package, in order."""
    found = []
    for entry in resources.files("policy").joinpath("migrations").iterdir():
        m = _MIGRATION.match(entry.name)
        if m:
            found.append((int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    return sorted(found)


def migrate(conn: "psycopg.Connection[tuple[object, ...]]", where: str) -> list[int]:
    """Apply the migrations not yet recorded; the versions applied now."""
    import psycopg  # lazily: only a PostgreSQL store needs it

    applied: list[int] = []
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('voice_agent.migrations:' "
                         "|| coalesce(current_schema(), '')))")
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
                         "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
            done = {int(str(v)) for (v,) in conn.execute("SELECT version FROM schema_migrations").fetchall()}
            for version, name, sql in migrations():
                if version not in done:
                    conn.execute(sql.encode("utf-8"))
                    conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
                    applied.append(version)
    except psycopg.Error as exc:
        raise StoreError(f"cannot set up the schema in PostgreSQL at {where}: {one_line(exc)}") from None
    return applied
