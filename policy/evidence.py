"""Grade each retrieved section against the question: the probability that it answers it (one
calibrated scorer over general evidence features), and what of the question it leaves unsaid."""
from __future__ import annotations

from dataclasses import dataclass, field

from kb.models import EffectiveStatus, Hit, RetrievalResult

from .features import QuestionTerms, coverage, feature_rows
from .language import FactKind, holds_kind
from .scorer import Scorer


@dataclass
class GradedHit:
    hit: Hit
    p: float  # probability that this section answers the question
    features: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # the caller's words it does not say, heaviest first
    why: list[str] = field(default_factory=list)  # the features that moved p most

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


def _lexical_only_p(row: dict[str, float]) -> float:
    """Without the dense model the words must carry it alone: exact coverage, and the asked kind
    of fact stated."""
    return row["cov_exact"] * (1.0 - 0.5 * row["kind_missing"])


def grade(result: RetrievalResult, scorer: Scorer, kind: FactKind) -> list[GradedHit]:
    """Every hit with its probability of answering, best first."""
    q, rows = feature_rows(result, kind)
    graded = []
    for hit, row in zip(result.hits, rows):
        p = _lexical_only_p(row) if result.lexical_only else scorer.probability(row)
        why = [] if result.lexical_only else scorer.explain(row)
        graded.append(GradedHit(hit, p, row, _missing_words(hit, q), why))
    graded.sort(key=lambda g: -g.p)
    return graded


def _missing_words(hit: Hit, q: QuestionTerms) -> list[str]:
    return [q.surface.get(t, t) for t in coverage(hit, q)[3]]


def best_unit_order(g: GradedHit, kind: FactKind) -> list[int]:
    """The section's units, closest in meaning to the question first (one stating the asked kind of
    fact a little ahead); in their own order without the dense model."""
    units, scores = g.hit.units, g.hit.unit_scores
    if not scores:
        return list(range(len(units)))
    return sorted(range(len(units)), key=lambda i: -(scores[i] + (0.05 if holds_kind(kind, units[i]) else 0.0)))


def best_units(g: GradedHit, kind: FactKind, limit: int = 2, max_words: int = 60) -> list[str]:
    """The sentences (list items, table rows) of a section that answer the question, in their order:
    the closest in meaning first, preferring one that states the asked kind of fact; a second one
    only when it is nearly as close (a sentence often needs the next one)."""
    units, scores = g.hit.units, g.hit.unit_scores
    if not units:
        return []
    if not scores:  # lexical-only: the section's opening
        return units[:limit]
    ranked = best_unit_order(g, kind)
    chosen = [ranked[0]]
    words = len(units[ranked[0]].split())
    for i in ranked[1:limit]:
        if scores[i] >= scores[ranked[0]] - 0.08 and words + len(units[i].split()) <= max_words:
            chosen.append(i)
            words += len(units[i].split())
    return [units[i] for i in sorted(chosen)]
