"""Typed shapes of the knowledge base and of retrieval results.

These are the boundary between `kb/` and everything above it (policy, voice, server).
"""
from __future__ import annotations

import datetime as dt
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field

Status = Literal["active", "deprecated", "draft"]
Risk = Literal["low", "medium", "high", "critical"]
RISK_ORDER: dict[str, int] = {"low": 0, "medium": 1, "high": 2, "critical": 3}


class Document(BaseModel):
    """One Markdown file's front matter (CONTRACT §1)."""

    id: str
    title: str
    status: Status = "active"
    version: str = ""
    effective_from: dt.date | None = None
    effective_until: dt.date | None = None
    supersedes: list[str] = Field(default_factory=list)
    applies_to: dict[str, str] = Field(default_factory=dict)
    acl: list[str] = Field(default_factory=lambda: ["public"])
    risk: Risk = "low"
    handoff_team: str | None = None
    path: str = ""  # relative to the KB root, for error messages and audits


class Section(BaseModel):
    """A heading-delimited piece of a document; what a citation points at."""

    locator: str  # "<doc id>#<section slug>", stable across loads
    doc_id: str
    slug: str
    heading: str  # the section's own heading text
    heading_path: list[str]  # document title, then the headings above this one
    text: str  # body text under the heading (without the heading line)
    order: int  # position in the document


class LoadProblem(BaseModel):
    """A file that could not be loaded (or loaded with a warning), and why."""

    path: str
    reason: str
    fatal: bool = True  # True: the file was skipped

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class EffectiveStatus(str, Enum):
    """A document's status on a given date: `active` only when in force."""

    active = "active"
    deprecated = "deprecated"  # declared deprecated, past effective_until, or superseded
    draft = "draft"  # declared draft, or not yet effective


class Hit(BaseModel):
    """One retrieved section, with everything the policy needs to judge it."""

    locator: str
    doc_id: str
    section: str  # slug
    heading: str
    title: str
    version: str
    text: str
    status: EffectiveStatus  # effective status on the query date
    applies_to: dict[str, str]
    risk: Risk
    handoff_team: str | None
    supersedes: list[str]
    lexical_score: float  # BM25 over the caller's visible sections; 0 when not matched
    dense_score: float | None  # cosine similarity; None when the dense model is unavailable
    lexical_rank: int | None  # 1-based; None when not in the lexical candidate list
    dense_rank: int | None
    fused_score: float  # reciprocal-rank fusion
    fused_rank: int  # 1-based
    covered_terms: list[str]  # normalized query terms present in this section (or its headings)
    missing_terms: list[str]  # normalized query terms absent from it
    # missing terms the section says in other words (term -> the section's word), see kb/soft_match.py
    soft_covered: dict[str, str] = Field(default_factory=dict)
    soft_scores: dict[str, float] = Field(default_factory=dict)  # missing term -> best word cosine in the section
    # the section's answer units (sentences, list items, table rows; kb/units.py) and the question's
    # cosine to each (empty without the dense model)
    units: list[str] = Field(default_factory=list)
    unit_scores: list[float] = Field(default_factory=list)
    heading_score: float | None = None  # the question's cosine to the section heading alone
    # the document's dates: when a page not yet in force will apply (a caller may ask about then)
    effective_from: dt.date | None = None
    effective_until: dt.date | None = None
    # each unit's cosine to the clause that asks, when the turn has more (a story, then the question)
    focus_scores: list[float] = Field(default_factory=list)


class RetrievalResult(BaseModel):
    """What one search returns. An empty `hits` means nothing relevant was found;
    a broken index raises `RetrievalUnavailable` instead."""

    query: str
    query_terms: list[str]
    hits: list[Hit]
    lexical_only: bool = False  # the dense model was unavailable; scores are BM25 only
    degraded_reason: str | None = None
    kb_version: str
    visible_sections: int  # how many sections this caller may see (never counts restricted ones)
    # IDF of each query term over the caller's visible sections (lets the policy weigh coverage)
    term_weights: dict[str, float] = Field(default_factory=dict)
    timings_ms: dict[str, float] = Field(default_factory=dict)


class RetrievalUnavailable(RuntimeError):
    """Retrieval itself is down (index corrupt, KB not loaded): not 'nothing found'."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
