"""Cheap, deterministic readings of the caller's words: intent flags, stated facets, the kind of
fact a question asks for. Pure functions; the lexicons come from the policy file."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, Literal

from .config import PolicyConfig

FactKind = Literal["duration", "amount", "date", "clock", "procedure", "count", "any"]


def normalize_text(text: str) -> str:
    """Lower-case, unify quotes and whitespace: the form lexicon patterns are written against."""
    t = text.replace("\u2019", "'").replace("\u2018", "'").lower()
    return re.sub(r"\s+", " ", t).strip()


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


def human_requested(text: str, cfg: PolicyConfig) -> str | None:
    return first_match(text, cfg.lexicons.human_request)


def disallowed_request(text: str, cfg: PolicyConfig) -> str | None:
    return first_match(text, cfg.lexicons.disallowed)


def approval_action(text: str, cfg: PolicyConfig) -> str | None:
    return first_match(text, cfg.lexicons.approval_actions)


def lexicon_words(pattern: str) -> str:
    """The words a lexicon pattern is written with ("\\b(sue|lawyer|legal action)\\b" -> "sue lawyer
    legal action"): what the matched action is about, to search the KB with."""
    from kb.tokenize import STOPWORDS

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
    """A facet phrase as a whole word or words ("business", not the "business" in "small-business")."""
    return re.compile(r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])")


def _next_term(text: str, end: int) -> str | None:
    from kb.tokenize import content_terms

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
        for p, key, value in single:
            if scope.get(key) == value or p not in t:
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
                    before = t[max(0, m.start() - 12):m.start()]
                    if idioms and _next_term(t, m.end()) in idioms.get(phrase, ()):
                        continue
                    if not re.search(r"\b(not|isn't|aren't|no)\s+(an?\s+)?$", before):
                        mentions.setdefault(key, set()).add(value)
                        if spans is not None:
                            spans.append(m.span())
    return mentions


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


_FACT_PATTERNS: list[tuple[FactKind, str]] = [
    ("duration", r"\bhow (long|many (days|hours|weeks|months|minutes))\b|\bhow soon\b|\bwithin how\b"),
    ("amount", r"\bhow much\b|\b(have|need|got) to pay\b|\bpay (extra|more|anything) for\b"
               r"|\bwhat\b.*\b(price|cost|fee|charge|rate)s?\b|\bcost\b|\bprice\b|\bfee\b"
               r"|[$€£]\s?\d|\b\d+(\.\d+)? ?(dollars?|cents?|euros?|pounds?)\b"),
    # a time of day: "what time does the store shut", "how late is the line open", "opening hours"
    ("clock", r"\bwhat time\b|\bhow (late|early)\b|\b(opening|closing) (time|hour)s?\b"),
    ("date", r"\bwhen (is|are|will|do|does)\b.*\b(due|start|end|expire|renew|close|open)\b|\bwhat date\b|\bwhich day\b"),
    ("count", r"\bhow many\b"),
    ("procedure", r"\bhow (do|can|should|would) (i|we|you)\b|\bwhat (are the )?steps\b|\bhow to\b|\bwhere do i\b"),
]

_FACT_EVIDENCE: dict[FactKind, str] = {
    # "5 to 10 business days", "24 hours", "within 14 days", "two weeks"
    "duration": r"\b(\d+|one|two|three|four|five|six|seven|ten|fourteen|thirty)\s*(to\s*\d+\s*)?(-\s*\d+\s*)?"
                r"(business |working |calendar )?(second|minute|hour|day|week|month|year)s?\b|\bimmediately\b|\binstantly\b|\bsame day\b|\bnext (business )?day\b",
    "amount": r"[$€£¥]\s?\d|\b\d+(\.\d+)?\s?(dollars?|cents?|usd|eur|%|percent)\b|\bfree\b|\bno (charge|fee|cost)\b",
    # a "when" is also answered relative to an event: "21 days after the bill date"
    "date": r"\b\d+\s*(business |working |calendar )?(day|week|month)s? (after|before|from)\b|\bbill date\b|\b(19|20)\d\d-\d\d(-\d\d)?\b|\b(january|february|march|april|may|june|july|august|september|october|november|december)\b|"
            r"\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b|\b\d+(st|nd|rd|th)\b|\bday of\b|\bbilling date\b",
    "clock": r"\b\d{1,2}(:\d\d)?\s?(am|pm|a\.m\.|p\.m\.)|\b\d{1,2}:\d\d\b|\bnoon\b|\bmidnight\b|\b24 hours\b|\b24/7\b",
    "count": r"\b\d+\b|\b(one|two|three|four|five|six|seven|eight|nine|ten|unlimited)\b",
    "procedure": r"\b(go to|open|select|tap|press|dial|call|visit|log in|sign in|choose|enter|send|text|click|follow|hold|reply|fill|bring|sign|turn|restart|insert|scan)\b",
}


def fact_kind(question: str) -> FactKind:
    """What kind of fact would settle the question (a duration, an amount, a date, steps)."""
    t = normalize_text(question)
    for kind, rx in _FACT_PATTERNS:
        if re.search(rx, t):
            # "How do I get my refund?" asks how the refund reaches the caller: a process the
            # evidence describes ("refunds are paid to the original card"), not steps to follow.
            if kind == "procedure" and re.search(r"\bhow (do|can|will|would) (i|we) (get|receive)\b", t):
                return "any"
            return kind
    return "any"


