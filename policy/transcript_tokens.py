"""Tokens of a caller's transcript, and the spoken numbers among them, for `normalize`.

A token keeps the punctuation around its word (`pre`, `core`, `post`) so passes can rewrite or
drop words and still put the sentence back together as it was said. Spoken numbers become
digits ("twenty four hours" -> "24 hours", "two point five" -> "2.5", "twenty twenty six" -> 2026).
"""
from __future__ import annotations

import re
from collections.abc import Collection

__all__ = ["Tok", "tokens", "join_tokens", "parse_number", "spoken_numbers"]

_UNITS = {"zero": 0, "oh": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
          "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
          "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
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
            p.lower() in _UNITS or p.lower() in _TENS for p in chunk.split("-")) else [chunk]
        out.extend(Tok(p) for p in parts)
    return out


def join_tokens(toks: list[Tok]) -> str:
    """The tokens back as text, without the stray spaces and commas left by dropped words."""
    s = " ".join(str(t) for t in toks if str(t))
    s = re.sub(r"\s+([,.;:?!])", r"\1", s)
    s = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", s)  # ", ," left by a dropped filler
    s = re.sub(r"^[\s,;:]+", "", s)
    return re.sub(r"\s{2,}", " ", s).strip()


def parse_number(words: list[str]) -> tuple[float | int | None, int]:
    """Longest spoken number at the start of `words` → (value, words used)."""
    total, current, used, last = 0, 0, 0, ""
    i = 0
    while i < len(words):
        w = words[i]
        if w in _UNITS and w != "oh":
            if last in ("unit", "teen") or (last == "tens" and _UNITS[w] >= 10) or last == "tens_unit":
                break
            current += _UNITS[w]
            last = "teen" if _UNITS[w] >= 10 else ("tens_unit" if last == "tens" else "unit")
        elif w in _TENS:
            if last in ("unit", "teen", "tens", "tens_unit"):
                break
            current += _TENS[w]
            last = "tens"
        elif w in _SCALES:
            if w == "hundred":
                current = max(current, 1) * 100
            else:
                total += max(current, 1) * _SCALES[w]
                current = 0
            last = "scale"
        elif w == "and" and last == "scale" and i + 1 < len(words) and (words[i + 1] in _UNITS or words[i + 1] in _TENS):
            i += 1
            continue
        elif w == "a" and i + 1 < len(words) and words[i + 1] in _SCALES and used == 0:
            current = 1
            used = i + 1
            i += 1
            continue
        else:
            break
        i += 1
        used = i
    if used == 0:
        return None, 0
    value: float | int = total + current
    # Decimals: "two point five" → 2.5 (digits after "point" are read one by one).
    if used + 1 < len(words) and words[used] == "point" and words[used + 1] in _UNITS and _UNITS[words[used + 1]] < 10:
        digits, j = "", used + 1
        while j < len(words) and words[j] in _UNITS and _UNITS[words[j]] < 10:
            digits += str(_UNITS[words[j]])
            j += 1
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
