"""The urgency probe: a caller in danger or distress goes to a person even when no page, pattern or
written example names their situation (policy/urgency.py, fitted by evaluation/urgency_fit.py)."""
from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest

from evaluation.cases import Case
from evaluation.urgency_fit import urgent_turns
from policy.engine import Engine
from policy.urgency import DEFAULT_URGENCY_FILE, UrgencyError, UrgencyProbe, load_urgency

DATE = dt.date(2026, 11, 29)


@pytest.mark.unit
def test_probability_is_the_logistic_of_the_weighted_embedding():
    probe = UrgencyProbe(np.array([2.0, 0.0, -1.0], dtype=np.float32), -0.5)
    assert probe.probability(np.array([1.0, 5.0, 0.0], dtype=np.float32)) == pytest.approx(1 / (1 + np.exp(-1.5)))
    assert probe.probability(np.array([0.0, 0.0, 1.0], dtype=np.float32)) < 0.2
    with pytest.raises(UrgencyError, match="size 2"):
        probe.probability(np.zeros(2, dtype=np.float32))


@pytest.mark.unit
def test_file_round_trip_missing_and_malformed(tmp_path):
    probe = UrgencyProbe(np.array([0.25, -0.5], dtype=np.float32), 0.125, {"turns": 3})
    path = tmp_path / "u.json"
    path.write_text(json.dumps(probe.to_json()))
    again = load_urgency(path)
    assert again is not None and again.meta == {"turns": 3}
    assert np.allclose(again.coef, probe.coef) and again.intercept == probe.intercept
    assert load_urgency(tmp_path / "absent.json") is None  # no file: the feature is off
    path.write_text('{"coef": "x"}')
    with pytest.raises(UrgencyError, match="malformed"):
        load_urgency(path)


@pytest.mark.unit
def test_only_a_high_risk_cases_transferred_turns_teach_urgency():
    def case(bucket, actions, turns=("one", "two")):
        return Case.model_validate({"id": "x", "bucket": bucket, "turns": list(turns), "expect": {"actions": actions}})

    assert [y for _, y in urgent_turns(case("high_risk", [["refuse"], ["transfer"]]))] == [0, 1]
    assert [y for _, y in urgent_turns(case("human_request", [["refuse"], ["transfer"]]))] == [0, 0]
    assert urgent_turns(case("high_risk", [["transfer"]], turns=("There's SMOKE!",)))[0][0] == "there's smoke"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return Engine.load("fixtures/kb", state_dir=tmp_path_factory.mktemp("state"), on_date=DATE)


@pytest.mark.unit
def test_the_shipped_probe_sends_danger_in_any_words_to_a_person(engine):
    """Situations written for this test, in none of the corpus's words; the telecom KB has no page on them."""
    assert DEFAULT_URGENCY_FILE.is_file() and engine.urgency is not None
    for said in ["My husband has collapsed in the kitchen and he isn't breathing properly",
                 "There's water pouring through the ceiling onto the electric sockets and sparks are coming out"]:
        assert "urgent" in engine.intents(said), said
        d = engine.session().turn(said).decision
        assert d.action.value == "transfer" and d.handoff is not None, said
    for said in ["How do I set up my voicemail?", "What does it cost to add a second SIM to my plan?"]:
        assert "urgent" not in engine.intents(said), said


@pytest.mark.unit
def test_without_the_probe_only_the_examples_read_distress(engine):
    said = "My husband has collapsed in the kitchen and he isn't breathing properly"
    assert "urgent" in engine.intents(said)
    bare = engine.with_config(engine.config)
    bare.urgency = None
    assert "urgent" not in bare.intents(said)


@pytest.mark.unit
def test_the_probe_needs_no_written_examples(engine):
    """A policy file without `intents` still sends the caller in danger to a person."""
    no_examples = engine.with_config(engine.config.model_copy(update={"intents": {}}))
    said = "My husband has collapsed in the kitchen and he isn't breathing properly"
    assert no_examples.intents(said).keys() == {"urgent"}
    assert no_examples.session().turn(said).decision.action.value == "transfer"
