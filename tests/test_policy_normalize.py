"""policy.normalize: fillers, spoken numbers, joins, vocabulary repairs."""
from __future__ import annotations

import pytest

from policy.normalize import normalize_transcript, synonym_table

pytestmark = pytest.mark.unit

VOCAB = ["Northbeam", "SIM", "Wi-Fi", "eSIM", "PIN", "PayPal", "iPhone", "APN", "Add-ons", "GB", "voicemail",
         "router", "roaming", "refund", "factory", "replacement", "cancellation", "prepaid", "hotspot",
         "Mastercard", "Visa", "porting", "modem", "broadband", "invoice"]


@pytest.mark.parametrize("said,meant", [
    # fillers
    ("Um, how do I reset my router?", "How do I reset my router?"),
    ("uh I'd like to, like, cancel my plan", "I'd like to cancel my plan"),
    ("I was, you know, charged twice", "I was charged twice"),
    ("So, uh, what is the fee?", "So what is the fee?"),
    ("hmm what about roaming", "what about roaming"),
    ("I I want a refund", "I want a refund"),
    # "like" that is not a filler stays
    ("I would like a refund", "I would like a refund"),
    ("It looks like my bill is wrong", "It looks like my bill is wrong"),
    ("Something like that.", "Something like that."),
    # numbers
    ("Why was I charged twenty four dollars?", "Why was I charged 24 dollars?"),
    ("Does it take twenty-four hours?", "Does it take 24 hours?"),
    ("I paid five dollars", "I paid 5 dollars"),
    ("one hundred and fifty minutes", "150 minutes"),
    ("a hundred dollars", "100 dollars"),
    ("two thousand five hundred", "2500"),
    ("it costs two point five dollars", "it costs 2.5 dollars"),
    ("in twenty twenty six", "in 2026"),
    ("since nineteen ninety nine", "since 1999"),
    ("seven days", "7 days"),
    ("four, five, six", "4, 5, 6"),
    ("one dollar", "1 dollar"),
    ("ten gigabytes of data", "10 GB of data"),
    ("twenty bucks", "20 dollars"),
    ("it's two point oh five", "it's 2.05"),
    ("three hundred and eighty pounds", "380 pounds"),
    ("it costs seven pounds fifty", "it costs £7.50"),
    ("two dollars and fifty cents", "$2.50"),
    # plurals are not numbers ("ones", "tens")
    ("It's one of the luxury ones", "It's one of the luxury ones"),
    ("tens of emails", "tens of emails"),
    # "one" that is not a number stays
    ("No one answered", "No one answered"),
    ("Which one is cheaper?", "Which one is cheaper?"),
    ("one day pass", "one day pass"),
    # joins into KB terms
    ("My e sim is not working.", "My eSIM is not working."),
    ("what's the wi fi password", "what's the Wi-Fi password"),
    ("can I pay with pay pal", "can I pay with PayPal"),
    ("the north beam app", "the Northbeam app"),
    ("my i phone", "my iPhone"),
    # repairs toward KB vocabulary
    ("How do I reset my rooter?", "How do I reset my router?"),
    ("How do I set up voice male?", "How do I set up voicemail?"),
    ("is there a cancelation fee", "is there a cancellation fee"),
    ("my hot spot is slow", "my hotspot is slow"),
    ("my apn settings", "my APN settings"),
    ("what is my esim", "what is my eSIM"),
    # common English words are never "repaired"
    ("How much is international warming?", "How much is international warming?"),
    ("I want to talk to a human", "I want to talk to a human"),
    ("my motor is broken", "my motor is broken"),
    ("the price went up", "the price went up"),
    ("", ""),
])
def test_cases(said, meant):
    assert normalize_transcript(said, VOCAB).text == meant


def test_changes_are_listed():
    r = normalize_transcript("Um, my rooter costs twenty dollars", VOCAB)
    assert r.text == "My router costs 20 dollars"
    assert r.changes == ["filler: Um", "number: twenty -> 20", "repair: rooter -> router"]


def test_nothing_to_do_lists_no_changes():
    r = normalize_transcript("How do I reset my router?", VOCAB)
    assert r.changes == [] and r.text == "How do I reset my router?"


def test_no_vocabulary_means_no_repairs_or_joins():
    r = normalize_transcript("my rooter and e sim", None)
    assert r.text == "my rooter and e sim"


