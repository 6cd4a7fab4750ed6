"""Cheap, deterministic readings of the caller's words: intent flags, stated facets, the kind of
fact a question asks for. Pure functions; the lexicons come from the policy file."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Iterable

from kb.tokenize import STOPWORDS, content_terms

from .config import PolicyConfig
from .language import OPENERS, clauses, negated, normalize_text, without_openers
from .numbers import durations


@lru_cache(maxsize=256)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


def first_match(text: str, patterns: Iterable[str]) -> str | None:
    """The first lexicon pattern that matches, or None (the pattern is logged, so reviewers see why)."""
    t = normalize_text(text)
    for rx in _compiled(tuple(patterns)):
        if rx.search(t):
            return rx.pattern
    return None


def first_reading(read: Callable[[str, PolicyConfig], str | None], texts: Iterable[str], cfg: PolicyConfig) -> str | None:
    """What `read` finds in the first of `texts` where it finds anything: a turn is read as repaired
    toward the KB's words, then as the caller said it, so a repair never hides a request."""
    return next((m for t in texts if t and (m := read(t, cfg))), None)


def human_requested(text: str, cfg: PolicyConfig) -> str | None:
    return first_match(text, cfg.lexicons.human_request)


def disallowed_request(text: str, cfg: PolicyConfig) -> str | None:
    return first_match(text, cfg.lexicons.disallowed)


def approval_action(text: str, cfg: PolicyConfig) -> str | None:
    return first_match(text, cfg.lexicons.approval_actions)


def lexicon_words(pattern: str) -> str:
    """The words a lexicon pattern is written with ("\\b(sue|lawyer|legal action)\\b" -> "sue lawyer
    legal action"): what the matched action is about, to search the KB with."""
    text = re.sub(r"\[([^\]])[^\]]*\]", r"\1", pattern)  # a character class reads as its first letter
    text = re.sub(r"\\[a-zA-Z]|\{[^}]*\}|[*+]", " ", text)
    text = re.sub(r"(\w)'?\?", r"\1", text)  # "didn'?t" -> "didnt", "charged?" -> "charged"
    words = re.findall(r"[a-z][a-z']+", text)
    return " ".join(dict.fromkeys(w for w in words if w not in STOPWORDS and len(w) > 2))


