"""Chaos suite, records: a crash that tears the last line of the handoff and audit logs, then a
restart and a transfer, ten times over; every handoff stays readable and none is lost."""
from __future__ import annotations

import datetime as dt

import pytest

from policy.engine import Engine
from policy.store import JsonlStore

pytestmark = [pytest.mark.chaos]


def test_torn_tail_restart_keeps_every_handoff(tmp_path, capsys):
    state = tmp_path / "state"
    told: list[str] = []
    readable = 0
    for run in range(10):
        engine = Engine.load("fixtures/kb", state_dir=state, on_date=dt.date(2026, 6, 1))  # a restart
        d = engine.session(role="public").turn("I want to talk to a real person please").decision
        assert d.handoff is not None
        told.append(d.handoff.id)
        ids = [r["id"] for r in engine.handoffs.read()]
        readable += ids == told
        for name in ("handoffs.jsonl", "audit.jsonl"):  # the process dies mid-write
            with (state / name).open("ab") as f:
                f.write(b'{"id": "torn-' + str(run).encode() + b'", "team": "bil')
    torn = JsonlStore(state / "handoffs.jsonl").bad_lines()
    with capsys.disabled():
        print(f"\nchaos torn-tail restarts: {readable} of 10 restarts read every handoff told to a caller; "
              f"{len(told)} handoffs, {torn} torn lines skipped")
    assert readable == 10 and [r["id"] for r in Engine.load("fixtures/kb", state_dir=state).handoffs.read()] == told

