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


def test_bench_load_spreads_calls_over_two_servers_sharing_postgresql(pg_server):
    import json
    import subprocess
    import sys

    import psycopg

    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(root / "run.py"), "bench", "load", "--servers", "2", "--calls", "2",
                        "--compare", "--store", pg_server, "--json"], capture_output=True, text=True, cwd=root,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["servers"] == 2 and out["store"] == "postgresql" and out["errors"] == 0 and out["answered"] == 2
    assert [(s["server"], s["calls"], s["errors"], s["exit"]) for s in out["per_server"]] == [(1, 1, 0, 0), (2, 1, 0, 0)]
    assert all(s["turns_checkpointed"] >= 1 and s["checkpoint_p50_ms"] > 0 for s in out["per_server"])
    assert out["baseline"]["servers"] == 1 and out["baseline"]["errors"] == 0 and out["baseline"]["answered"] == 2
    assert "side by side, 2 calls" in p.stdout
    with psycopg.connect(pg_server) as conn:  # the run's own schema is gone
        assert not conn.execute("SELECT 1 FROM pg_namespace WHERE nspname LIKE 'bench_load_%'").fetchall()
