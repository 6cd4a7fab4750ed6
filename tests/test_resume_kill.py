"""Kill one server, the call goes on on the other: two real `run.py serve` processes on loopback
share one PostgreSQL schema (`--store`). A typed call on one gets a clarifying question; that
server is SIGKILLed as the question reaches the caller; the real client resumes the call on the
other server with its resume token and answers the question, and the answer is read as the answer
to it; then the caller asks for a person and is transferred. PostgreSQL then holds every turn's
audit record and the handoff exactly once. Ten times in a row, killing each server in turn (the
killed one restarts while the call goes on elsewhere); the figures are printed."""
from __future__ import annotations

import asyncio
import collections
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from voice_agent.bench_load import start_server, stop_server
from voice_agent.client import CallResult, stream_call

pytestmark = [pytest.mark.server, pytest.mark.pg, pytest.mark.audio, pytest.mark.slow]

KB = str(Path(__file__).resolve().parent.parent / "fixtures" / "kb")
RUNS = 10
# tests/test_server_e2e.py test_caller_facets_and_clarify_continuity: the question needs the customer type
TEXTS = ["How much does a replacement SIM cost?", "I'm a business customer.", "I want to speak to a human"]


class Server:
    """One `run.py serve` process on the shared store, restartable on a fresh port."""

    def __init__(self, state: Path, store: str):
        self.state, self.store = state, store
        state.mkdir()
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> None:
        self.proc, self.port = start_server(KB, self.state, max_calls=None, asr_model="tiny.en",
                                            extra=["--store", self.store, "--tts-workers", "1"])

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/call"


def _rows(pg_url: str, call_id: str) -> tuple[list[dict], list[dict], dict | None]:
    """(turn audit records, handoff packages, checkpoint) of one call, as PostgreSQL has them."""
    import psycopg  # the pg marker's driver

    with psycopg.connect(pg_url) as conn:
        turns = [r for (r,) in conn.execute("SELECT record FROM audit WHERE kind = 'turn' AND record->>'session' = %s"
                                            " ORDER BY created_at", (call_id,))]
        handoffs = [p for (p,) in conn.execute("SELECT package FROM handoffs WHERE package->>'session' = %s",
                                               (call_id,))]
        cp = conn.execute("SELECT state FROM checkpoints WHERE call_id = %s", (call_id,)).fetchone()
    return turns, handoffs, cp[0] if cp else None


def _one_run(first: Server, second: Server, pg_url: str) -> tuple[CallResult, threading.Thread, dict]:
    """The call starts on `first`, which is killed when the clarifying question arrives and
    restarted (in a thread) while the call goes on on `second`. Also returns the checkpoint the
    killed server left."""
    restart = threading.Thread(target=first.start)
    left: dict = {}
    ready: dict = {}

    def kill_at_clarify(ev: dict) -> None:
        if ev.get("type") == "ready":
            ready.setdefault("call_id", ev["call_id"])
        if ev.get("type") == "decision" and not restart.ident:  # the first decision only
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(10)  # dead before the client sends its next turn
            left.update(_rows(pg_url, ready["call_id"])[2] or {})
            restart.start()

    res = asyncio.run(stream_call(first.url, texts=TEXTS, resume_urls=[second.url], realtime=False,
                                  on_event=kill_at_clarify, timeout_s=120))
    return res, restart, left


def test_a_call_survives_the_kill_of_its_server_ten_times(pg_url, tmp_path, capsys):
    servers = [Server(tmp_path / "a", pg_url), Server(tmp_path / "b", pg_url)]
    for s in servers:
        s.start()
    resumed, lost, doubled, handoffs_lost, handoffs_doubled = 0, 0, 0, 0, 0
    try:
        for run in range(RUNS):
            first, second = servers[run % 2], servers[1 - run % 2]  # kill A and B alternately
            urls = [first.url, second.url]  # the killed one comes back on another port
            res, restart, left = _one_run(first, second, pg_url)
            restart.join(180)
            assert first.proc.poll() is None, f"run {run}: the killed server did not come back"
            actions = [d["action"] for d in res.decisions]
            assert actions == ["clarify", "answer", "transfer"], (run, actions, res.errors)
            assert "customer_type" in res.decisions[0]["missing_information"]
            assert any(c["doc_id"] == "sim-replacement-business" for c in res.decisions[1]["citations"])
            assert res.urls == urls and res.close_code == 1000 and not res.errors
            resumed += res.resumes == 1
            # what the killed server had checkpointed before its clarifying question went out
            assert left["epoch"] == 0 and left["session"]["pending_question"] == TEXTS[0]
            assert left["session"]["pending_facets"] == ["customer_type"] and left["session"]["turns"] == 1

            turns, handoffs, checkpoint = _rows(pg_url, res.call_id)
            seen = collections.Counter(t["turn"] for t in turns)
            lost += sum(1 for n in (1, 2, 3) if not seen[n])
            doubled += sum(c - 1 for c in seen.values() if c > 1) + sum(1 for n in seen if n not in (1, 2, 3))
            assert [t["decision"]["message"] for t in turns] == [d["message"] for d in res.decisions]
            assert [t["question"] for t in turns] == TEXTS and {t["role"] for t in turns} == {"public"}
            ids = [h["id"] for h in handoffs]
            handoffs_lost += not ids
            handoffs_doubled += max(0, len(ids) - 1)
            assert ids == [res.transfers[0]["id"]]
            assert checkpoint["epoch"] == 1 and checkpoint["transferred"] and checkpoint["session"]["turns"] == 3
            assert checkpoint["owner"].split(":")[1] == str(second.proc.pid)  # the call is pinned to its new server
    finally:
        codes = [stop_server(s.proc) for s in servers if s.proc is not None]
    with capsys.disabled():
        print(f"\nresume after kill -9: resumed {resumed}/{RUNS}, audit rows lost {lost}, doubled {doubled}, "
              f"handoffs lost {handoffs_lost}, doubled {handoffs_doubled}")
    assert (resumed, lost, doubled, handoffs_lost, handoffs_doubled) == (RUNS, 0, 0, 0, 0)
    assert codes == [0, 0]
