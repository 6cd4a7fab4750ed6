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


def _reader_with_text():
    values = {"rental_type": {"standard": ["standard"], "van": ["van"]}}
    heads = [({"rental_type": "standard"}, "Deposits"), ({"rental_type": "van"}, "Deposits")]
    texts = scoped_context([({"rental_type": "standard"}, "Standard cars, from a small hatchback to an estate."),
                            ({"rental_type": "van"}, "Vans for moving house, from a small panel van to a Luton."),
                            ({"rental_type": "van"}, "Deposits for vans and for any car hired with a trailer.")])
    return FacetReader(values, scoped_context(heads), embed, scoped_text=texts)


def test_a_specific_word_only_one_values_pages_use_names_that_value_when_we_asked():
    r = _reader_with_text()
    assert r.read("just a little hatchback", prompted=True) == {"rental_type": "standard"}
    assert r.read("the one with the trailer", prompted=True) == {"rental_type": "van"}
    # unasked, a word names nothing; nor does a word both values' pages use ("small"), nor a negated one
    assert r.read("just a little hatchback", prompted=False) == {}
    assert r.read("a small one", prompted=True) == {}
    assert r.read("not a hatchback", prompted=True) == {}
    # words that point to both values say nothing for sure
    assert r.read("a hatchback with a trailer", prompted=True) == {}


@pytest.mark.parametrize("said, value", [("I'm on the two year one", "24_month"), ("one-year contract, please", "12_month"),
                                         ("the 24 month one", "24_month"), ("eighteen months", None),
                                         ("not the two year one", None),
                                         # a second length of time leaves it open: which is the contract?
                                         ("the two year one, there's about a year left on it", None)])
def test_a_length_of_time_names_the_value_that_is_that_length(said, value):
    from policy.signals import stated_durations

    found = stated_durations(said, {"contract": {"12_month", "24_month"}, "plan": {"monthly", "prepaid"}})
    assert found == ({"contract": value} if value else {})
