"""Facets in the caller's words, on a fake embedding that places words on axes (no model)."""
from __future__ import annotations

import numpy as np
import pytest

from policy.facets import FacetReader, scoped_context

pytestmark = pytest.mark.unit
AXES = {"business": ["business", "company", "cafe", "firm", "shop"], "home": ["home", "house", "personal", "me"]}


def embed(texts):
    rows = []
    for t in texts:
        words = set(t.lower().replace(",", " ").split())
        v = [float(len(words & set(ws))) for ws in AXES.values()] + [0.3]
        rows.append(v)
    x = np.array(rows, np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def reader():
    values = {"customer_type": {"business": ["business"], "personal": ["personal"]}}
    context = scoped_context([({"customer_type": "business"}, "Business accounts. Company cards"),
                              ({"customer_type": "personal"}, "Personal accounts at home")])
    return FacetReader(values, context, embed)


def test_a_clarify_answer_in_everyday_words_is_read():
    assert reader().read("Oh it's just for us at home", prompted=True) == {"customer_type": "personal"}
    assert reader().read("We run a little cafe", prompted=True) == {"customer_type": "business"}


def test_volunteered_facets_need_more_and_a_question_clause_tells_nothing():
    r = reader()
    assert r.read("what's the fee for the business card", prompted=False) == {}
    assert r.read("We run a firm, company cards, what's the fee", prompted=False) == {"customer_type": "business"}


def test_a_negated_value_of_a_two_valued_key_means_the_other():
    assert reader().read("it's not a business", prompted=True) == {"customer_type": "personal"}


def test_clauses_that_point_to_different_values_say_nothing():
    assert reader().read("it's for the company, but at home", prompted=True) == {}


@pytest.mark.parametrize("said, value", [("I'm going for the off-peak one", "offpeak"),
                                         ("I work part-time, how much leave do I get?", "part_time"),
                                         ("we're on the 12 month contract", "12_month")])
def test_a_facet_value_is_read_however_its_words_are_joined(said, value):
    from policy.config import load_policy_config
    from policy.signals import facet_vocabulary, stated_facets

    kb = {"plan": {"offpeak", "standard"}, "hours": {"part_time", "full_time"}, "term": {"12_month", "24_month"}}
    vocab = facet_vocabulary(load_policy_config(), kb)
    assert value in stated_facets(said, vocab).values()
    assert stated_facets("it's a small-business line, is that standard?", vocab) == {"plan": "standard"}
