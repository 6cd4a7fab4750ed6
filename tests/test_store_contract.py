"""What every handoff store promises, checked on both: the embedded JSONL store (marker unit) and
PostgreSQL (marker pg, a schema of its own per test). Lifecycle waiting -> claimed -> closed, one
winner when two desks claim at once, follow sees what another process writes, checkpoints."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from policy.store_api import HandoffRow, HandoffStore
from policy.store_embedded import EmbeddedStore

ROOT = Path(__file__).resolve().parent.parent
Factory = Callable[[], HandoffStore]


@pytest.fixture(params=[pytest.param("jsonl", marks=pytest.mark.unit), pytest.param("pg", marks=pytest.mark.pg)])
def stores(request, tmp_path) -> Factory:
    """Opens stores over one backing (a state dir, or a database schema); each call is a new store,
    as a second process would have. All are shut down after the test."""
    opened: list[HandoffStore] = []
    if request.param == "pg":
        url = request.getfixturevalue("pg_url")
        from policy.store_pg import PgStore

        def make() -> HandoffStore:
            opened.append(PgStore(url))
            return opened[-1]
        make.target = ("pg", url)  # type: ignore[attr-defined]
    else:
        def make() -> HandoffStore:
            opened.append(EmbeddedStore(tmp_path, fsync=False))
            return opened[-1]
        make.target = ("jsonl", str(tmp_path))  # type: ignore[attr-defined]
    yield make
    for s in opened:
        s.shutdown()


def _package(hid: str, team: str = "billing") -> dict:
    return {"session": "s1", "id": hid, "team": team, "created_at": "2026-03-01T10:00:00+00:00",
            "reasons": ["human_requested"], "question": f"question {hid}", "transcript": ["caller: hi"]}


def test_lifecycle_waiting_claimed_closed(stores):
    store = stores()
    for hid, team in [("h1", "billing"), ("h2", "fraud"), ("h3", "billing")]:
        store.handoffs.append(_package(hid, team))
    assert [r.id for r in store.read_handoffs()] == ["h1", "h2", "h3"]
    assert [r.id for r in store.read_handoffs(team="billing")] == ["h1", "h3"]
    assert [r.id for r in store.read_handoffs(last=1)] == ["h3"]

    assert store.close("h1").why == "handoff h1 is waiting; claim it before closing it"
    won = store.claim("h1", "alice")
    assert won.ok and won.row and won.row.state == "claimed" and won.row.claimed_by == "alice"
    assert store.claim("h1", "alice").ok  # the same agent again: a retried command
    lost = store.claim("h1", "bob")
    assert not lost.ok and lost.why == "handoff h1 is already claimed by alice"
    assert store.close("h1", "bob").why == "handoff h1 is claimed by alice, not bob"
    assert [r.id for r in store.read_handoffs(state="claimed")] == ["h1"]
    assert store.close("h1", "alice").ok and store.close("h1").ok  # closing twice is fine
    assert store.claim("h1", "carol").why == "handoff h1 is already closed"
    assert store.claim("nope", "alice").why == "unknown handoff id 'nope'" and not store.close("nope").ok

    again = stores()  # another process reads the same states
    states = {r.id: (r.state, r.claimed_by) for r in again.read_handoffs()}
    assert states == {"h1": ("closed", "alice"), "h2": ("waiting", None), "h3": ("waiting", None)}
    assert [r.id for r in again.read_handoffs(team="billing", state="waiting")] == ["h3"]
    closed = again.read_handoffs(state="closed")[0]
    assert closed.claimed_at and closed.closed_at and closed.package["question"] == "question h1"


def test_two_desks_claiming_at_once_never_both_win(stores):
    first, second = stores(), stores()
    rounds = 20
    for i in range(rounds):
        first.handoffs.append(_package(f"race{i}"))
    barrier = threading.Barrier(2)
    wins: dict[str, list[int]] = {"alice": [], "bob": []}

    def desk(store: HandoffStore, agent: str) -> None:
        for i in range(rounds):
            barrier.wait(timeout=20)
            if store.claim(f"race{i}", agent).ok:
                wins[agent].append(i)

    threads = [threading.Thread(target=desk, args=(s, a)) for s, a in [(first, "alice"), (second, "bob")]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(wins["alice"] + wins["bob"]) == list(range(rounds)), wins  # exactly one winner each round
    owners = {r.id: r.claimed_by for r in first.read_handoffs()}
    assert all(owners[f"race{i}"] == ("alice" if i in wins["alice"] else "bob") for i in range(rounds))


def _follow_in_thread(store: HandoffStore, team: str | None) -> tuple[list[tuple[HandoffRow, float]], Callable[[], None]]:
    """The store's real follow iterator in a thread: what it yields (with when), and how to stop it."""
    seen: list[tuple[HandoffRow, float]] = []
    stop = threading.Event()

    def run() -> None:
        for row in store.follow(team, until=stop):
            seen.append((row, time.monotonic()))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def end() -> None:
        stop.set()
        thread.join(5)
    return seen, end


