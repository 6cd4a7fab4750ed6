"""A superseded page that answers vouches for its current successor (policy/versions.py)."""
from __future__ import annotations

import pytest

from policy.compose import compose
from policy.config import load_policy_config
from policy.decision import Action, Reason
from policy.gates import TurnFacts, decide
from tests.policy_helpers import TEST_SCORER, hit, result

pytestmark = pytest.mark.unit
CFG = load_policy_config()
Q = "how much is the gold card a year"
OLD = "The Gold card costs £120 a year, taken on the anniversary of joining."


def run(*hits):
    return decide(TurnFacts(question=Q, result=result(*hits)), CFG, TEST_SCORER)


def _old():
    return hit("tiers-2025", OLD, status="deprecated", covered=("gold", "card", "year"), dense=0.9,
               section="fees")


def test_the_successor_that_restates_the_old_answer_is_spoken():
    # the current page words it so that it fits the question loosely on its own
    new = hit("tiers-2026", "The Gold card costs £150 a year, taken on the anniversary of joining.",
              supersedes=["tiers-2025"], covered=(), dense=0.4, rank=2, section="what-it-costs")
    o = run(_old(), new)
    assert o.action == Action.answer, o.reasons
    msg, cites = compose(o, Q, CFG)
    assert "£150" in msg and "£120" not in msg and cites[0].doc_id == "tiers-2026"
    vouched = next(g for g in o.graded if g.doc_id == "tiers-2026")
    assert vouched.vouched_by == "tiers-2025#fees"


def test_a_successor_that_no_longer_says_it_does_not_inherit():
    new = hit("tiers-2026", "Every account comes with a Classic card and a mobile app.",
              supersedes=["tiers-2025"], covered=(), dense=0.4, rank=2)
    o = run(_old(), new)
    assert o.action == Action.refuse and Reason.deprecated_only in o.reasons
    assert all(g.vouched_by is None for g in o.graded)


def test_an_unrelated_current_page_does_not_inherit():
    other = hit("tiers-guide", "The Gold card costs £150 a year, taken on the anniversary of joining.",
                covered=(), dense=0.4, rank=2)  # restates it, but does not replace the old page
    assert run(_old(), other).action == Action.refuse


def test_one_old_section_vouches_for_one_successor_section():
    text = "The Gold card costs £150 a year, taken on the anniversary of joining."
    a = hit("tiers-2026", text, supersedes=["tiers-2025"], covered=(), dense=0.4, rank=2, section="a")
    b = hit("tiers-2026", text, supersedes=["tiers-2025"], covered=(), dense=0.35, rank=3, section="b")
    o = run(_old(), a, b)
    assert [g.hit.section for g in o.graded if g.vouched_by] == ["a"]


def test_an_old_version_too_weak_to_answer_on_its_own_vouches_for_nothing():
    # were it current, this old page would not be answered from: its word must not tip the
    # successor's document over the answer threshold
    weak_old = hit("tiers-2025", OLD, status="deprecated", covered=("gold", "card", "year"), dense=0.37,
                   section="fees")
    restates = hit("tiers-2026", "The Gold card costs £150 a year, taken on the anniversary of joining.",
                   supersedes=["tiers-2025"], covered=(), dense=0.4, rank=2, section="a")
    neighbour = hit("tiers-2026", "Gold card holders get six lounge passes.", supersedes=["tiers-2025"],
                    covered=("gold", "card"), dense=0.556, rank=3, section="b")
    o = run(weak_old, restates, neighbour)
    assert o.action == Action.refuse and all(g.vouched_by is None for g in o.graded)
