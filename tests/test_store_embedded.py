"""The default store: with no configuration the files and their lines are what they always were,
psycopg is never imported, two desk processes never claim one handoff, and follow skips a line
torn by a crash."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from policy.store import JsonlStore
from policy.store_api import StoreError
from policy.store_embedded import EmbeddedStore
from policy.store_select import open_store

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def test_no_configuration_changes_nothing_on_disk_and_imports_no_driver(tmp_path):
    code = """if True:
        import json, sys
        from policy.store_select import open_store
        from policy import cli_handoffs, engine
        store = open_store(None, sys.argv[1])
        store.handoffs.append({"id": "h1", "team": "billing", "question": "caf\\u00e9"})
        store.audit.append({"kind": "turn", "audit_id": "t1"})
        print(type(store).__name__, "psycopg" in sys.modules)
    """
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}  # no VOICE_AGENT_STORE
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=60)
    assert p.stdout.split() == ["EmbeddedStore", "False"], p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["audit.jsonl", "handoffs.jsonl"]
    reference = tmp_path / "ref.jsonl"
    JsonlStore(reference).append({"id": "h1", "team": "billing", "question": "café"})
    assert (tmp_path / "handoffs.jsonl").read_bytes() == reference.read_bytes()


def test_selecting_a_store(tmp_path, monkeypatch):
    monkeypatch.delenv("VOICE_AGENT_STORE", raising=False)
    assert isinstance(open_store(None, tmp_path), EmbeddedStore)
    monkeypatch.setenv("VOICE_AGENT_STORE", "jsonl")
    assert isinstance(open_store(None, tmp_path), EmbeddedStore)
    monkeypatch.setenv("VOICE_AGENT_STORE", "mongodb://x")
    with pytest.raises(StoreError, match=r"^\$VOICE_AGENT_STORE 'mongodb://x': not a store URL"):
        open_store(None, tmp_path)
    assert isinstance(open_store("jsonl", tmp_path), EmbeddedStore)  # the flag wins over the variable


def test_a_desk_on_an_empty_state_dir_creates_nothing(tmp_path):
    store = EmbeddedStore(tmp_path / "state")
    assert store.claim("h1", "alice").why == "unknown handoff id 'h1'" and not store.close("h1").ok
    assert store.read_handoffs() == [] and not (tmp_path / "state").exists()


def test_two_desk_processes_never_claim_the_same_handoff(tmp_path):
    store = EmbeddedStore(tmp_path, fsync=False)
    ids = [f"race{i}" for i in range(20)]
    for hid in ids:
        store.handoffs.append({"id": hid, "team": "billing"})
    start = time.time() + 1.0  # both processes begin together, then race through the same ids
    code = """if True:
        import json, sys, time
        from policy.store_embedded import EmbeddedStore
        store, agent, start = EmbeddedStore(sys.argv[1]), sys.argv[2], float(sys.argv[3])
        time.sleep(max(0.0, start - time.time()))
        print(json.dumps([i for i in range(20) if store.claim(f"race{i}", agent).ok]))
    """
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), agent, str(start)], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT) for agent in ("alice", "bob")]
    won = {agent: json.loads(p.communicate(timeout=60)[0]) for agent, p in zip(("alice", "bob"), procs)}
    assert sorted(won["alice"] + won["bob"]) == list(range(20)), won
    claims = [json.loads(x) for x in (tmp_path / "handoff_events.jsonl").read_text().splitlines()]
    assert len(claims) == 20 and len({c["id"] for c in claims}) == 20


def test_follow_skips_a_line_torn_by_a_crash(tmp_path):
    store = EmbeddedStore(tmp_path, fsync=False)
    stop = threading.Event()
    seen: list[str] = []

    def run() -> None:
        for row in store.follow(until=stop):
            seen.append(row.id)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.1)
    with (tmp_path / "handoffs.jsonl").open("ab") as f:
        f.write(b'{"id": "torn", "te')  # the writer died here
    time.sleep(0.1)
    store.handoffs.append({"id": "after", "team": "billing"})
    end = time.monotonic() + 5
    while "after" not in seen and time.monotonic() < end:
        time.sleep(0.01)
    stop.set()
    thread.join(5)
    assert seen == ["after"]
