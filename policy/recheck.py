"""The last check before speech: is every citation in this turn's retrieved, permitted, active
evidence, is the KB the one the answer was built on, and does every number the message speaks
stand in a cited section? A failure turns the answer into a refusal."""
from __future__ import annotations

from dataclasses import dataclass

from kb.models import EffectiveStatus, Hit

from .decision import Action, Decision, Reason
from .numbers import unsupported_numbers

REFUSAL = ("I'm sorry, I can't confirm that answer right now, so I won't guess. "
           "You can ask for an agent and I'll transfer you.")


@dataclass
class RecheckResult:
    ok: bool
    problems: list[str]
    reason: Reason | None = None


def check(decision: Decision, turn_hits: list[Hit], kb_version_now: str) -> RecheckResult:
    if decision.action != Action.answer:
        return RecheckResult(True, [])
    if decision.kb_version != kb_version_now:
        return RecheckResult(False, [f"kb version changed {decision.kb_version} -> {kb_version_now}"],
                             Reason.kb_version_changed)
    if not decision.citations:
        return RecheckResult(False, ["answer has no citation"], Reason.citation_not_in_evidence)
    allowed = {(h.doc_id, h.section): h for h in turn_hits if h.status == EffectiveStatus.active}
    cited: list[Hit] = []
    for c in decision.citations:
        hit = allowed.get((c.doc_id, c.section))
        if hit is None:
            return RecheckResult(False, [f"citation {c.doc_id}#{c.section} is not in this turn's active evidence"],
                                 Reason.citation_not_in_evidence)
        cited.append(hit)
    sources = [f"{h.title} {h.heading} {h.text} {h.version}" for h in cited]
    if missing := unsupported_numbers(decision.message, sources):
        return RecheckResult(False, [f"number not in cited sections: {m}" for m in missing], Reason.unsupported_claim)
    return RecheckResult(True, [])


def enforce(decision: Decision, turn_hits: list[Hit], kb_version_now: str) -> tuple[Decision, RecheckResult]:
    """The decision to speak: unchanged when the check passes, else a refusal carrying the reason."""
    res = check(decision, turn_hits, kb_version_now)
    if res.ok:
        return decision, res
    refused = decision.model_copy(update={
        "action": Action.refuse, "message": REFUSAL, "citations": [],
        "reasons": [r for r in decision.reasons if r != Reason.grounded_answer] + [res.reason], "evidence_status": "partial", "confidence": 0.0})
    return refused, res
