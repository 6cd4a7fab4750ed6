"""Tokenization: the same normalization on both sides of the index."""
from __future__ import annotations

import pytest

from kb.tokenize import STOPWORDS, content_terms, stem, tokenize

pytestmark = pytest.mark.unit


def test_lowercase_and_punctuation():
    assert tokenize("Router, RESET!  (now)") == ["router", "reset", "now"]


@pytest.mark.parametrize(
    "words, expected",
    [
        (["refunds", "refund", "refunded", "refunding"], "refund"),
        (["charges", "charge", "charged", "charging"], "charg"),
        (["cancelled", "cancelling", "cancellation", "cancel", "cancels", "canceled"], "cancel"),
        (["policies", "policy"], "policy"),
        (["applies", "applied", "apply"], "apply"),
    ],
)
def test_stem_variants_meet(words, expected):
    assert {stem(w) for w in words} == {expected}


def test_contractions_expand():
    assert tokenize("I can't, I'm, won't, isn't") == ["i", "can", "not", "i", "am", "will", "not", "is", "not"]
    assert tokenize("I\u2019m") == ["i", "am"]  # typographic apostrophe, as ASR and editors write it


def test_money_units():
    a, b = tokenize("a $25 fee"), tokenize("a fee of 25 dollars")
    for t in ("25", "usd", "25usd"):
        assert t in a and t in b


@pytest.mark.parametrize("a, b", [("5GB", "5 GB"), ("5 gigabytes", "5gb"), ("24h", "24 hours"), ("30-day", "30 days")])
def test_number_unit_joined(a, b):
    ja = {t for t in tokenize(a) if t[0].isdigit() and not t.isdigit()}
    jb = {t for t in tokenize(b) if t[0].isdigit() and not t.isdigit()}
    assert ja and ja == jb


def test_hyphenated_keeps_parts_and_joined():
    assert tokenize("auto-renewal") == ["auto", "renewal", "autorenewal"]
    assert "wifi" in tokenize("Wi-Fi") and "wifi" in tokenize("wifi")


def test_number_range_not_joined():
    assert tokenize("5-10 days") == ["5", "10", "day"]


def test_content_terms_drop_stopwords_dedupe_keep_order():
    terms = content_terms("Hi, can I get a refund for the refund of my cancelled plan please?")
    assert terms == ["refund", "cancel", "plan"]
    assert not set(terms) & STOPWORDS


def test_chinese_is_segmented():
    terms = content_terms("我想取消套餐并退款")
    assert "取消" in terms and "退款" in terms and "套餐" in terms


def test_empty():
    assert tokenize("") == [] and content_terms("  ?! ") == []
