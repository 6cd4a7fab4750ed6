"""Builders for hand-made retrieval results, so gate tests isolate the policy from the models."""
from __future__ import annotations

from kb.models import EffectiveStatus, Hit, RetrievalResult
from kb.units import units_of_text
from policy.features import FEATURES
from policy.scorer import Scorer

# A scorer for gate tests: p rises with the closeness of the best sentence and the coverage of the
# question's words, and falls when the asked kind of fact is missing. Strong evidence scores near 1,
# weak near 0, so each test decides which gate it reaches.
TEST_SCORER = Scorer(FEATURES, [0.0] * len(FEATURES), [1.0] * len(FEATURES),
                     [{"unit_max": 12.0, "cov": 8.0, "kind_missing": -3.0}.get(f, 0.0) for f in FEATURES],
                     -12.0, {"fitted_on_hash": "test"})


def hit(doc_id: str, text: str, *, dense: float | None = 0.8, covered=("refund",), missing=(),
        status: str = "active", risk: str = "low", team: str | None = "billing", applies_to=None,
        supersedes=(), rank: int = 1, title: str | None = None, version: str = "2026-01",
        section: str = "main") -> Hit:
    units = units_of_text(text)
    return Hit(locator=f"{doc_id}#{section}", doc_id=doc_id, section=section, heading=section.replace("-", " "),
               title=title or doc_id.replace("-", " ").title(), version=version, text=text,
               status=EffectiveStatus(status), applies_to=dict(applies_to or {}), risk=risk,
               handoff_team=team, supersedes=list(supersedes), lexical_score=5.0 if covered else 0.0,
               dense_score=dense, lexical_rank=rank, dense_rank=rank, fused_score=1 / (60 + rank),
               fused_rank=rank, covered_terms=list(covered), missing_terms=list(missing), units=units,
               unit_scores=[dense] * len(units) if dense is not None else [])


def result(*hits: Hit, query: str = "q", lexical_only: bool = False,
           weights: dict[str, float] | None = None) -> RetrievalResult:
    """`weights`: the terms' IDF (unset terms weigh 1)."""
    terms = sorted({t for h in hits for t in h.covered_terms + h.missing_terms})
    return RetrievalResult(query=query, query_terms=terms, hits=list(hits), lexical_only=lexical_only,
                           kb_version="kb-test", visible_sections=len(hits), term_weights=dict(weights or {}))
