"""What the policy knows of English, in one place: the text form lexicons are matched against, what
kind of fact a question asks for, whether a text holds that kind of fact, and how specific a word
is. Everything here is general language knowledge, never a domain's words."""
from __future__ import annotations

import calendar
import re
from functools import lru_cache
from typing import Literal

from .numbers import quantities

FactKind = Literal["amount", "duration", "when", "count", "contact", "any"]

# What a question asks for, read from its question words. First match wins; anything else is "any"
# (a which/where/how-do-I/yes-no question, answered by whatever the best sentence says).
_KIND_OF_QUESTION: list[tuple[FactKind, re.Pattern[str]]] = [
    ("duration", re.compile(r"\bhow (long|soon|quickly|many (days|hours|weeks|months|minutes|years)|much (notice|time|"
                            r"longer|warning))\b")),
    # the figure is what is asked ("what's the fee", "is there a charge"), not a charge the question
    # only mentions ("what code do I put on to waive the charge")
    ("amount", re.compile(r"\bhow much\b"
                          r"|\bwhat(s|'s| is| are| will| would| does| do)?( [a-z']+){0,4} (cost|price|fee|charge|rate)s?\b"
                          r"|\b(cost|charge)s? (me |us )?(anything|extra|more)\b"
                          r"|\b(does|do|will|would|is) (it|that|this|they|you) (cost|charge)\b"
                          r"|\b(is|are) there (a |an |any )?([a-z-]+ )?(cost|price|fee|charge)s?\b")),
    # "when does it arrive", not "when I'm away, which should I choose"
    ("when", re.compile(r"(^|[,;] )when\b(?! (i|i'm|we|we're|you|you're|it's|my|the)\b)|\bwhen (is|are|was|will|would|do|does"
                        r"|did|can|should|'s)\b|\bwhat (time|date|day)\b|\bhow (late|early)\b|\bby when\b")),
    ("count", re.compile(r"\bhow many\b")),
    # a way to reach someone: answered only by the number or address itself
    ("contact", re.compile(r"\b(phone|telephone|contact|helpline|mobile) number\b|\bemail address\b|\bweb ?(site )?address\b"
                           r"|\bwhat('s| is) (the|your) (number|email)\b|\bnumber (to|do i|should i|can i|i) (call|ring|phone|text)\b")),
]
# A phone number, an email address or a web address.
_CONTACT = re.compile(r"(?<![\w-])\+?\d(?:[ -]?\d){8,}(?![\w-])|[\w.+-]+@[\w-]+\.\w|\bwww\.|\b[\w-]+\.(com|org|net|co\.uk|org\.uk|gov\.uk|ac\.uk)\b")
# Words and phrases that state a fact of a kind without a figure ("free", "immediately", "same day"),
# matched as whole phrases: "same" alone is not a time ("the same tyre"), nor is "away" ("take it away").
_SOON = ("immediately", "instantly", "straight away", "right away", "overnight", "until", "same day", "same working day",
         "same business day", "next day", "next working day", "next business day")
_KIND_PHRASES: dict[str, tuple[str, ...]] = {
    "amount": ("free",),
    "duration": _SOON,
    "when": _SOON + tuple(d.lower() for d in calendar.day_name) + ("midnight", "noon", "weekday", "weekdays", "weekend"),
    "count": ("unlimited",),
}
_KIND_QUANTITIES: dict[str, frozenset[str]] = {
    "amount": frozenset({"money", "percent"}), "duration": frozenset({"time"}),
    "when": frozenset({"time", "date", "clock"}), "count": frozenset({"number", "data", "time"}),
}


def normalize_text(text: str) -> str:
    """Lower-case, unify quotes and whitespace, drop the sentence's closing punctuation: the form
    lexicons are matched against. "?" and "." must never decide an action (ASR adds either)."""
    t = " ".join(text.replace("\u2019", "'").replace("\u2018", "'").lower().split())
    return t.rstrip("?.! ").strip()


def fact_kind(question: str) -> FactKind:
    t = normalize_text(question)
    for kind, rx in _KIND_OF_QUESTION:
        if rx.search(t):
            return kind
    return "any"


@lru_cache(maxsize=20000)
def holds_kind(kind: FactKind, text: str) -> bool:
    """Whether a sentence states a fact of the asked kind: a figure of a fitting unit, or a word
    that states it ("free", "immediately"). Every sentence fits a question of kind "any"."""
    if kind == "any":
        return True
    if kind == "contact":
        return bool(_CONTACT.search(text.lower()))
    words = " " + " ".join(re.findall(r"[a-z]+", text.lower())) + " "
    if any(f" {p} " in words for p in _KIND_PHRASES[kind]):
        return True
    return any(q.kind in _KIND_QUANTITIES[kind] for q in quantities(text))


def quantity_kinds(kind: FactKind) -> frozenset[str] | None:
    """The kinds of figure (`numbers.Quantity.kind`) that answer a question of this kind; None for "any"."""
    return _KIND_QUANTITIES.get(kind)


