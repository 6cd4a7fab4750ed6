"""Grade each retrieved section against the question: the probability that it answers it (one
calibrated scorer over general evidence features), and what of the question it leaves unsaid."""
from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from kb.models import EffectiveStatus, Hit, RetrievalResult
from kb.tokenize import content_terms, tokenize
from kb.units import unit_label

from .features import QuestionTerms, feature_rows, scoped_rows
from .language import FactKind, holds_kind
from .scorer import Scorer


UNIT_WORD_WEIGHT = 0.3  # in choosing the sentence to speak, saying the question's own words counts this much
# An answer speaks up to this many of its section's sentences, each within NEAR_UNIT of the closest
# one in meaning and all within MAX_ANSWER_WORDS: the asked detail is often in the second or third
# ("Saved messages are kept for 30 days" after "New messages are kept for 14 days"). Over the 19
# domains (shipped scorer), 2 sentences within 0.08: 1,034 cases; within 0.25: 1,037; 3 within
# 0.25: 1,041, unsafe 20 each way (leave-one-domain-out 1,000 -> 1,006, 23 unsafe each way); spoken
# answers' median 18 -> 28 words.
ANSWER_UNITS = 3
NEAR_UNIT = 0.25
MAX_ANSWER_WORDS = 60


@dataclass
class GradedHit:
    hit: Hit
    p: float  # probability that this section answers the question
    features: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # the caller's words it does not say, heaviest first
    why: list[str] = field(default_factory=list)  # the features that moved p most (filled for the spoken one)
    unit_words: list[float] = field(default_factory=list)  # per unit, the weighted share of the question it says
    vouched_by: str | None = None  # the superseded section whose probability it took (policy/versions.py)
    p_scoped: float | None = None  # p once the caller's facet rules out its variants for other callers

    @property
    def active(self) -> bool:
        return self.hit.status == EffectiveStatus.active

    @property
    def doc_id(self) -> str:
        return self.hit.doc_id

    @property
    def dense(self) -> float:
        return self.hit.dense_score or 0.0

    @property
    def topic(self) -> float:
        """Closeness in meaning of the question to the section or its best sentence."""
        return max([self.dense, *self.hit.unit_scores])


def _lexical_only_ps(rows: list[dict[str, float]]) -> list[float]:
    """Without the dense model the words must carry it alone: exact coverage, and the asked kind of
    fact stated. A share of the words is no probability: a section saying only "open" and "hours" of
    "store opening hours on Sunday" says 0.36 of it. So each counts only as far as it stands up to the
    section that says most of the question (its share of the best's coverage, squared in effect)."""
    own = [r["cov_exact"] * (1.0 - 0.5 * r["kind_missing"]) for r in rows]
    best = max(own, default=0.0) or 1.0
    return [p * p / best for p in own]


def grade(result: RetrievalResult, scorer: Scorer, kind: FactKind) -> list[GradedHit]:
    """Every hit with its probability of answering, best first."""
    q, rows = feature_rows(result, kind)
    features = [row for row, _ in rows]
    ps = _lexical_only_ps(features) if result.lexical_only else scorer.probabilities(features)
    scoped = {} if result.lexical_only else scoped_rows(result, q, kind)
    p_scoped = dict(zip(scoped, scorer.probabilities(list(scoped.values()))))
    asked = set(tokenize(result.query))
    graded = []
    for i, (hit, (row, missing), p) in enumerate(zip(result.hits, rows, ps)):
        words = [q.surface.get(t, t) for t in missing]  # in the caller's words, never as stems
        graded.append(GradedHit(hit, p, row, words, [], [unit_share(u, q, asked) for u in hit.units],
                                p_scoped=p_scoped.get(i)))
    graded.sort(key=lambda g: -g.p)
    return graded


