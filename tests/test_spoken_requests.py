"""Requests for a person in spoken turns: a long, doubtful hearing that only by its meaning reads as
one ("witch over from another agent") is not put through; a short one, a surely heard one, or any
turn a request pattern reads, is. Typed turns are read as before."""
from __future__ import annotations

import datetime as dt

import pytest

from policy.decision import Action, Reason
from policy.engine import Engine
from policy.intents import DOUBTFUL_LOGPROB, MAX_DOUBTFUL_ASK_WORDS, heard_intents
from policy.session import AsrSignal

pytestmark = pytest.mark.unit

GARBLED = "I may do have some beautiful and long-lived witch over from another agent."


def test_a_meaning_only_request_counts_unless_the_hearing_is_long_and_doubtful():
    found = {"human_request": 0.56, "distress": 0.6}
    short, doubtful = " ".join(["word"] * MAX_DOUBTFUL_ASK_WORDS), DOUBTFUL_LOGPROB - 0.1
    assert heard_intents(found, short, doubtful) == found
    assert heard_intents(found, short + " more", doubtful) == {"distress": 0.6}  # danger still counts
    assert heard_intents(found, short + " more", DOUBTFUL_LOGPROB + 0.1) == found  # heard surely
    assert heard_intents(found, short + " more", None) == found  # typed: read as ever


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return Engine.load("fixtures/kb", state_dir=tmp_path_factory.mktemp("state"), on_date=dt.date(2026, 11, 29))


def spoken(engine, text, avg_logprob=-0.9):
    asr = AsrSignal(avg_logprob=avg_logprob, no_speech_prob=0.1, raw_text=text)
    return engine.session().turn(text, asr=asr).decision


def test_a_long_garbled_hearing_is_not_put_through_but_the_same_words_typed_are(engine):
    assert "human_request" in engine.intents(GARBLED)  # the meaning reader's own reading, typed or heard
    assert engine.session().turn(GARBLED).decision.reasons == [Reason.human_requested]
    assert Reason.human_requested not in spoken(engine, GARBLED).reasons
    assert spoken(engine, GARBLED, avg_logprob=-0.1).reasons == [Reason.human_requested]


def test_doubtful_spoken_requests_a_pattern_reads_or_in_few_words_are_put_through(engine):
    long_ask = "I've been going round in circles with this for three weeks now and I just want to speak to a real person"
    assert len(long_ask.split()) > MAX_DOUBTFUL_ASK_WORDS
    for text in (long_ask, "Can I talk to an actual present please?"):
        d = spoken(engine, text)
        assert (d.action, d.reasons) == (Action.transfer, [Reason.human_requested]), text
