"""Which section of the answering document is spoken, and which of its sentences."""
from __future__ import annotations

import pytest

from kb.tokenize import tokenize
from kb.units import unit_label
from policy.evidence import GradedHit, best_answer, best_unit_order, best_units, unit_share
from policy.features import QuestionTerms
from tests.policy_helpers import hit

pytestmark = pytest.mark.unit


def graded(doc: str, section: str, text: str, p: float, closeness: list[float]) -> GradedHit:
    h = hit(doc, text, section=section)
    h.unit_scores = closeness
    return GradedHit(h, p, unit_words=[0.0] * len(closeness))


def test_a_sentence_stating_the_asked_kind_of_fact_comes_first():
    g = graded("complaints", "next", "We can't tell you what action we take. We'll reply within 5 working days.",
               0.6, [0.70, 0.38])
    assert best_unit_order(g, "duration") == [1, 0]
    assert best_unit_order(g, "any") == [0, 1]  # any sentence answers a question of no particular kind


def test_the_likely_section_is_spoken_over_a_well_phrased_one_that_does_not_answer():
    about = graded("plus", "what-is-plus", "Plus is our paid membership for people who shop often.", 0.02, [0.65])
    price = graded("plus", "how-much", "£49 a year, paid upfront.", 0.84, [0.48])
    chosen = best_answer([price, about], "amount")
    assert chosen is not None and chosen[0] is price


def test_several_sections_that_partly_fit_do_not_outweigh_one_that_answers():
    """A document is as likely to answer as its likeliest section, the one that would be spoken: four
    voicemail sections near the question do not add up to an answer about voicemail to text."""
    near = [graded("voicemail", f"s{i}", "To turn voicemail off, dial ##002#.", p, [0.5])
            for i, p in enumerate((0.54, 0.29, 0.23, 0.14))]
    answer = graded("visual-voicemail", "transcripts", "Visual Voicemail shows your messages as text.", 0.62, [0.6])
    chosen = best_answer([*near, answer], "any")
    assert chosen is not None and chosen[0] is answer and chosen[1] == pytest.approx(0.62)


def test_a_bare_yes_is_spoken_with_the_sentence_that_says_what():
    g = graded("faq", "cancel", "Yes. Bookings can be cancelled free of charge up to 48 hours before pick-up. "
               "Later, we keep one day's charge.", 0.8, [0.70, 0.58, 0.40])
    assert best_units(g, "any") == ["Yes.", "Bookings can be cancelled free of charge up to 48 hours before pick-up."]


def test_a_unit_labelled_with_the_callers_words_says_the_question():
    q = QuestionTerms(weights={"annual": 1.0, "charg": 1.0, "band": 1.0}, surface={})
    asked = set(tokenize("What's the annual charge for band B?"))
    assert unit_share("B: Annual charge £1,709.81.", q, asked) == 1.0
    assert unit_share("A: Annual charge £1,465.55.", q, asked) < 1.0  # says the words, not the row asked for
    assert unit_label("Where: in the Quayside Kitchen.") == "Where" and unit_label("We close at 5pm.") is None


def test_the_row_asked_for_is_spoken_without_its_neighbours():
    g = graded("tax", "bands", "| Band | Annual charge |\n|---|---|\n| A | £1,465.55 |\n| B | £1,709.81 |", 0.8,
               [0.58, 0.57])
    g.unit_words = [0.0, 1.0]  # the caller said "band B"
    assert best_units(g, "amount") == ["B: Annual charge £1,709.81."]


def test_sentences_nearly_as_close_as_the_best_are_spoken_with_it_in_their_order():
    # the asked detail ("saved" messages) is in the second sentence: both are spoken, the unrelated
    # third is not
    g = graded("voicemail", "storage", "New messages are kept for 14 days. Saved messages are kept for 30 days. "
               "You can change your greeting at any time.", 0.8, [0.66, 0.56, 0.20])
    assert best_units(g, "duration") == ["New messages are kept for 14 days.", "Saved messages are kept for 30 days."]


def test_an_answer_stays_within_its_word_limit():
    long = " ".join(["word"] * 25)
    g = graded("faq", "long", f"One {long}. Two {long}. Three {long}.", 0.8, [0.60, 0.59, 0.58])
    spoken = best_units(g, "any")
    assert len(spoken) == 2 and sum(len(s.split()) for s in spoken) <= 60
