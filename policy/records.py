"""What one turn leaves behind: the handoff package a person receives, and the audit line that
explains the decision afterwards (signals, reason codes, versions, per-stage timings)."""
from __future__ import annotations

import datetime as dt
import uuid
from typing import TYPE_CHECKING, Collection

from kb.jsontypes import JsonObject
from kb.models import RetrievalResult

from . import recheck
from .decision import Decision, EvidenceQuote, Handoff, Reason
from .gates import GateOutcome

if TYPE_CHECKING:  # the session writes these records: it imports this module
    from .session import AsrSignal, Session


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


def handoff_package(d: Decision, o: GateOutcome | None, *, question: str, normalized: str, transcript: list[str],
                    facets: dict[str, str], role: str, default_team: str, earlier: str | None = None) -> Handoff:
    """The context package, so nobody asks the caller twice."""
    evidence = [EvidenceQuote(doc_id=g.doc_id, section=g.hit.section, version=g.hit.version,
                              quote=" ".join(g.hit.units[:2])) for g in (o.evidence if o else [])]
    team = (o.team if o and o.team else None) or (d.handoff.team if d.handoff else default_team)
    reasons = [r.value for r in d.reasons]
    summary = handoff_summary(question, d.reasons, d.missing_information, facets, earlier)
    handoff = Handoff(id=uuid.uuid4().hex[:12], team=team, summary=summary, question=question,
                      normalized_question=normalized, transcript=list(transcript), reasons=reasons,
                      evidence=evidence, missing_information=list(d.missing_information),
                      conflicts=list(o.conflicts) if o else [], caller_facets=dict(facets), caller_role=role,
                      created_at=now(), policy_version=d.policy_version, kb_version=d.kb_version)
    handoff.transcript.append(f"agent: {d.message}")
    return handoff


_WHY = {  # why a call reached a person, said to that person
    Reason.human_requested: "the caller asked for a person",
    Reason.high_risk_topic: "the topic needs a specialist",
    Reason.action_requires_approval: "the caller wants something only staff can approve",
    Reason.conflicting_sources: "our documents disagree on the answer",
    Reason.missing_facet: "we could not tell which rule applies to the caller",
    Reason.tts_unavailable: "our voice system failed",
}


def handoff_summary(question: str, reasons: list[Reason], missing: list[str], facets: dict[str, str],
                    earlier: str | None = None) -> str:
    """The package's first line, a sentence for the person who picks up the call."""
    why = [_WHY.get(r, r.value.replace("_", " ")) for r in reasons]
    text = f'The caller asked: "{question.strip()}".'
    if earlier and earlier.strip() != question.strip():
        text += f' Before that: "{earlier.strip()}".'
    text += f' Transferred because {" and ".join(why) or "of the topic"}.'
    if missing:
        text += f" Still unknown: {', '.join(m.replace('_', ' ') for m in missing)}."
    if facets:
        text += " The caller says: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in facets.items()) + "."
    return text


def _hit_lines(result: RetrievalResult | None, o: GateOutcome | None) -> list[JsonObject]:
    graded = {g.hit.locator: g for g in (o.graded if o else [])}
    hits: list[JsonObject] = []
    for h in (result.hits if result else []):
        g = graded.get(h.locator)
        hits.append({"locator": h.locator, "status": h.status.value, "lexical": round(h.lexical_score, 4),
                     "dense": None if h.dense_score is None else round(h.dense_score, 4),
                     "fused_rank": h.fused_rank, "covered": h.covered_terms, "missing": h.missing_terms,
                     "p_answers": round(g.p, 3) if g else None, "why": g.why if g else None,
                     **({"vouched_by": g.vouched_by} if g and g.vouched_by else {}),
                     "features": {k: round(v, 3) for k, v in g.features.items()} if g else None})
    return hits


def audit_line(*, audit_id: str, session: Session, text: str, normalized: str, asr: AsrSignal | None,
               faults: Collection[str], result: RetrievalResult | None, error: str | None, o: GateOutcome | None,
               d: Decision, rc: recheck.RecheckResult, timings: dict[str, float], changes: list[str]) -> JsonObject:
    """One turn, explainable after the fact: what was heard and searched, each hit's probability and
    its features, the deciding gate and its signals, the recheck, versions and timings."""
    return {
        "kind": "turn", "audit_id": audit_id, "ts": now(),
        "session": session.session_id, "turn": session.turns, "role": session.role, "facets": dict(session.facets),
        "policy": session.policy, "question": text, "normalized_question": normalized,
        "asr": asr.model_dump() if asr else None, "faults": list(faults),
        "retrieval": {"error": error, "lexical_only": result.lexical_only if result else None,
                      "degraded_reason": result.degraded_reason if result else None,
                      "visible_sections": result.visible_sections if result else None,
                      "query_terms": result.query_terms if result else None, "hits": _hit_lines(result, o),
                      "timings_ms": result.timings_ms if result else None},
        "gate": o.gate if o else session.policy, "signals": o.signals if o else {},
        "recheck": {"ok": rc.ok, "problems": rc.problems},
        "decision": d.public_dict(), "policy_version": d.policy_version or session.engine.policy_version,
        "kb_version": session.engine.kb_version, "timings_ms": {k: round(v, 2) for k, v in timings.items()},
        "normalization": changes,
    }
