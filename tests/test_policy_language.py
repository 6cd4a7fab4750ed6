"""The policy's language knowledge: numbers, fact kinds, question words, punctuation."""
from __future__ import annotations

import pytest

from policy.language import (asks_question, clauses, fact_kind, holds_kind, negated, normalize_text, question_focus,
                             run_on_parts, specificity)
from policy.signals import small_talk
from policy.numbers import Quantity, number_values, quantities, unsupported_numbers, words_to_digits

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text, expected", [
    ("eighteen months", [Quantity("18", "time")]),
    ("seventy-five pounds", [Quantity("75", "money")]),
    ("a fortnight", [Quantity("14", "time")]),
    ("£7.50", [Quantity("7.5", "money")]),
    ("7.50 pounds", [Quantity("7.5", "money")]),
    # a price as it is said: pounds and pence, dollars and cents are one amount
    ("seven pounds fifty", [Quantity("7.5", "money")]),
    # "a month" after a figure is what it is counted per, not a length of time
    ("2 dollars and 50 cents a month", [Quantity("2.5", "money")]),
    ("75p a day", [Quantity("0.75", "money"), ]),
    ("five pounds a month", [Quantity("5", "money")]),  # not £5.01 ("5 pounds 1 month")
    ("two hours a day", [Quantity("2", "time")]),
    ("it takes a week", [Quantity("1", "time")]),
    ("£5, a month later", [Quantity("5", "money"), Quantity("1", "time")]),
    ("up to 50 parcels a week", [Quantity("50", "number")]),
    ("three guest visits a month", [Quantity("3", "number")]),
    ("once a month", [Quantity("1", "time")]),  # how often, as "how often" asks
    ("5 to 10 business days", [Quantity("5", "time"), Quantity("10", "time")]),
    ("two guest tickets", [Quantity("2", "number")]),
    ("open until 5pm", [Quantity("17:00", "clock")]),
    ("no one told me", []),
    ("effective 2026-02-01", [Quantity("2026-02-01", "date")]),
    # "%" ends a figure with no word edge after it, before a space or at the end of a sentence
    ("a 3% fee on each payment", [Quantity("3", "percent")]),
    ("at least 30%.", [Quantity("30", "percent")]),
    ("10 percent", [Quantity("10", "percent")]),
])
def test_one_reader_of_numbers(text, expected):
    got = quantities(text)
    assert got == expected


def test_number_words_and_digits_compare_equal():
    assert number_values("fourteen days") == number_values("14 days") == {"14"}
    assert words_to_digits("half an hour") == "30 minutes"
    assert unsupported_numbers("It costs $7.50 and takes 3 days.", ["The fee is seven dollars fifty, 3 days"]) == []
    assert unsupported_numbers("It costs $7.50 and takes 3 days.", ["The fee is seven dollars, 3 days"]) == \
        ["7.5 (money)"]


@pytest.mark.parametrize("question, kind", [
    ("How long does a refund take?", "duration"), ("How much notice do you need?", "duration"),
    ("What's the fee for a paper bill?", "amount"), ("How much is it?", "amount"),
    ("When does the promotion end?", "when"), ("What time does the shop shut?", "when"),
    ("When I'm away, which card should I use?", "any"), ("How many lines can I have?", "count"),
    ("Where do I send the form?", "any"), ("What's the phone number for the claims line?", "contact"),
    ("What email address do I send it to?", "contact"), ("How much does it cost to call your number?", "amount"),
    ("Is there a fee for paper bills?", "amount"), ("Does it cost anything to register?", "amount"),
    ("What code do I put on the booking to waive the charge?", "any"),
    ("What should I switch off so I don't rack up roaming charges?", "any"),
])
def test_what_kind_of_fact_a_question_asks_for(question, kind):
    assert fact_kind(question) == kind


def test_a_fact_of_the_asked_kind_in_words_or_figures():
    assert holds_kind("when", "It takes effect immediately.")
    assert holds_kind("amount", "Replacement SIMs are free of charge.")
    assert holds_kind("duration", "Add-on data lasts until the end of your billing month.")
    assert not holds_kind("amount", "A replacement key arrives within 3 working days.")
    assert holds_kind("any", "Anything at all.")


def test_a_time_in_words_is_a_whole_phrase():
    assert holds_kind("duration", "Orders placed by 2pm go out the same working day.")
    assert holds_kind("when", "Bins go out on Thursday.")
    assert holds_kind("duration", "We'll sort it straight away.")
    # "same", "next", "day" and "away" alone state no time
    assert not holds_kind("duration", "If you find the same tyre cheaper, we will refund the difference.")
    assert not holds_kind("duration", "Take the old battery away with you.")
    assert not holds_kind("when", "Check your collection day on the website.")


