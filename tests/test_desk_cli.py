"""`run.py handoffs` as a desk agent uses it, in real processes: the listing as before, claim and
close with one-line refusals, --follow until Ctrl-C, bad store URLs; and `run.py ask --store`
writing a transfer's package and audit line to PostgreSQL."""
from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from policy.store import JsonlStore

ROOT = Path(__file__).resolve().parent.parent
KB = str(ROOT / "fixtures" / "kb")


def run(*argv: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**os.environ, **(env or {})})


def one_error(p: subprocess.CompletedProcess, says: str) -> None:
    """Non-zero, no traceback, and exactly one `error:` line saying `says`."""
    lines = [x for x in p.stderr.strip().splitlines() if x.strip()]
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], p.stderr


def _packages(state: Path) -> None:
    store = JsonlStore(state / "handoffs.jsonl", fsync=False)
    store.append({"id": "h1", "team": "billing", "created_at": "2026-03-01T10:00:00+00:00",
                  "reasons": ["human_requested"], "question": "Can I talk to a person?"})
    store.append({"id": "h2", "team": "fraud", "created_at": "2026-03-01T10:05:00+00:00",
                  "reasons": ["high_risk_topic"], "question": "My SIM was changed"})


@pytest.mark.unit
def test_listing_keeps_its_output_and_options(tmp_path):
    _packages(tmp_path)
    p = run("handoffs", "--state-dir", str(tmp_path))
    assert p.returncode == 0 and p.stdout.splitlines() == [
        "2026-03-01T10:00:00  h1  team=billing  reasons=human_requested  q='Can I talk to a person?'",
        "2026-03-01T10:05:00  h2  team=fraud  reasons=high_risk_topic  q='My SIM was changed'"]
    lines = run("handoffs", "--state-dir", str(tmp_path), "--json", "--last", "1").stdout.splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["h2"] and json.loads(lines[0])["desk"]["state"] == "waiting"
    assert run("handoffs", "--state-dir", str(tmp_path / "none")).stdout.startswith("no handoffs in ")
    assert not (tmp_path / "none").exists() and not (tmp_path / "handoff_events.jsonl").exists()


@pytest.mark.unit
def test_claim_and_close_at_the_desk(tmp_path):
    _packages(tmp_path)
    state = ("--state-dir", str(tmp_path))
    p = run("handoffs", "claim", "h1", "--agent", "alice", *state)
    assert p.returncode == 0 and p.stdout.strip() == "claimed h1 by alice (team billing)"
    one_error(run("handoffs", "claim", "h1", "--agent", "bob", *state), "handoff h1 is already claimed by alice")
    one_error(run("handoffs", "claim", "h9", "--agent", "bob", *state), "unknown handoff id 'h9'")
    one_error(run("handoffs", "close", "h2", *state), "claim it before closing it")
    assert run("handoffs", "--state", "claimed", *state).stdout.strip().endswith("[claimed by alice]")
    assert run("handoffs", "close", "h1", "--agent", "alice", *state).returncode == 0
    assert run("handoffs", "--state", "waiting", "--team", "fraud", *state).stdout.split()[1] == "h2"
    assert run("handoffs", "--state", "closed", *state).stdout.strip().endswith("[closed]")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.unit
@pytest.mark.parametrize("argv, says", [
    (["handoffs", "--store", "mysql://db/x"], "--store 'mysql://db/x': not a store URL"),
    (["handoffs", "claim", "h1", "--agent", "a", "--store", "redis://x"], "not a store URL"),
    (["handoffs", "--store", "postgresql://postgres@127.0.0.1:{port}/test"], "cannot reach PostgreSQL at"),
    (["ask", "--kb", KB, "--store", "postgresql://postgres@127.0.0.1:{port}/test", "hi"], "cannot reach PostgreSQL"),
    (["handoffs", "--last", "-2"], "--last -2: must be 0 (all) or more"),
    (["handoffs", "claim", "h1", "--agent", " "], "--agent must not be empty"),
])
def test_bad_store_input_is_one_line_and_non_zero(argv, says):
    port = str(_closed_port())
    one_error(run(*[a.replace("{port}", port) for a in argv]), says)


