"""A question about a time ahead, when a page not yet in force will apply (policy/periods.py and
the version gate)."""
from __future__ import annotations

import datetime as dt

import pytest

from policy.config import load_policy_config
from policy.decision import Action, Reason
from policy.gates import TurnFacts, decide
from policy.periods import asked_periods, in_force_during
from tests.policy_helpers import TEST_SCORER, hit, result

pytestmark = pytest.mark.unit
CFG = load_policy_config()
TODAY = dt.date(2026, 11, 30)
NOW = "A large parcel on Standard costs £9.99."
LATER = "A large parcel on Standard costs £10.79."


@pytest.mark.parametrize("text, first", [
    ("are prices going up next April?", dt.date(2027, 4, 1)),
    ("what will it cost from January next year", dt.date(2027, 1, 1)),
    ("what will it be in May 2028", dt.date(2028, 5, 1)),
    ("are your prices going up next year", dt.date(2027, 1, 1)),
    ("what's the charge in 2027", dt.date(2027, 1, 1)),
    ("I'm graduating this December", dt.date(2026, 12, 1)),
    ("will it go up next month", dt.date(2026, 12, 1)),
])
def test_a_time_ahead_is_read_as_its_first_day(text, first):
    assert asked_periods(text, TODAY)[0][0] == first


@pytest.mark.parametrize("text", ["may I ask what it costs", "I started this September", "what did it cost last April",
                                  "what was in the 2025 price list", "how much does it cost"])
def test_no_time_ahead(text):
    assert asked_periods(text, TODAY) == []


def test_next_month_in_december_is_january():
    assert asked_periods("next month", dt.date(2026, 12, 10)) == [(dt.date(2027, 1, 1), dt.date(2027, 1, 31))]


def test_a_page_applies_while_in_force():
    april = asked_periods("next April", TODAY)[0]
    assert in_force_during(dt.date(2027, 4, 1), None, april)
    assert in_force_during(dt.date(2027, 1, 1), dt.date(2027, 12, 31), april)
    assert not in_force_during(dt.date(2027, 5, 1), None, april)
    assert not in_force_during(dt.date(2026, 12, 20), dt.date(2027, 1, 2), april)
    assert not in_force_during(None, None, april)  # a draft with no date says nothing about April


def _decide(question: str, draft_from: dt.date | None = dt.date(2027, 4, 1), later: str = LATER):
    current = hit("prices-2026", NOW, covered=("large", "parcel", "standard", "cost"), dense=0.85, section="prices")
    draft = hit("prices-2027", later, status="draft", covered=("large", "parcel", "standard"), dense=0.6, rank=3,
                section="prices").model_copy(update={"effective_from": draft_from})
    return decide(TurnFacts(question=question, result=result(current, draft), today=TODAY), CFG, TEST_SCORER)


def test_a_question_about_a_time_the_draft_covers_is_refused():
    o = _decide("what will a large parcel on standard cost next April")
    assert o.action == Action.refuse and Reason.draft_only in o.reasons
    assert [g.doc_id for g in o.evidence] == ["prices-2027"]  # never today's price, spoken as next April's


def test_today_and_a_time_before_the_draft_are_answered_from_todays_page():
    assert _decide("what does a large parcel on standard cost").action == Action.answer
    assert _decide("what will a large parcel on standard cost in January").action == Action.answer


def test_a_draft_about_something_else_does_not_stop_the_answer():
    o = _decide("what will a large parcel on standard cost next April",
                later="Sunday collections start from selected lockers in spring.")
    assert o.action == Action.answer


def test_a_draft_without_a_date_is_not_read_against_the_time_asked():
    assert _decide("what will a large parcel on standard cost next April", draft_from=None).action == Action.answer


def test_the_refusal_says_it_is_the_time_asked_that_is_not_final():
    from policy.compose import compose
    q = "what will a large parcel on standard cost next April"
    msg, cites = compose(_decide(q), q, CFG)
    assert "time you're asking about" in msg and "£" not in msg and not cites
