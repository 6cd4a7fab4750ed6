"""Two naive policies to measure the real one against, run in the same harness (`--policy NAME`).

- `threshold`: the naive design: answer from the top hit whenever its fused score clears a
  threshold, else refuse.
- `minimal`: the five-rule decide() of the seed voice-agent article: human request or high risk ->
  transfer; top score below threshold -> refuse; no citation -> refuse; citation not among this
  turn's hits -> refuse; key-term coverage below threshold -> refuse; else answer.

Neither looks at document status, facets, conflicts or required facts: that is the point of them.
Both are plain functions `(question, result, cfg, signals) -> Decision`; `signals` is whatever the
engine computed for the turn (a mapping or an object with `human_requested` etc.), or None, in which
case the flags are read from the question with `policy.signals`."""
from __future__ import annotations

import re
from typing import Callable

from kb.models import Hit, RetrievalResult

from .config import PolicyConfig
from .decision import Action, Citation, Decision, EvidenceQuote, Handoff, Reason
from .signals import human_requested

# (question, retrieval, config, signals) -> decision; signals: a mapping, an object with the flags as
# attributes, or None (see the module docstring)
Baseline = Callable[[str, "RetrievalResult | None", PolicyConfig, object], Decision]

HIGH_RISK = ("high", "critical")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(*$])")


def first_sentences(text: str, n: int = 2) -> str:
    """The first `n` sentences of a section body (list markers and line breaks flattened)."""
    flat = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", text, flags=re.M)
    flat = re.sub(r"\s+", " ", flat).strip()
    return " ".join(_SENTENCE_END.split(flat)[:n]).strip()


def _flag(signals: object, name: str) -> object:
    if signals is None:
        return None
    if isinstance(signals, dict):
        return signals.get(name)
    return getattr(signals, name, None)


def _coverage(hit: Hit) -> float:
    n = len(hit.covered_terms) + len(hit.missing_terms)
    return len(hit.covered_terms) / n if n else 0.0


def _stamped(decision: Decision, cfg: PolicyConfig, result: RetrievalResult | None, name: str) -> Decision:
    """The baseline's name in the policy version, and the KB version it read."""
    decision.policy_version = f"{cfg.version}/{name}"
    decision.kb_version = result.kb_version if result else ""
    return decision


def _refuse(reason: Reason, message: str, cfg: PolicyConfig, result: RetrievalResult | None, name: str) -> Decision:
    return _stamped(Decision(action=Action.refuse, message=message, reasons=[reason], evidence_status="missing",
                             confidence=0.0), cfg, result, name)


def _answer(hit: Hit, cfg: PolicyConfig, result: RetrievalResult, name: str) -> Decision:
    return _stamped(Decision(
        action=Action.answer,
        message=first_sentences(hit.text) or hit.heading,
        citations=[Citation(doc_id=hit.doc_id, section=hit.section, version=hit.version)],
        reasons=[Reason.grounded_answer],
        evidence_status="direct",
        risk_level=hit.risk,
        confidence=round(min(1.0, hit.fused_score / max(cfg.thresholds.threshold_baseline, 1e-9) / 2), 3),
    ), cfg, result, name)


def _no_retrieval(cfg: PolicyConfig, name: str) -> Decision:
    return _refuse(Reason.retrieval_unavailable,
                   "I'm sorry, I can't look that up right now. Please try again shortly.", cfg, None, name)


def threshold_policy(question: str, result: RetrievalResult | None, cfg: PolicyConfig,
                     signals: object = None) -> Decision:
    """Answer from the top hit when its fused score exceeds `thresholds.threshold_baseline`."""
    if result is None:
        return _no_retrieval(cfg, "threshold")
    top = result.hits[0] if result.hits else None
    if top is None or top.fused_score <= cfg.thresholds.threshold_baseline:
        reason = Reason.no_relevant_evidence if top is None else Reason.low_retrieval_score
        return _refuse(reason, "I'm sorry, I don't have information about that.", cfg, result, "threshold")
    return _answer(top, cfg, result, "threshold")


def minimal_policy(question: str, result: RetrievalResult | None, cfg: PolicyConfig,
                   signals: object = None) -> Decision:
    """The article's five rules, in order. Key-term coverage must reach `thresholds.answer_coverage`;
    the score rule uses the same fused-score threshold as the threshold baseline."""
    name = "minimal"
    top = result.hits[0] if result and result.hits else None
    wants_human = _flag(signals, "human_requested")
    if wants_human is None:
        wants_human = human_requested(question, cfg)
    high_risk = top is not None and top.risk in HIGH_RISK
    # Rule 1: a human was asked for, or the topic is high risk.
    if wants_human or high_risk:
        team = (top.handoff_team if high_risk and top and top.handoff_team else None) or cfg.default_team
        reason = Reason.human_requested if wants_human else Reason.high_risk_topic
        evidence = [EvidenceQuote(doc_id=top.doc_id, section=top.section, version=top.version,
                                  quote=first_sentences(top.text, 1))] if top else []
        return _stamped(Decision(
            action=Action.transfer,
            message="I'll connect you with a colleague who can help with this. Please hold.",
            reasons=[reason], evidence_status="direct" if top else "missing",
            risk_level=top.risk if high_risk and top else "low",
            handoff=Handoff(team=team, summary=f"Caller asked: {question}", question=question,
                            transcript=[question], reasons=[reason.value], evidence=evidence),
        ), cfg, result, name)
    if result is None:
        return _no_retrieval(cfg, name)
    # Rule 2: the best hit scores below the threshold.
    if top is None or top.fused_score < cfg.thresholds.threshold_baseline:
        reason = Reason.no_relevant_evidence if top is None else Reason.low_retrieval_score
        return _refuse(reason, "I'm sorry, I don't have information about that.", cfg, result, name)
    draft = _answer(top, cfg, result, name)
    # Rule 3: a draft answer without a citation.
    if not draft.citations:
        return _refuse(Reason.no_relevant_evidence, "I'm sorry, I can't find a source for that.", cfg, result, name)
    # Rule 4: every citation must be a section retrieved in this turn.
    retrieved = {(h.doc_id, h.section) for h in result.hits}
    if any((c.doc_id, c.section) not in retrieved for c in draft.citations):
        return _refuse(Reason.citation_not_in_evidence, "I'm sorry, I can't confirm that from our sources.",
                       cfg, result, name)
    # Rule 5: the cited section must cover enough of the question's key terms.
    if _coverage(top) < cfg.thresholds.answer_coverage:
        return _refuse(Reason.required_fact_not_covered,
                       "I'm sorry, I don't have a reliable answer to that.", cfg, result, name)
    return draft


BASELINES: dict[str, Baseline] = {"threshold": threshold_policy, "minimal": minimal_policy}
