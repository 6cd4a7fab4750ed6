"""The real server with `--store postgresql://...`: a transfer's package is in PostgreSQL before
the transfer event reaches the caller, a desk following the store sees it, and the server exits
cleanly with its connection pool closed."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from voice_agent.bench_load import start_server, stop_server
from voice_agent.client import stream_call

pytestmark = [pytest.mark.pg, pytest.mark.server, pytest.mark.audio, pytest.mark.slow]

KB = str(Path(__file__).resolve().parent.parent / "fixtures" / "kb")


def test_a_transfer_over_the_wire_lands_in_postgresql(pg_url, tmp_path):
    from policy.store_pg import PgStore

    desk = PgStore(pg_url)
    seen, stop = [], threading.Event()
    follower = threading.Thread(target=lambda: seen.extend(desk.follow(until=stop)), daemon=True)
    follower.start()
    proc, port = start_server(KB, tmp_path, max_calls=None, asr_model="tiny.en", extra=["--store", pg_url])
    try:
        res = asyncio.run(stream_call(f"ws://127.0.0.1:{port}/v1/call", texts=["I want to speak to a human"],
                                      realtime=False, timeout_s=60))
        [h] = res.transfers
        rows = {r.id: r for r in desk.read_handoffs()}
        assert h["id"] in rows and rows[h["id"]].state == "waiting" and rows[h["id"]].team == h["team"]
        assert any(r.get("kind") == "turn" for r in desk.audit.read())
    finally:
        assert stop_server(proc) == 0
        stop.set()
        follower.join(5)
        desk.shutdown()
    assert [r.id for r in seen] == [h["id"]]
    assert not (tmp_path / "handoffs.jsonl").exists()
