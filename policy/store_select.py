"""Which store keeps handoffs and the audit log: `--store URL`, else $VOICE_AGENT_STORE, else the
JSONL files under the state directory (nothing to install or run). `postgresql://...` is PostgreSQL;
`jsonl` names the default explicitly (to override the variable); anything else is an error."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from .store_api import HandoffStore, StoreError
from .store_embedded import EmbeddedStore

ENV = "VOICE_AGENT_STORE"
_PG_SCHEMES = ("postgresql://", "postgres://")


def add_store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="URL", default=None,
                   help=f"postgresql://USER@HOST:PORT/DB, or jsonl (default: ${ENV}, else JSONL files in --state-dir)")


def open_store(url: str | None, state_dir: str | Path) -> HandoffStore:
    """The store named by `url` (None: the environment's, else the default). A bad URL or a database
    that does not answer is a StoreError of one line."""
    source = "--store" if url is not None else f"${ENV}"
    url = (url if url is not None else os.environ.get(ENV, "")).strip()
    if url in ("", "jsonl"):
        return EmbeddedStore(state_dir)
    if url.startswith(_PG_SCHEMES):
        from .store_pg import PgStore  # lazily: psycopg is needed only for PostgreSQL

        return PgStore(url)
    raise StoreError(f"{source} {url!r}: not a store URL; use postgresql://USER@HOST:PORT/DB, "
                     "or jsonl for the files under the state directory")
