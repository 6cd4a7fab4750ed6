"""A conversation's state as data (policy/session_state.py): `Session.snapshot()` round-trips
through JSON into a new session that goes on where the first stopped (the server's checkpoints),
and `run.py ask --session FILE` keeps it in a file, reading the files older versions wrote."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from policy.decision import Action
from policy.engine import Engine, UnknownRole
from policy.session_state import SessionState

ROOT = Path(__file__).resolve().parent.parent
KB = str(ROOT / "fixtures" / "kb")
SIM = "How much does a replacement SIM cost?"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return Engine.load(KB, state_dir=tmp_path_factory.mktemp("state"), on_date=dt.date(2026, 11, 29))


@pytest.mark.unit
def test_a_clarify_asked_in_one_session_is_answered_in_a_session_rebuilt_from_its_snapshot(engine):
    first = engine.session(facets={"region": "uk"})
    asked = first.turn(SIM).decision
    assert asked.action == Action.clarify and "customer_type" in asked.missing_information
    saved = first.snapshot().model_dump_json()  # what a checkpoint or a session file keeps

    again = engine.session(state=SessionState.model_validate_json(saved))
    assert (again.session_id, again.role, again.facets) == (first.session_id, "public", {"region": "uk"})
    assert again.pending_question == SIM and again.pending_facets == ["customer_type"] and again.turns == 1
    answered = again.turn("I'm a business customer.").decision
    assert answered.action == Action.answer
    assert any(c.doc_id == "sim-replacement-business" for c in answered.citations)
    assert again.transcript[0] == f"caller: {SIM}" and len(again.transcript) == 4


@pytest.mark.unit
def test_a_snapshot_keeps_the_role_and_a_restore_never_crosses_conversations(engine):
    agent = engine.session(role="agent")
    assert engine.session(state=agent.snapshot()).role == "agent"
    with pytest.raises(UnknownRole, match="agnet"):
        engine.session(state=SessionState(role="agnet"))
    with pytest.raises(ValueError, match="given to"):
        engine.session().restore(agent.snapshot())


@pytest.mark.slow
def test_ask_session_reads_an_old_file_and_writes_the_whole_state(tmp_path):
    old = {"session_id": "abc123def456", "role": "public", "facets": {},  # as `ask --session` wrote it before
           "pending_question": SIM, "pending_facets": ["customer_type"],
           "transcript": [f"caller: {SIM}", "agent: Are you a personal or business customer?"],
           "last_question": SIM, "topic_team": None}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(old))
    p = subprocess.run([sys.executable, str(ROOT / "run.py"), "ask", "--kb", KB, "--state-dir", str(tmp_path),
                        "--session", str(f), "I'm a business customer."],
                       capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["action"] == "answer" and any(c["doc_id"] == "sim-replacement-business" for c in d["citations"])
    kept = json.loads(f.read_text())
    assert set(old) <= set(kept) and kept["session_id"] == old["session_id"]
    assert kept["facets"] == {"customer_type": "business"} and kept["pending_question"] is None
    assert len(kept["transcript"]) == 4 and kept["turns"] == 1
    f.write_text("[1, 2]")
    p = subprocess.run([sys.executable, str(ROOT / "run.py"), "ask", "--kb", KB, "--state-dir", str(tmp_path),
                        "--session", str(f), "hello"], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert p.returncode == 0 and "does not hold a conversation; starting a new conversation" in p.stderr