def facet_vocabulary(cfg: PolicyConfig, kb_facets: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """Phrases per facet value: the KB's own applies_to values plus the policy's spoken synonyms."""
    vocab: dict[str, dict[str, list[str]]] = {}
    for key, values in kb_facets.items():
        for value in values:
            phrases = {value.lower(), value.lower().replace("_", " ")}
            phrases.update(p.lower() for p in cfg.facet_synonyms.get(key, {}).get(value, []))
            vocab.setdefault(key, {})[value] = sorted(phrases, key=len, reverse=True)
    return vocab


@lru_cache(maxsize=1024)
def _phrase(phrase: str) -> re.Pattern[str]:
    """A facet phrase as a whole word or words ("business", not the "business" in "small-business"),
    however its words are joined: "part_time", "part time" and "part-time" are one phrase, and so are
    "offpeak" and "off-peak"."""
    return re.compile(r"(?<![\w-])" + "[ _-]?".join(re.escape(ch) for ch in _unjoined(phrase)) + r"(?![\w-])")


def _unjoined(text: str) -> str:
    """`text` without the spaces, hyphens and underscores a phrase's words may be joined by."""
    return text.replace(" ", "").replace("_", "").replace("-", "")


def _next_term(text: str, end: int) -> str | None:
    m = re.match(r"\s+([a-z][a-z'-]*)", text[end:])
    terms = content_terms(m.group(1)) if m else []
    return terms[0] if terms else None


def facet_idioms(vocab: dict[str, dict[str, list[str]]],
                 texts: Iterable[tuple[dict[str, str], str]]) -> dict[str, set[str]]:
    """For each one-word facet phrase, the words that follow it in the KB's own text where that text
    is not scoped to the phrase's value: "business days" in the personal refund page, "personal data"
    in the privacy page. There the word names something else, not who the caller is. `texts`: each
    section's text with its document's applies_to."""
    single = {(p, key, value) for key, values in vocab.items() for value, ps in values.items()
              for p in ps if " " not in p and "-" not in p}
    idioms: dict[str, set[str]] = {}
    for scope, text in texts:
        t = normalize_text(text)
        bare = _unjoined(t)  # a phrase the text does not hold, however joined, needs no search
        for p, key, value in single:
            if scope.get(key) == value or _unjoined(p) not in bare:
                continue
            for m in _phrase(p).finditer(t):
                if nxt := _next_term(t, m.end()):
                    idioms.setdefault(p, set()).add(nxt)
    return idioms


def stated_facets(text: str, vocab: dict[str, dict[str, list[str]]],
                  idioms: dict[str, set[str]] | None = None) -> dict[str, str]:
    """Facets the caller states ("I'm a business customer", "I'm on prepaid").

    A key is filled only when exactly one of its values is mentioned; "personal or business?" says
    nothing about the caller, and neither does "not business" (negated mentions are ignored), nor a
    one-word phrase in one of the KB's `idioms` ("how many business days")."""
    found: dict[str, str] = {}
    for key, values in _facet_mentions(normalize_text(text), vocab, idioms).items():
        if len(values) == 1:
            found[key] = next(iter(values))
    return found


def _facet_mentions(t: str, vocab: dict[str, dict[str, list[str]]], idioms: dict[str, set[str]] | None,
                    spans: list[tuple[int, int]] | None = None) -> dict[str, set[str]]:
    """The values each facet key is mentioned with in normalized text `t` (negated mentions and
    idioms left out); the mentions' character spans go into `spans`."""
    mentions: dict[str, set[str]] = {}
    for key, values in vocab.items():
        for value, phrases in values.items():
            for phrase in phrases:
                for m in _phrase(phrase).finditer(t):
                    if idioms and _next_term(t, m.end()) in idioms.get(phrase, ()):
                        continue
                    if not _negated_mention(t[:m.start()]):
                        mentions.setdefault(key, set()).add(value)
                        if spans is not None:
                            spans.append(m.span())
    return mentions


def stated_durations(text: str, values: dict[str, set[str]]) -> dict[str, str]:
    """For keys whose values are lengths of time (`12_month`, `24_month`), the one value whose length
    the text states however said ("the two-year one"), in a clause that does not negate it. Read only
    for a key we asked about: unasked, "can I leave within a year?" names no contract."""
    timed = {key: {v: d for v in vals if (d := durations(v))} for key, vals in values.items()}
    if not any(timed.values()):  # most keys are not lengths of time: the turn need not be read
        return {}
    said = set().union(*(durations(c) for c in clauses(text) if not negated(c)))
    found = {}
    for key, by_value in timed.items():
        named = {v for v, d in by_value.items() if d & said}
        if len(named) == 1:
            found[key] = next(iter(named))
    return found


def _negated_mention(before: str) -> bool:
    """Whether the words right before a mention negate it ("not business", "isn't a business")."""
    words = before.split()[-2:]
    if words and words[-1] in ("a", "an"):
        words = words[:-1]
    return bool(words) and negated(words[-1])


def without_facet_phrases(text: str, vocab: dict[str, dict[str, list[str]]],
                          idioms: dict[str, set[str]] | None = None) -> str:
    """Normalized `text` with the phrases that state a facet blanked out ("i'm a  . how many lines
    can i have?"): what is left is what the caller asks."""
    t = normalize_text(text)
    spans: list[tuple[int, int]] = []
    _facet_mentions(t, vocab, idioms, spans)
    chars = list(t)
    for a, b in spans:
        chars[a:b] = " " * (b - a)
    return "".join(chars)


# Turns that are only social: a greeting, thanks, or goodbye. Searched as questions, "thanks"
# would be refused as unanswerable. The whole turn must be made of these words.
_SOCIAL: list[tuple[str, str]] = [
    ("closing", r"(good)?bye( bye)?|see you|that('?s| is) (all|it|everything)( for (now|today))?|nothing else|"
                r"no,? thanks?( you)?|no,? that'?s (all|it|fine)|i'?m (all )?(done|good|fine)( now)?|"
                r"have a (good|nice|great) (day|one|evening)|all (done|good|sorted)"),
    ("thanks", r"thanks?( you)?( so much| very much| a lot)?|cheers|(that'?s )?(great|perfect|brilliant|lovely|"
               r"helpful|wonderful)|that helps|much appreciated"),
    ("ack", r"got it|ok(ay)?|alright|all right|right|sure|fine|(very )?(good|nice)|i see|understood|mm+|hmm+"),
    ("greeting", r"hi|hello|hey|hiya|good (morning|afternoon|evening)|yes,? hello|hello there|hi there"),
]
_SOCIAL_PART = re.compile(r"^(?:" + "|".join(f"(?P<{k}>{rx})" for k, rx in _SOCIAL) + r")$")


def _social(part: str) -> str | None:
    """The kind of social phrase a clause is, as said or after its openers ("yes, hello")."""
    for said in (part, without_openers(part)):
        if m := _SOCIAL_PART.match(said):
            return m.lastgroup
    return None


def small_talk(text: str) -> str | None:
    """'closing', 'thanks', 'ack' or 'greeting' when every part of the turn is one; of several
    ("OK, thanks, bye") the earliest in that list wins; None when anything else is said."""
    raw = clauses(text)
    declined = any(p.split()[0] == "no" for p in raw)
    # "um", "yes", "no" beside a social phrase say nothing more; on their own they answer something
    said = [p for p in raw if _social(p) or not set(p.split()) <= OPENERS]
    if not said:
        return None
    kinds: set[str] = set()
    for p in said:
        kind = _social(p)
        if kind is None:
            return None
        kinds.add(kind)
    if kinds <= {"thanks", "ack"} and declined:
        return "closing"  # "No, thank you" to "anything else?"
    for kind, _ in _SOCIAL:
        if kind in kinds:
            return kind
    return None