def unit_share(unit: str, q: QuestionTerms, asked: AbstractSet[str] = frozenset()) -> float:
    """The weighted share of the question's words a unit says; all of it when the unit is labelled
    with words the caller said (the row "B: ..." for "band B", the line "Where: ..." for "where")."""
    label = unit_label(unit)
    if label and set(tokenize(label)) <= asked:
        return 1.0
    total = sum(q.weights.values())
    said = set(content_terms(unit))
    return sum(w for t, w in q.weights.items() if t in said) / total if total else 0.0


def unit_fit(g: GradedHit, kind: FactKind, i: int) -> float:
    """How well unit i answers: its closeness in meaning, a little more when it states the asked
    kind of fact, and more when it says the question's own words."""
    words = g.unit_words[i] if i < len(g.unit_words) else 0.0
    meaning = g.hit.unit_scores[i] if g.hit.unit_scores else 0.0  # without the dense model, words alone
    return meaning + 0.05 * holds_kind(kind, g.hit.units[i]) + UNIT_WORD_WEIGHT * words


def best_unit_order(g: GradedHit, kind: FactKind) -> list[int]:
    """The section's units, best fitting first (ties in their own order). A sentence that states the
    asked kind of fact comes before any that cannot answer it ("how long until you reply": the one
    with a time in it)."""
    return sorted(range(len(g.hit.units)), key=lambda i: (not holds_kind(kind, g.hit.units[i]), -unit_fit(g, kind, i)))


def best_units(g: GradedHit, kind: FactKind, limit: int = ANSWER_UNITS, max_words: int = MAX_ANSWER_WORDS) -> list[str]:
    """The sentences (list items, table rows) of a section that answer the question, in their order:
    the closest in meaning first, preferring one that states the asked kind of fact; others only
    when they are nearly as close (a sentence often needs the next one)."""
    units = g.hit.units
    if not units:
        return []
    # without the dense model, closeness is the share of the question's words a unit says: the
    # table row that names the e-bike, not the section's opening row
    scores = g.hit.unit_scores or [unit_fit(g, kind, i) for i in range(len(units))]
    ranked = best_unit_order(g, kind)
    chosen = [ranked[0]]
    words = len(units[ranked[0]].split())
    rows = unit_label(units[ranked[0]]) is not None  # other rows of a table answer for other rows' keys
    for i in ranked[1:limit]:
        if rows and unit_label(units[i]) is not None:
            continue
        if scores[i] >= scores[ranked[0]] - NEAR_UNIT and words + len(units[i].split()) <= max_words:
            chosen.append(i)
            words += len(units[i].split())
    # a bare "Yes." or "Not usually." says nothing alone: the sentence after it says what
    chosen += [i + 1 for i in chosen if i + 1 < len(units) and not content_terms(units[i])]
    return [units[i] for i in sorted(set(chosen))]


def best_answer(graded: list[GradedHit], kind: FactKind) -> tuple[GradedHit, float] | None:
    """The document most likely to answer, and in it the section to speak: its probability of
    answering and the fit of its best sentence (close in meaning, saying the question's words and
    the asked kind of fact) both count, so neither a well-phrased sentence in an off-topic section
    ("What is Plus" for "how much is Plus") nor a likely section's weak sentence wins alone.
    Returns (section, the document's probability).

    A document is as likely to answer as its likeliest section, the one that would be spoken:
    sections that each partly fit do not add up to an answer (a noisy-or over them answered "does
    voicemail turn messages into text" from four voicemail sections, none of which says so)."""
    if not graded:
        return None
    likeliest = max(graded, key=lambda g: g.p)  # a tie goes to the better-ranked
    sections = [g for g in graded if g.doc_id == likeliest.doc_id]

    def sentence_fit(g: GradedHit) -> float:
        order = best_unit_order(g, kind)
        return unit_fit(g, kind, order[0]) if order and g.hit.unit_scores else g.p

    if likeliest.vouched_by:  # it answers as the old version did: speak it, not a neighbour that reads well
        return likeliest, likeliest.p
    best = max(sections, key=lambda g: (g.p + sentence_fit(g), g.p))
    return best, likeliest.p
