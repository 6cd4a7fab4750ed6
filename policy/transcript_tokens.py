"""Tokens of a caller's transcript, and the spoken numbers among them, for `normalize`.

A token keeps the punctuation around its word (`pre`, `core`, `post`) so passes can rewrite or
drop words and still put the sentence back together as it was said. Spoken numbers become
digits ("twenty four hours" -> "24 hours", "two point five" -> "2.5", "twenty twenty six" -> 2026).
The words of a number are read by text2num, as every other number is (policy/numbers.py); only how
a transcript runs them together (a year said in pairs, "a hundred", "point five") is read here.
"""
from __future__ import annotations

import re
from collections.abc import Collection
from functools import lru_cache

from text_to_num import text2num

__all__ = ["Tok", "tokens", "join_tokens", "parse_number", "spoken_numbers"]

# "one" alone is often not a number ("no one", "which one"); convert it only before these.
# ("one day pass" stays: product names are often spelled out.)
_COUNTED = {"dollar", "dollars", "buck", "bucks", "cent", "cents", "euro", "euros", "pound", "pounds", "hour",
            "hours", "week", "weeks", "month", "months", "year", "years", "minute", "minutes", "second",
            "seconds", "gigabyte", "gigabytes", "megabyte", "megabytes", "gb", "mb", "percent"}
# Spoken unit → abbreviation, used only when the KB writes the abbreviation and not the word.
_UNIT_ABBR = {"gigabytes": "GB", "gigabyte": "GB", "megabytes": "MB", "megabyte": "MB", "terabytes": "TB",
              "terabyte": "TB", "gigs": "GB", "gig": "GB", "megabits": "Mbps", "gigabits": "Gbps",
              "bucks": "dollars", "buck": "dollars"}


_SPLIT = re.compile(r"^([^\w$£€]*)(.*?)([^\w%]*)$", re.S)


class Tok:
    """One word with the punctuation before (`pre`) and after (`post`) it."""

    __slots__ = ("pre", "core", "post")

    def __init__(self, chunk: str):
        m = _SPLIT.match(chunk)
        assert m
        self.pre, self.core, self.post = m.group(1), m.group(2), m.group(3)

    @property
    def low(self) -> str:
        return self.core.lower()

    def __str__(self) -> str:
        return self.pre + self.core + self.post


def tokens(text: str) -> list[Tok]:
    """Whitespace-separated tokens; hyphenated number words count as separate words."""
    out: list[Tok] = []
    for chunk in text.split():
        # "twenty-four", "e-sim": hyphenated spoken pieces are handled word by word.
        parts = chunk.split("-") if re.fullmatch(r"[A-Za-z]+(?:-[A-Za-z]+)+[^\w]*", chunk) and any(
            _is_number_word(p.lower()) for p in chunk.split("-")) else [chunk]
        out.extend(Tok(p) for p in parts)
    return out


def join_tokens(toks: list[Tok]) -> str:
    """The tokens back as text, without the stray spaces and commas left by dropped words."""
    s = " ".join(str(t) for t in toks if str(t))
    s = re.sub(r"\s+([,.;:?!])", r"\1", s)
    s = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", s)  # ", ," left by a dropped filler
    s = re.sub(r"^[\s,;:]+", "", s)
    return re.sub(r"\s{2,}", " ", s).strip()


@lru_cache(maxsize=8192)
def _value(words: tuple[str, ...]) -> int | None:
    """The number these words say, all of them, or None ("twenty four" is 24; "twenty four hours",
    "twenty twenty" and "a hundred" are none)."""
    try:
        return int(text2num(" ".join(words), "en"))
    except ValueError:
        return None


def _is_number_word(word: str) -> bool:
    """A word of a cardinal. text2num also reads plurals ("the luxury ones", "tens") and "o" as
    numbers; no cardinal's word ends in "s"."""
    return len(word) > 1 and word != "and" and not word.endswith("s") and _value((word,)) is not None


def _longest(words: list[str]) -> tuple[int | None, int]:
    """The longest run of `words` from the first that says one number, and how many words it takes."""
    n = 0
    while n < min(len(words), 12) and (_is_number_word(words[n]) or words[n] == "and"):
        n += 1
    for m in range(n, 0, -1):
        if (value := _value(tuple(words[:m]))) is not None:
            return value, m
    return None, 0


def parse_number(words: list[str]) -> tuple[float | int | None, int]:
    """Longest spoken number at the start of `words` → (value, words used)."""
    if len(words) > 1 and words[0] == "a" and _value((words[1],)) in (100, 1000, 1_000_000):
        value, used = _longest(["one", *words[1:]])  # "a hundred dollars"
    else:
        value, used = _longest(words)
    if value is None:
        return None, 0
    # Decimals: "two point five" → 2.5, "two point oh five" → 2.05 (digits after "point", one by one).
    if used + 1 < len(words) and words[used] == "point":
        digits, j = "", used + 1
        while j < len(words) and (d := 0 if words[j] == "oh" else _value((words[j],))) is not None and d < 10:
            digits, j = digits + str(d), j + 1
        if digits:
            return float(f"{value}.{digits}"), j
    return value, used


def spoken_numbers(toks: list[Tok], changes: list[str], kb_words: Collection[str]) -> list[Tok]:
    """Spoken numbers as digits; a spoken unit after one becomes its abbreviation where the KB
    (`kb_words`: its terms, lower-cased) writes the abbreviation and not the word."""
    out: list[Tok] = []
    i = 0
    while i < len(toks):
        words = []
        for t in toks[i : i + 12]:
            words.append(t.low)
            if t.post.strip(" ") and t.post.strip() not in ("-",):
                break  # punctuation ends a number ("four, five" are two)
        value, n = parse_number(words)
        if value is None:
            out.append(toks[i])
            i += 1
            continue
        # Years: "twenty twenty six" → 2026, "nineteen ninety nine" → 1999.
        if n < len(words) and value in (19, 20) and n == 1:
            rest, m = parse_number(words[1:])
            if rest is not None and isinstance(rest, int) and 10 <= rest <= 99:
                value, n = value * 100 + rest, 1 + m
        spoken = [t.core for t in toks[i : i + n]]
        nxt = toks[i + n].low if i + n < len(toks) else ""
        if n == 1 and words[0] == "one" and nxt not in _COUNTED:
            out.append(toks[i])
            i += 1
            continue
        first, last = toks[i], toks[i + n - 1]
        new = Tok(str(value))
        new.pre, new.post = first.pre, last.post
        changes.append(f"number: {' '.join(spoken)} -> {value}")
        out.append(new)
        i += n
        # "ten gigabytes" → "10 GB" only where the KB writes "GB" and never "gigabytes".
        if i < len(toks):
            unit = toks[i]
            abbr = _UNIT_ABBR.get(unit.low)
            if abbr and (abbr.lower() in kb_words or abbr == "dollars") and unit.low not in kb_words:
                changes.append(f"unit: {unit.core} -> {abbr}")
                unit.core = abbr
    return out