def _wait(cond: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_follow_replays_the_waiting_then_sees_another_process_write(stores):
    store = stores()
    store.handoffs.append(_package("old1"))
    store.handoffs.append(_package("old2"))
    store.handoffs.append(_package("other-team", "fraud"))
    assert store.claim("old2", "alice").ok
    seen, end = _follow_in_thread(stores(), "billing")
    try:
        assert _wait(lambda: len(seen) >= 1, 10)
        kind, target = stores.target
        writer = ("from policy.store_pg import PgStore; s = PgStore(sys.argv[2])" if kind == "pg"
                  else "from policy.store_embedded import EmbeddedStore; s = EmbeddedStore(sys.argv[2])")
        code = (f"import sys, time; {writer}\n"
                "s.handoffs.append({'id': 'fraud-new', 'team': 'fraud'})\n"
                "s.handoffs.append({'id': 'new1', 'team': 'billing', 'question': 'from another process'})\n"
                "print(time.monotonic()); s.shutdown()")
        out = subprocess.run([sys.executable, "-c", code, kind, target], capture_output=True, text=True, cwd=ROOT,
                             timeout=60, check=True)
        written_at = float(out.stdout.strip())
        assert _wait(lambda: any(r.id == "new1" for r, _ in seen), 5), [r.id for r, _ in seen]
    finally:
        end()
    assert [r.id for r, _ in seen] == ["old1", "new1"]  # waiting ones first, only this team, each once
    new, at = seen[1]
    assert new.package["question"] == "from another process" and new.state == "waiting"
    assert at - written_at < 2.0  # seen within a bounded time of the commit


def test_checkpoints_keep_the_latest_state_per_call(stores):
    store = stores()
    assert store.get_checkpoint("call-1") is None
    store.put_checkpoint("call-1", {"turn": 1, "facets": {"customer_type": "personal"}})
    store.put_checkpoint("call-1", {"turn": 2, "facets": {}})
    store.put_checkpoint("call/2 ../x", {"turn": 7})
    other = stores()
    assert other.get_checkpoint("call-1") == {"turn": 2, "facets": {}}
    assert other.get_checkpoint("call/2 ../x") == {"turn": 7}


def test_checkpoint_epochs_fence_late_writes_and_one_resume_wins(stores):
    a, b = stores(), stores()
    a.put_checkpoint("call-9", {"epoch": 0, "turns": 1})
    assert b.swap_checkpoint("call-9", 0, {"epoch": 1, "owner": "b", "turns": 1})  # b resumes the call
    assert not a.swap_checkpoint("call-9", 0, {"epoch": 1, "owner": "a", "turns": 1})  # too late: b has it
    assert not a.put_checkpoint("call-9", {"epoch": 0, "turns": 2})  # the old owner's late turn is refused
    assert b.put_checkpoint("call-9", {"epoch": 1, "owner": "b", "turns": 2})
    assert a.get_checkpoint("call-9") == {"epoch": 1, "owner": "b", "turns": 2}
    assert not a.swap_checkpoint("no-such-call", 0, {"epoch": 1})


def test_of_many_servers_resuming_one_call_at_once_exactly_one_wins(stores):
    first = stores()
    first.put_checkpoint("call-race", {"epoch": 3})
    racers = [stores() for _ in range(6)]
    go = threading.Barrier(len(racers))
    won: list[int] = []

    def resume(i: int) -> None:
        go.wait()
        if racers[i].swap_checkpoint("call-race", 3, {"epoch": 4, "owner": f"server-{i}"}):
            won.append(i)

    threads = [threading.Thread(target=resume, args=(i,)) for i in range(len(racers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(won) == 1
    assert first.get_checkpoint("call-race") == {"epoch": 4, "owner": f"server-{won[0]}"}