# Headings that say which kind of fact their section gives ("How to turn roaming on", "When the money
# arrives", "Replacement SIM fee"): KB headings are often the question they answer.
_HEADING_FORM: dict[FactKind, str] = {
    # "How to …", "Steps …", or an action in -ing ("Turning …", "Requesting …"; not "Roaming …")
    "procedure": r"^(how (to|do|can)|steps?)\b|^(turn|sett|putt|switch|gett|chang|add|activat|apply|pay|book|cancel+|"
                 r"request|reset|install|find|mak|submitt|us|updat|topp|mov|transferr|register|open|clos|start|stopp|"
                 r"block)ing\b",
    "duration": r"\bhow long\b|\b(takes?|lasts?)\b|\bwhen .*\b(arrives?|ready|completes?|back|paid)\b",
    "amount": r"\b(costs?|prices?|pricing|fees?|charges?|rates?|how much)\b",
    "date": r"\bdates?\b|\bdue\b|\bdeadlines?\b",
    "count": r"\bhow many\b|\blimits?\b|\bnumber of\b|\bmaximum\b|\ballowances?\b",
    "clock": r"\bhours\b|\bopening\b|\btimes?\b",
}


def heading_fits(kind: FactKind, heading: str) -> bool:
    rx = _HEADING_FORM.get(kind)
    return rx is not None and re.search(rx, normalize_text(heading)) is not None


def evidence_has_fact(kind: FactKind, text: str) -> bool:
    if kind == "any":
        return True
    return re.search(_FACT_EVIDENCE[kind], normalize_text(text)) is not None


_ACTION_LEAD = re.compile(
    r"\b(?:how (?:do|can|could|would|should) (?:i|we)|can (?:i|we|you)|could (?:i|we|you)|"
    r"(?:i|we) (?:want|need|would like|'d like) to|is it possible to|help me|how to)\s+(?:please\s+)?([a-z]+)")
# Verbs too general to name what the caller wants done; the object carries the meaning there.
GENERIC_VERBS = frozenset("get have make do be use see know find go keep ask tell pay check buy add set "
                           "call talk speak put give take turn switch".split())


def action_verb(question: str) -> str | None:
    """The specific thing the caller wants to do ("cancel", "pause", "change"), as an index term.

    A section that never mentions that action cannot tell the caller how to do it, however close its
    topic (a renewal-rules page for "how do I cancel auto-renewal")."""
    from kb.tokenize import content_terms

    m = _ACTION_LEAD.search(normalize_text(question))
    if not m or m.group(1) in GENERIC_VERBS:
        return None
    terms = content_terms(m.group(1))
    return terms[0] if terms else None


def explain_question(question: str) -> bool:
    """'What does that mean?' or 'why is …': the caller describes what they see and asks what it
    means. Only a section that speaks of all of it explains it ("flashing red" is not "flashes amber")."""
    t = normalize_text(question)
    return re.search(r"\bwhat (does|do|did) (that|this|it|they|[\w' -]{1,40}) mean\b|\bwhat(?:'s| is) (that|this) mean|"
                     r"^(?:\W*\w+\W+){0,2}?why (is|are|does|do|did|has|have|won't|isn't|can't|doesn't)\b", t) is not None


def yes_no_question(question: str) -> bool:
    """'Does / is / can … ?' rather than 'how / what / when …'."""
    t = normalize_text(question)
    t = re.sub(r"^((hi|hello|ok|okay|so|um|uh|well|quick question)[,.!]?\s+)+", "", t)
    return re.match(r"(does|do|is|are|can|could|will|would|has|have|did)\b", t) is not None


_WH_PHRASE = re.compile(
    r"\b(?:what|which)(?:'s|s| is| are)?\s+((?:[a-z0-9-]+\s*){0,4}?)"
    r"(?=(?:do|does|did|can|could|should|would|will|is|are|was|were|i|we|you|my|to|for|on|in|of)\b|[?.!]|$)")


def asked_terms(question: str) -> set[str]:
    """The thing a what/which question asks for: 'what retention discount codes can I …' ->
    {retention, discount, code}. The section that names it is the one to quote."""
    from kb.tokenize import content_terms

    m = _WH_PHRASE.search(normalize_text(question))
    return set(content_terms(m.group(1))) if m else set()


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


def small_talk(text: str) -> str | None:
    """'closing', 'thanks', 'ack' or 'greeting' when every part of the turn is one; of several
    ("OK, thanks, bye") the earliest in that list wins; None when anything else is said."""
    raw = [p.strip() for p in re.split(r"[,.!?;]+|\band\b|\bthen\b", normalize_text(text))]
    declined = any(re.match(r"no\b", p) for p in raw)
    parts = [re.sub(r"^((um+|uh+|oh|ah|well|so|yeah|yes|no|okay|ok)\s+)+(?=\S)", "", p) for p in raw if p]
    # "um", "yes", "no" beside a social phrase say nothing more; on their own they answer something
    said = [p for p in parts if not re.fullmatch(r"um+|uh+|oh|ah|well|so|yeah|yes|no", p)]
    if not said:
        return None
    kinds: set[str] = set()
    for p in said:
        m = _SOCIAL_PART.match(p)
        if not m:
            return None
        kinds.add(m.lastgroup or "")
    if kinds <= {"thanks", "ack"} and declined:
        return "closing"  # "No, thank you" to "anything else?"
    for kind, _ in _SOCIAL:
        if kind in kinds:
            return kind
    return None
