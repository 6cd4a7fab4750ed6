"""Grade each retrieved section against the question: is it about the question at all, does it
answer it, which facts of the question does it leave out. Topic similarity is not answerability, so
a hit needs both semantic closeness (dense cosine) and coverage of the question's own terms."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kb.models import EffectiveStatus, Hit, RetrievalResult

from kb.tokenize import content_terms

from .config import Thresholds
from .signals import FactKind, evidence_has_fact


@dataclass
class GradedHit:
    hit: Hit
    coverage: float  # IDF-weighted share of the question's terms this section covers
    dense: float | None
    relevant: bool  # about the question
    answers: bool  # strong enough to answer from
    has_fact: bool  # contains the kind of fact the question asks for
    score: float  # one number to rank graded hits by (not a probability)
    missing_terms: list[str] = field(default_factory=list)
    held: frozenset[str] = frozenset()  # numbers the caller stated that this section's condition holds

    @property
    def active(self) -> bool:
        return self.hit.status == EffectiveStatus.active

    @property
    def doc_id(self) -> str:
        return self.hit.doc_id


# Words that frame a question rather than name its subject ("how long does it take"): the kind of
# fact they ask for is checked separately (signals.fact_kind), so they do not count as coverage.
FRAME_TERMS = frozenset(content_terms(
    "long much many take takes taking happen happens happened time times way ways work works "
    "mean means possible able thing sure kind sort find use using used have make do put give see "
    "think believe guess wonder seem seems without come comes coming "
    # time and quantity frames: "how long does it last", "how much have I got left", "what is it now"
    "last lasts lasting left remain remains remaining now currently once start starts started starting"))


# In a question about a price, the words for paying name the kind of fact ("do I have to pay for paper
# bills"), which signals.fact_kind checks: the evidence says "free" or "$2.50", not "pay". Likewise the
# opening and closing words of a time-of-day question.
KIND_FRAME_TERMS: dict[str, frozenset[str]] = {
    "amount": frozenset(content_terms("pay paying paid cost costs price prices fee fees charge charges charged")),
    # "what time does the shop shut": the hours answer it, whatever verb the caller uses
    "clock": frozenset(content_terms("open opens opening close closes closing closed shut shuts time hour hours")),
    # "how do I buy more data": the steps say "add" or "choose a pack"; what is bought names the subject
    "procedure": frozenset(content_terms("buy buying purchase purchasing get getting order ordering")),
}

# A number the caller states about themselves ("I'm 78", "aged 70", "I have 3 lines") is a value
# to hold against the evidence's condition ("aged 75 or over", "4 or more lines"), not a word the
# evidence must repeat.
_STATED_NUMBER = re.compile(
    r"\b(?:i'?m|i am|we'?re|we are|aged?|(?:i|we) have)\s+(?:about |nearly |almost |over |under )?(\d{1,3})\b"
    r"(?!\s*(?:%|percent|gb|mb|dollars?|pounds?|euros?|cents?|days?|weeks?|months?|hours?|minutes?))"
    r"|\b(\d{1,3})[ -](?:years?|yrs?)[ -]old\b")
_CONDITION = re.compile(r"\b(?:aged|age|years old|or (?:over|older|more|under|younger|fewer|less)"
                        r"|(?:over|under|at least|up to|older than|younger than|more than|fewer than|less than) \d)")


# Whose line it is ("my kids phone", "my daughter's phone"): the caller says for whom they ask, and the
# evidence, written for every account holder, does not repeat it. (Another person's private data is
# refused before this matters: see the policy's disallowed lexicon.)
_POSSESSOR = re.compile(
    r"\b(?:my|our) (kid|child|children|son|daughter|wife|husband|partner|mum|mom|mother|dad|father|brother|sister|"
    r"grandma|grandmother|grandpa|grandfather|grandson|granddaughter|teen|teenager|nephew|niece)(?:'s|s'|s)\s+[a-z]")


def possessor_terms(question: str) -> frozenset[str]:
    return frozenset(t for m in _POSSESSOR.finditer(question.lower()) for t in content_terms(m.group(1)))


def stated_numbers(question: str) -> set[str]:
    return {m.group(1) or m.group(2) for m in _STATED_NUMBER.finditer(question.lower())}


def _counts(term: str) -> bool:
    # a stray single letter ("q r code" heard letter by letter) names nothing by itself
    return term not in FRAME_TERMS and not (len(term) == 1 and term.isalpha())


def _joined_forms(terms: list[str]) -> set[str]:
    """'citycentr' when 'city' and 'centr' are terms too: a hyphenated word counted once."""
    ts = set(terms)
    return {t for t in ts if any(t.startswith(a) and t[len(a):] in ts for a in ts if a != t)}


def coverage(hit: Hit, weights: dict[str, float], soft_weight: float = 0.8,
             skip: frozenset[str] = frozenset()) -> float:
    """`skip`: this question's terms that need no covering here (see grade: the terms that only
    frame this kind of question, and stated numbers this section holds a condition for)."""
    terms = [t for t in hit.covered_terms + hit.missing_terms if _counts(t) and t not in skip]
    joined = _joined_forms(terms)
    terms = [t for t in terms if t not in joined]
    if not terms:
        return 0.0
    w = {t: max(weights.get(t, 1.0), 0.05) for t in terms}
    exact = sum(w[t] for t in hit.covered_terms if t in w)
    soft = sum(w[t] for t in hit.soft_covered if t in w and t not in hit.covered_terms)
    return (exact + soft_weight * soft) / sum(w.values())


def covers(hit: Hit, term: str) -> bool:
    return term in hit.covered_terms or term in hit.soft_covered


def grade(result: RetrievalResult, th: Thresholds, kind: FactKind) -> list[GradedHit]:
    graded = []
    top_lex = max((h.lexical_score for h in result.hits), default=0.0) or 1.0
    frame = KIND_FRAME_TERMS.get(kind, frozenset())
    if not any(_counts(t) and t not in frame for t in result.query_terms):
        frame = frozenset()  # nothing else named: the charge itself is the subject ("what's the charge if …")
    frame |= possessor_terms(result.query)
    stated = stated_numbers(result.query)
    for hit in result.hits:
        held = frozenset(n for n in stated if n in hit.missing_terms and _CONDITION.search(hit.text.lower()))
        skip = frame | held
        cov = coverage(hit, result.term_weights, th.soft_weight, skip)
        dense = hit.dense_score
        if dense is None or result.lexical_only:
            relevant = cov >= th.min_coverage and hit.lexical_score > 0
            answers = cov >= th.lexical_only_coverage
            score = 0.9 * cov + 0.1 * max(hit.lexical_score, 0.0) / top_lex  # BM25 breaks coverage ties
        else:
            relevant = dense >= th.min_dense and cov >= th.min_coverage
            answers = (dense >= th.answer_dense and cov >= th.answer_coverage) or (
                dense >= th.strong_dense and cov >= th.strong_min_coverage) or (
                # every one of (at least two) question terms, a code or name among them, is in this
                # section's own words: relevant enough, though its wording is far from the question's
                dense >= th.min_dense and cov >= 0.999 and len(hit.covered_terms) >= 2)
            score = 0.5 * dense + 0.5 * cov
        text = f"{hit.heading}. {hit.text}"
        graded.append(GradedHit(hit, cov, dense, relevant, answers, evidence_has_fact(kind, text), score,
                                [t for t in hit.missing_terms if _counts(t) and t not in hit.soft_covered
                                 and t not in skip
                                 and t not in _joined_forms(hit.covered_terms + hit.missing_terms)], held))
    # A clear semantic winner: one section far closer in meaning than any other, and close in
    # absolute terms, is the answer to a paraphrase that shares few words with it.
    by_dense = sorted((g for g in graded if g.dense is not None), key=lambda g: -(g.dense or 0.0))
    if len(by_dense) >= 2:
        top, second = by_dense[0], by_dense[1]
        if (top.dense or 0) >= th.strong_dense and (top.dense or 0) - (second.dense or 0) >= th.competitor_margin \
                and top.coverage > 0:
            top.relevant = top.answers = True
    graded.sort(key=lambda g: g.score, reverse=True)
    return graded


def competitors(graded: list[GradedHit], margin: float) -> list[GradedHit]:
    """Relevant hits scoring close to the best one: they compete to be 'the' evidence."""
    rel = [g for g in graded if g.relevant]
    if not rel:
        return []
    best = rel[0].score
    return [g for g in rel if g.score >= best - margin]
