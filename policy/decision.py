"""The Decision contract (CONTRACT §2): what one caller turn produces."""
from __future__ import annotations

import json
from enum import Enum
from typing import Literal, TypedDict

from pydantic import BaseModel, Field, field_validator


class Action(str, Enum):
    answer = "answer"
    clarify = "clarify"
    refuse = "refuse"
    transfer = "transfer"


# Accepted on input (CONTRACT §2): older names for two actions.
ACTION_SYNONYMS = {"abstain": "refuse", "handoff": "transfer"}


def parse_action(value: object) -> Action:
    if isinstance(value, Action):
        return value
    v = str(value).strip().lower()
    return Action(ACTION_SYNONYMS.get(v, v))


class Reason(str, Enum):
    """Fixed list of reason codes; every non-answer carries at least one."""

    human_requested = "human_requested"
    disallowed_request = "disallowed_request"
    high_risk_topic = "high_risk_topic"
    action_requires_approval = "action_requires_approval"
    permission_denied = "permission_denied"
    retrieval_unavailable = "retrieval_unavailable"
    embedding_unavailable = "embedding_unavailable"  # lexical-only fallback was used
    no_relevant_evidence = "no_relevant_evidence"
    low_retrieval_score = "low_retrieval_score"
    citation_not_in_evidence = "citation_not_in_evidence"
    required_fact_not_covered = "required_fact_not_covered"
    partial_evidence = "partial_evidence"
    background_only = "background_only"
    conflicting_sources = "conflicting_sources"
    deprecated_only = "deprecated_only"
    draft_only = "draft_only"
    missing_facet = "missing_facet"
    asr_low_confidence = "asr_low_confidence"
    question_needed = "question_needed"  # the caller gave context ("I'm a business customer"), no question
    unsupported_claim = "unsupported_claim"
    kb_version_changed = "kb_version_changed"
    tts_unavailable = "tts_unavailable"
    grounded_answer = "grounded_answer"


EvidenceStatus = Literal["direct", "partial", "background", "conflicting", "missing"]
RiskLevel = Literal["low", "medium", "high", "critical"]


class Citation(BaseModel):
    doc_id: str
    section: str
    version: str = ""


class EvidenceQuote(BaseModel):
    doc_id: str
    section: str = ""
    version: str = ""
    quote: str


class Handoff(BaseModel):
    """The context package a human agent receives with a transfer."""

    id: str = ""
    team: str
    summary: str
    question: str = ""
    normalized_question: str = ""
    transcript: list[str] = Field(default_factory=list)
    action: str = "transfer"
    reasons: list[str] = Field(default_factory=list)
    evidence: list[EvidenceQuote] = Field(default_factory=list)
    missing_information: list[str] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    caller_facets: dict[str, str] = Field(default_factory=dict)
    caller_role: str = "public"
    created_at: str = ""
    policy_version: str = ""
    kb_version: str = ""


class DecisionJson(TypedDict):
    """`Decision.public_dict()`: the caller-facing JSON of a Decision, field for field (no debug)."""

    action: str
    message: str
    citations: list[dict[str, str]]
    missing_information: list[str]
    reasons: list[str]
    evidence_status: EvidenceStatus
    risk_level: RiskLevel
    confidence: float
    handoff: dict[str, object] | None  # a Handoff's fields
    policy_version: str
    kb_version: str


class Decision(BaseModel):
    action: Action
    message: str
    citations: list[Citation] = Field(default_factory=list)
    missing_information: list[str] = Field(default_factory=list)
    reasons: list[Reason] = Field(default_factory=list)
    evidence_status: EvidenceStatus = "missing"
    risk_level: RiskLevel = "low"
    confidence: float = 0.0
    handoff: Handoff | None = None
    policy_version: str = ""
    kb_version: str = ""
    # Not part of the caller-visible contract: retrieval details for `ask --debug` and audits.
    debug: dict[str, object] | None = None

    @field_validator("action", mode="before")
    @classmethod
    def _synonyms(cls, v: object) -> object:
        return parse_action(v) if isinstance(v, str) and not isinstance(v, Action) else v

    def public_dict(self) -> DecisionJson:
        """The Decision as the caller-facing JSON (no debug field)."""
        return json.loads(self.model_dump_json(exclude={"debug"}))


def decision_json_schema() -> dict[str, object]:
    return Decision.model_json_schema()