@pytest.mark.unit
def test_the_environment_variable_selects_the_store():
    one_error(run("handoffs", env={"VOICE_AGENT_STORE": "sqlite:///x"}), "$VOICE_AGENT_STORE 'sqlite:///x'")


def follow_until_ctrl_c(argv: list[str], write) -> tuple[list[str], subprocess.Popen]:
    """Start `run.py handoffs --follow`, call `write()` once it follows, read what it prints, Ctrl-C it."""
    # Ctrl-C as at a terminal, however the tests were started: a shell's background job (`cmd &`
    # without job control) inherits SIGINT ignored, and the desk would never see it
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "handoffs", "--follow", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        assert proc.stderr.readline().startswith("following handoffs")  # printed once it is listening
        first = lines.get(timeout=30)  # the waiting one, replayed
        write()
        second = lines.get(timeout=10)
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    return [first, second], proc


@pytest.mark.unit
def test_follow_streams_new_handoffs_and_stops_cleanly_on_ctrl_c(tmp_path):
    _packages(tmp_path)
    store = JsonlStore(tmp_path / "handoffs.jsonl")
    seen, proc = follow_until_ctrl_c(["--state-dir", str(tmp_path), "--team", "billing"],
                                     lambda: store.append({"id": "h3", "team": "billing", "question": "new one"}))
    assert [x.split("  ")[1] for x in seen] == ["h1", "h3"]
    assert proc.returncode == 0 and "Traceback" not in proc.stderr.read()


@pytest.mark.pg
def test_desk_on_postgresql(pg_url):
    from policy.store_pg import PgStore

    store = PgStore(pg_url)
    try:
        store.handoffs.append({"id": "h1", "team": "billing", "question": "waiting already"})
        seen, proc = follow_until_ctrl_c(["--store", pg_url],
                                         lambda: store.handoffs.append({"id": "h2", "team": "fraud", "question": "x"}))
    finally:
        store.shutdown()
    assert [x.split("  ")[1] for x in seen] == ["h1", "h2"] and proc.returncode == 0
    assert "Traceback" not in proc.stderr.read()
    assert run("handoffs", "claim", "h2", "--agent", "alice", "--store", pg_url).returncode == 0
    one_error(run("handoffs", "claim", "h2", "--agent", "bob", "--store", pg_url), "already claimed by alice")
    one_error(run("handoffs", "claim", "nope", "--agent", "bob", "--store", pg_url), "unknown handoff id 'nope'")
    listed = run("handoffs", "--store", pg_url, "--state", "claimed").stdout.splitlines()
    assert len(listed) == 1 and " h2 " in listed[0] and listed[0].endswith("[claimed by alice]")


@pytest.mark.pg
@pytest.mark.slow
def test_ask_with_a_postgresql_store_writes_the_transfer_there(pg_url, tmp_path):
    import psycopg

    p = run("ask", "--kb", KB, "--state-dir", str(tmp_path / "state"), "--store", pg_url,
            "I want to talk to a person", timeout=300)
    assert p.returncode == 0, p.stderr
    decision = json.loads(p.stdout)
    assert decision["action"] == "transfer"
    hid = decision["handoff"]["id"]
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT team, state, package FROM handoffs WHERE id = %s", (hid,)).fetchone()
        turns = conn.execute("SELECT record FROM audit WHERE kind = 'turn'").fetchall()
    assert row is not None and row[0] == decision["handoff"]["team"] and row[1] == "waiting"
    assert row[2]["question"] == "I want to talk to a person"
    assert len(turns) == 1 and turns[0][0]["decision"]["handoff"]["id"] == hid
    assert not (tmp_path / "state").exists()  # nothing went to the JSONL files
    listed = run("handoffs", "--store", pg_url)
    assert listed.returncode == 0 and f"  {hid}  team={row[0]}" in listed.stdout