@lru_cache(maxsize=50000)
def specificity(word: str) -> float:
    """How much a word names a subject rather than frames a sentence, from its frequency in general
    English (wordfreq): "take", "long", "much" are near 0.2; "voicemail", "prepayment" are 1."""
    from wordfreq import zipf_frequency  # heavy: 0.1 s of word lists, loaded on the first turn

    z = zipf_frequency(word, "en")
    return min(1.0, max(0.15, (7.0 - z) / 3.5))


# Sounds that hold the floor without being words; transcripts drop them (normalize), WER ignores them.
FILLERS = frozenset({"um", "umm", "uh", "uhh", "uhm", "er", "erm", "ah", "eh", "hmm", "hm", "mm", "mhm"})
# Words that open a turn or a clause before it says anything: "so", "okay", "well, um, how do I ...".
OPENERS = FILLERS | frozenset("so and but ok okay right well oh also then actually sorry yeah yes no hi hello hey".split())
# The first word of a clause that asks: a question word or an inverted verb ("can I", "is there").
_ASKING = frozenset("how what what's whats when where why which who whose can could do does did is are will would "
                    "should am may have has".split())


def without_openers(text: str) -> str:
    """`text` from its first word that says something; the last word always stays."""
    words = text.split()
    i = 0
    while i < len(words) - 1 and words[i].strip(",.!?;:").lower() in OPENERS:
        i += 1
    return " ".join(words[i:])


def _asks(clause: str) -> bool:
    first = without_openers(clause).split()[:1]
    return bool(first) and first[0].strip(",.!?;:") in _ASKING


# Where one clause ends and the next begins: punctuation before a space (not the "." in "7.50"), or a
# word that joins two clauses. Each side is read on its own: its intent, a facet it states, whether it asks.
_CLAUSE_BREAK = re.compile(r"[,.;!?]+(?=\s|$)|\s[-\u2013\u2014]+(?=\s)|(?:^|\s)(?:and|but|so|then)(?=\s|$)")
# Where a piece of a turn ends: punctuation before a space, kept with the piece. A question's own "and"
# ("shut the door and stop boarding") stays inside it.
_SENTENCE_BREAK = re.compile(r"(?<=[,.;!?])\s+")
_NEGATION = re.compile(r"\b(?:not|never|no|nothing|dont)\b|n't\b")
# Words that open a clause inside a run-on turn, where ASR wrote no punctuation: a question word opens
# the question it asks ("... my membership when does it start"), the caller's own "I'm", "I've", "I'd",
# "I'll" what they say of themselves ("... put my windows in I'm scared to go out"), and a plain "I" or
# "we" may open what they say they are ("it's for the shop I run a hairdresser's").
_OPENS_INSIDE = re.compile(r"\s(?=(?:(?P<ask>how|what|what's|whats|when|where|why|which|who|whose)"
                           r"|(?P<self>i'm|i've|i'd|i'll)|(?P<subject>i|we|we're|we've|we'd|we'll))\b)")


def clauses(text: str) -> list[str]:
    """The turn's clauses, normalized (the one splitter every reading of clauses uses)."""
    return [c.strip() for c in _CLAUSE_BREAK.split(normalize_text(text)) if c.strip()]


def run_on_parts(clause: str, *openers: Literal["ask", "self", "subject"]) -> list[str]:
    """A clause cut before each word of those kinds that would open a clause had the transcript been
    punctuated: a question word ("ask"), the caller's "I'm", "I've", "I'd", "I'll" ("self"), a plain
    "I" or "we" ("subject")."""
    cuts = [m.start() for m in _OPENS_INSIDE.finditer(clause) if any(m.group(o) for o in openers)]
    bounds = [0, *cuts, len(clause)]
    return [clause[a:b].strip() for a, b in zip(bounds, bounds[1:]) if clause[a:b].strip()]


def run_on_pieces(parts: list[str], *openers: Literal["ask", "self", "subject"]) -> list[str]:
    """The pieces, of three words or more, of the clauses that `run_on_parts` cuts: read beside the
    clauses themselves, so that a short "I'm scared" is not lost in a long run-on clause."""
    return [p for c in parts if len(cut := run_on_parts(c, *openers)) > 1 for p in cut if len(p.split()) >= 3]


def negated(text: str) -> bool:
    """Whether the text holds a negation ("not", "no longer", "isn't", "never")."""
    return bool(_NEGATION.search(normalize_text(text)))


def asks_question(text: str) -> bool:
    """Whether some clause of the turn asks something by its words (never by a "?", which ASR may
    or may not write): a question word or an inverted verb opens it."""
    return any(_asks(c) for c in clauses(text))


def sentences(normalized: str) -> list[str]:
    """The pieces of a normalized turn between punctuation marks, each with its own mark."""
    return [p for p in _SENTENCE_BREAK.split(normalized) if p.strip()]


def question_focus(text: str) -> str | None:
    """The clause that asks, when the turn says more than its question ("my new card came this
    morning and the tap thing won't work, what's going on"): None when the whole turn is the question."""
    parts = [p.strip(" ,.;!?") for c in sentences(normalize_text(text)) for p in run_on_parts(c, "ask") if p.strip(" ,.;!?")]
    asking = [c for c in parts if _asks(c)]
    if len(parts) < 2 or not asking or len(asking[-1].split()) < 3:
        return None
    return asking[-1]