def test_ambiguous_repair_is_left_alone():
    # "rooter" is equally close to two KB terms: guessing would be worse than leaving it.
    assert normalize_transcript("my rooter", ["router", "rooted"]).text == "my rooter"
    assert normalize_transcript("my rooter", ["router"]).text == "my router"


def test_units_stay_words_when_the_kb_uses_words():
    assert normalize_transcript("ten gigabytes", ["gigabytes", "data"]).text == "10 gigabytes"


def test_with_the_fixture_kb_vocabulary():
    from pathlib import Path

    if not Path("fixtures/kb").is_dir():
        pytest.skip("fixture KB not present")
    from kb.loader import load_kb
    from kb.retrieve import Retriever

    vocab = Retriever(load_kb("fixtures/kb"), dense=False).vocabulary("public")
    assert normalize_transcript("how do I reset my rooter", vocab).text == "how do I reset my router"
    assert normalize_transcript("set up my voice male", vocab).text == "set up my voicemail"
    assert normalize_transcript("my e sim", vocab).text == "my eSIM"


@pytest.mark.parametrize("said,meant", [
    ("the u k and q r code", "the UK and QR code"),
    ("Can I a", "Can I a"),      # a run of only "I" and "a" at the end: words, not letters (was an IndexError)
    ("so I a m", "so I a m"),
])
def test_spelled_letters_join_and_lone_words_stay(said, meant):
    assert normalize_transcript(said).text == meant


@pytest.mark.parametrize("said,meant", [
    ("Yeah, hi. I'm on. I'm on the basic ticket.", "Yeah, hi. I'm on the basic ticket."),
    ("So how much, how much do you hold on my card?", "So how much do you hold on my card?"),
    ("I live on, live on my own now", "I live on my own now"),
    ("in twenty twenty six", "in 2026"),        # spoken numbers are read first: no restart
    ("is the code four four seven", "is the code 4 4 7"),  # repeated digits stay
])
def test_a_restart_keeps_one_copy(said, meant):
    assert normalize_transcript(said).text == meant


@pytest.mark.unit
def test_the_narrowed_near_spelling_search_finds_what_difflib_alone_finds():
    import difflib
    import random

    from kb.loader import load_kb
    from policy.normalize import _key, _Vocab

    words = sorted({w for s in load_kb("fixtures/kb").sections for w in s.text.split() if w.isalpha()})
    vocab = _Vocab(words)
    rng = random.Random(7)
    probes = [_key(w[:-1] + "x") for w in rng.sample(words, 150) if len(w) > 4]
    probes += [_key(a + b) for a, b in zip(rng.sample(words, 60), rng.sample(words, 60))]
    found = 0
    for k in probes:
        for cutoff in (0.75, 0.85):
            full = difflib.get_close_matches(k, vocab.keys, n=3, cutoff=cutoff)
            narrowed = vocab._close(k, cutoff)
            if not full:
                assert narrowed is None, k
                continue
            found += 1
            score = [difflib.SequenceMatcher(None, k, c).ratio() for c in full]
            tie = len(full) > 1 and score[1] >= score[0] - 1e-9 and vocab.by_key[full[0]].lower() != vocab.by_key[full[1]].lower()
            assert narrowed == (None if tie else vocab.by_key[full[0]]), k
    assert found > 50  # the probes do reach KB words


SYNONYMS = synonym_table({"annual leave": ["vacation days", "holiday allowance"], "paper bill": ["printed statement"],
                          "bill": ["invoice"]})


@pytest.mark.parametrize("said,meant", [
    ("How many vacation days do I get?", "How many annual leave do I get?"),
    ("Vacation days, how many?", "Annual leave, how many?"),
    ("What's my holiday allowance?", "What's my annual leave?"),
    ("my invoice is wrong", "my bill is wrong"),
    ("a printed statement costs what?", "a paper bill costs what?"),
    # not across punctuation inside the phrase, nor a part of a word
    ("I want a vacation, days off", "I want a vacation, days off"),
    ("my invoices are wrong", "my invoices are wrong"),
])
def test_the_callers_phrase_for_a_kb_phrase_is_read_as_the_kb_says_it(said, meant):
    assert normalize_transcript(said, None, SYNONYMS).text == meant


def test_a_synonym_rewrite_is_listed_and_nothing_without_synonyms():
    r = normalize_transcript("um my invoice", None, SYNONYMS)
    assert r.text == "my bill" and "synonym: invoice -> bill" in r.changes
    assert normalize_transcript("my invoice", None, {}).text == "my invoice"
