"""Which high-risk pages a question is about: the page must be at least as likely to answer as
every safer page to take the call, while an action on its topic still goes to its team."""
from __future__ import annotations

import pytest

from policy.decision import Action
from tests.policy_helpers import hit, result
from tests.test_policy_gates import run

pytestmark = pytest.mark.unit


def test_a_high_risk_page_less_likely_than_a_safe_answer_does_not_take_the_call():
    """The question is about the high-risk topic only when its page is at least as likely to answer as
    every page of lower risk: "when is my bill due" also fits the billing-disputes page."""
    due = hit("bill-due-dates", "Your bill is due 14 days after it is issued.", covered=("bill", "due"))
    disputes = hit("charge-disputes", "To dispute a charge on your bill, call us before it is due.",
                   covered=("bill", "due"), dense=0.6, risk="high", team="billing_disputes", rank=2)
    o = run("when is my bill due", result(due, disputes))
    assert o.gate != "c_high_risk", o.signals
    alone = run("when is my bill due", result(hit("charge-disputes", disputes.text, covered=("bill", "due"),
                                                  risk="high", team="billing_disputes")))  # the likeliest
    assert alone.action == Action.transfer and alone.gate == "c_high_risk"
    # an action on that topic still goes to its team: "I want to dispute the charge on my bill"
    o = run("i want to file a dispute about my bill", result(due, disputes))
    assert o.gate == "c_approval" and o.team == "billing_disputes", o.signals