def test_a_way_to_reach_someone_is_the_number_or_address_itself():
    assert holds_kind("contact", "Call the claims line on 0345 600 1234.")
    assert holds_kind("contact", "Email claims@example.co.uk with the signed form.")
    assert holds_kind("contact", "Send it through www.example.com/claims.")
    assert not holds_kind("contact", "Our automated readings line is open 24 hours a day.")
    assert not holds_kind("contact", "The new prices apply from 2026-04-01, £12.50 for 10 days.")


def test_punctuation_never_decides():
    assert normalize_text("How long does it take?") == normalize_text("How long does it take.") == \
        normalize_text("how long does it take") == "how long does it take"
    assert asks_question("so how long does it take") and asks_question("Right, can you help")
    assert not asks_question("It's for the business.") and not asks_question("I work part time?")


def test_the_clause_that_asks_is_the_focus():
    assert question_focus("My card came today and the tap thing fails, what's going on with it?") == \
        "what's going on with it"
    assert question_focus("How do I reset my router?") is None


def test_question_focus_needs_no_comma():
    # ASR may write no comma before the question: the asking clause is the same either way
    said = "If I go up a level on my membership{} when does that actually kick in?"
    assert question_focus(said.format(",")) == question_focus(said.format("")) == "when does that actually kick in"
    assert question_focus("I lost my card, can I get a new one sent abroad?") == "can i get a new one sent abroad"
    assert question_focus("When does my contract end?") is None  # a question word that opens the turn


def test_frame_words_weigh_less_than_subjects():
    assert specificity("long") < 0.4 < specificity("voicemail") == 1.0


@pytest.mark.parametrize("text, expected", [
    ("I'm a business customer, how many lines can I have?", ["i'm a business customer", "how many lines can i have"]),
    ("the fee is £7.50, when is it due", ["the fee is £7.50", "when is it due"]),  # no break inside a figure
    ("my bill is wrong and I want a person", ["my bill is wrong", "i want a person"]),
    ("so can I talk to someone", ["can i talk to someone"]),
    ("ok then", ["ok"]),
    # a dash between spaces breaks a clause, a hyphen inside a word does not
    ("It's just our family home - how much is a meter?", ["it's just our family home", "how much is a meter"]),
    ("a pay-as-you-go e-bike", ["a pay-as-you-go e-bike"]),
])
def test_one_clause_splitter(text, expected):
    assert clauses(text) == expected


def test_a_run_on_clause_is_cut_where_a_clause_would_open():
    said = "they said they'll put my windows in i'm scared to go out"
    assert run_on_parts(said, "self") == ["they said they'll put my windows in", "i'm scared to go out"]
    assert run_on_parts(said, "ask") == [said]  # no question word inside it
    asked = "i'm on the premium plan how many guests can i bring"
    assert run_on_parts(asked, "ask") == ["i'm on the premium plan", "how many guests can i bring"]
    assert run_on_parts(asked, "self") == [asked]  # a clause that opens with "I'm" is not cut there
    told = "it's for the shop we run a little hairdresser's"
    assert run_on_parts(told, "self") == [told]
    assert run_on_parts(told, "self", "subject") == ["it's for the shop", "we run a little hairdresser's"]


def test_question_focus_keeps_a_questions_own_and():
    assert question_focus("How long before take-off do they shut the door and stop boarding?") is None


@pytest.mark.parametrize("text, expected", [
    ("not", True), ("isn't", True), ("no longer", True), ("never", True), ("I don't", True),
    ("nothing to do with work", True),
    ("want", False), ("know", False), ("business", False),
])
def test_negation(text, expected):
    assert negated(text) is expected


@pytest.mark.parametrize("text, expected", [
    ("OK, thanks, bye", "closing"), ("No, thank you.", "closing"), ("thanks and bye", "closing"),
    ("ok then", "ack"), ("hi there", "greeting"), ("thanks, and how do I pay?", None),
])
def test_small_talk_reads_each_clause(text, expected):
    assert small_talk(text) == expected


@pytest.mark.unit
def test_durations_compare_lengths_of_time_however_written():
    from policy.numbers import durations

    assert durations("the two-year deal") == durations("24_month") == durations("a 24 month contract") == {720.0}
    assert durations("one year") == durations("12 months") == {360.0}
    assert durations("a fortnight") == {14.0}
    assert durations("no one knows") == durations("£12") == set()
