"""The evidence features of one retrieved section for one question: the scorer's only inputs.

They are general measures, the same for every domain: closeness in meaning of the question to the
section and to its best sentence, how much of the question's specific words the section says
(exactly or in other words), the strongest specific word it leaves out, how far it stands ahead of
other documents, and whether its best sentences state the kind of fact asked for."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

from kb.models import Hit, RetrievalResult
from kb.tokenize import STOPWORDS, content_terms

from .language import FactKind, holds_kind, specificity


class FeatureRow(TypedDict):
    """One section's evidence features, in the scorer's column order."""

    dense: float
    unit_max: float
    heading: float
    cov: float
    cov_exact: float
    miss_max: float
    dense_margin: float
    unit_margin: float
    kind_missing: float
    kind_top: float
    lex: float
    rank: float
    align: float
    focus: float
    unit_cov: float


FEATURES: tuple[str, ...] = tuple(FeatureRow.__annotations__)
SOFT_CREDIT = 0.8  # a word the section says in other words counts for this much of the word itself
_WORD = re.compile(r"[a-z][a-z'-]+|\d[\d.,]*")


@dataclass
class QuestionTerms:
    """The question's index terms with their weights: rarity in this KB (IDF) times specificity in
    English, so "long" in "how long" weighs little and "voicemail" a lot; and the caller's own word
    for each term, to name what is missing in the caller's words, never as a stem."""

    weights: dict[str, float]
    surface: dict[str, str]


def question_terms(result: RetrievalResult) -> QuestionTerms:
    surface: dict[str, str] = {}
    for w in _WORD.findall(result.query.lower()):
        w = w.strip("'-")
        if w in STOPWORDS:
            continue
        terms = content_terms(w)
        if len(terms) == 1:
            surface.setdefault(terms[0], w)
    weights = {}
    for t in dict.fromkeys(result.query_terms):
        if t in STOPWORDS or (len(t) == 1 and t.isalpha()):
            continue
        word = surface.get(t, t)
        spec = 1.0 if word[:1].isdigit() else specificity(word)
        weights[t] = max(result.term_weights.get(t, 1.0), 0.05) * spec
    return QuestionTerms(weights, surface)


def coverage(hit: Hit, q: QuestionTerms) -> tuple[float, float, float, list[str]]:
    """(coverage with soft matches, exact coverage, the largest share of a missing term, the missing
    terms heaviest first)."""
    total = sum(q.weights.values())
    if not total:
        return 0.0, 0.0, 0.0, []
    have = set(hit.covered_terms)
    exact = sum(w for t, w in q.weights.items() if t in have)
    soft = sum(w for t, w in q.weights.items() if t not in have and t in hit.soft_covered)
    missing = sorted((t for t in q.weights if t not in have and t not in hit.soft_covered),
                     key=lambda t: -q.weights[t])
    miss_max = q.weights[missing[0]] / total if missing else 0.0
    return (exact + SOFT_CREDIT * soft) / total, exact / total, miss_max, missing


def _best_units(hit: Hit, n: int = 3) -> list[str]:
    if not hit.unit_scores:
        return hit.units[:n]
    order = sorted(range(len(hit.unit_scores)), key=lambda i: -hit.unit_scores[i])
    return [hit.units[i] for i in order[:n]]


def variants_for_others(a: Hit, b: Hit) -> bool:
    """Two documents scoped to different callers on one facet (the business late fee beside the
    personal one): with the facet unknown they tie, and neither stands ahead of the other."""
    return a.doc_id != b.doc_id and any(k in b.applies_to and b.applies_to[k] != v for k, v in a.applies_to.items())


def versions_of_one(a: Hit, b: Hit) -> bool:
    """Two versions of one document (one supersedes the other): they say the same, never compete."""
    return a.doc_id in b.supersedes or b.doc_id in a.supersedes


def hit_features(hit: Hit, hits: list[Hit], q: QuestionTerms,
                 kind: FactKind) -> tuple[dict[str, float], list[str]]:
    """The section's features, and the question's terms it leaves unsaid (heaviest first)."""
    cov, exact, miss_max, missing = coverage(hit, q)
    dense = hit.dense_score or 0.0
    unit_max = max(hit.unit_scores, default=dense)
    hits = [h for h in hits if not versions_of_one(h, hit)]
    others = [h for h in hits if h.doc_id != hit.doc_id]
    best_other = max((h.dense_score or 0.0 for h in others), default=0.0)
    best_other_unit = max((max(h.unit_scores, default=h.dense_score or 0.0) for h in others), default=0.0)
    top_lex = max((h.lexical_score for h in hits), default=0.0) or 1.0
    units = _best_units(hit)
    return {
        "dense": dense, "unit_max": unit_max,
        "heading": hit.heading_score if hit.heading_score is not None else dense, "cov": cov, "cov_exact": exact, "miss_max": miss_max,
        "dense_margin": max(-0.5, min(0.5, dense - best_other)),
        "unit_margin": max(-0.5, min(0.5, unit_max - best_other_unit)),
        "kind_missing": 0.0 if any(holds_kind(kind, u) for u in units) else 1.0,
        "kind_top": 1.0 if units and holds_kind(kind, units[0]) and kind != "any" else 0.0,
        "lex": max(hit.lexical_score, 0.0) / top_lex,
        "rank": 1.0 / (1 + sum(h.fused_rank < hit.fused_rank for h in hits)),
        "align": alignment(hit, q),
        "focus": max(hit.focus_scores, default=unit_max),
        "unit_cov": unit_coverage(hit, q, units[:1]),
    }, missing


def unit_coverage(hit: Hit, q: QuestionTerms, units: list[str]) -> float:
    """Weighted share of the question's words that the answer sentence itself (with its heading and
    title) says, exactly or in the section's other words: what would be spoken must carry the
    question, not only the page around it."""
    total = sum(q.weights.values())
    if not total or not units:
        return 0.0
    said = set(content_terms(f"{hit.title} {hit.heading} {' '.join(units)}"))
    soft = {t for t, word in hit.soft_covered.items() if content_terms(word) and content_terms(word)[0] in said}
    return sum(w * (1.0 if t in said else SOFT_CREDIT if t in soft else 0.0) for t, w in q.weights.items()) / total


def alignment(hit: Hit, q: QuestionTerms) -> float:
    """How closely the section's words say each of the question's words (1 for the word itself, else
    the best word cosine), weighted by the words' weights: a graded coverage."""
    total = sum(q.weights.values())
    if not total:
        return 0.0
    have = set(hit.covered_terms)
    return sum(w * (1.0 if t in have else max(0.0, hit.soft_scores.get(t, 0.0))) for t, w in q.weights.items()) / total


def feature_rows(result: RetrievalResult,
                 kind: FactKind) -> tuple[QuestionTerms, list[tuple[dict[str, float], list[str]]]]:
    """Per hit, its features and the question's terms it leaves unsaid."""
    q = question_terms(result)
    return q, [hit_features(h, result.hits, q, kind) for h in result.hits]


def scoped_rows(result: RetrievalResult, q: QuestionTerms, kind: FactKind) -> dict[int, dict[str, float]]:
    """For each hit with variants for other callers among the hits: its features as if the caller's
    facet ruled those variants out (what it would score once the caller says which applies)."""
    out = {}
    for i, h in enumerate(result.hits):
        if h.applies_to and any(variants_for_others(h, o) for o in result.hits):
            out[i] = hit_features(h, [o for o in result.hits if not variants_for_others(h, o)], q, kind)[0]
    return out
