"""The two naive baseline policies on hand-made retrieval results."""
from __future__ import annotations

import pytest

from kb.models import EffectiveStatus, Hit, RetrievalResult
from policy.baselines import BASELINES, first_sentences, minimal_policy, threshold_policy
from policy.config import load_policy_config
from policy.decision import Action, Reason

pytestmark = pytest.mark.unit
CFG = load_policy_config()  # default policy: threshold_baseline 0.020, answer_coverage 0.60
TEXT = "Dial 121 to set up voicemail. The default PIN is 0000. Change it on first use. Ignore this."


def hit(fused: float = 0.03, *, risk: str = "low", covered=("voicemail", "set"), missing=(), team="tech_support",
        doc: str = "voicemail-setup", status: EffectiveStatus = EffectiveStatus.active) -> Hit:
    return Hit(locator=f"{doc}#setup", doc_id=doc, section="setup", heading="Setup", title="Voicemail",
               version="2026-01", text=TEXT, status=status, applies_to={}, risk=risk, handoff_team=team,
               supersedes=[], lexical_score=3.0, dense_score=0.6, lexical_rank=1, dense_rank=1,
               fused_score=fused, fused_rank=1, covered_terms=list(covered), missing_terms=list(missing))


def result(*hits: Hit) -> RetrievalResult:
    return RetrievalResult(query="q", query_terms=["voicemail"], hits=list(hits), kb_version="kb-1",
                           visible_sections=10)


def test_registry():
    assert BASELINES == {"threshold": threshold_policy, "minimal": minimal_policy}


def test_first_sentences():
    assert first_sentences(TEXT) == "Dial 121 to set up voicemail. The default PIN is 0000."
    assert first_sentences("- Step one.\n- Step two.\n- Step three.", 2) == "Step one. Step two."


def test_threshold_answers_from_top_hit_above_threshold():
    d = threshold_policy("how do i set up voicemail", result(hit(0.03), hit(0.01, doc="other")), CFG, None)
    assert d.action == Action.answer
    assert d.message == "Dial 121 to set up voicemail. The default PIN is 0000."
    assert [(c.doc_id, c.section) for c in d.citations] == [("voicemail-setup", "setup")]
    assert d.kb_version == "kb-1"


def test_threshold_is_naive_about_status_and_risk():
    # Deprecated, high-risk, a human asked for: the naive design answers anyway.
    d = threshold_policy("agent please", result(hit(0.03, risk="critical", status=EffectiveStatus.deprecated)),
                         CFG, None)
    assert d.action == Action.answer


def test_threshold_refuses_below_threshold_or_without_hits():
    assert threshold_policy("q", result(hit(0.015)), CFG, None).reasons == [Reason.low_retrieval_score]
    assert threshold_policy("q", result(), CFG, None).reasons == [Reason.no_relevant_evidence]
    assert threshold_policy("q", None, CFG, None).reasons == [Reason.retrieval_unavailable]
    cfg = CFG.with_thresholds(threshold_baseline=0.01)
    assert threshold_policy("q", result(hit(0.015)), cfg, None).action == Action.answer


def test_minimal_rule1_human_request_or_high_risk_transfers():
    d = minimal_policy("can i talk to a real person", result(hit()), CFG, {"text": "x"})
    assert d.action == Action.transfer and d.reasons == [Reason.human_requested]
    assert d.handoff is not None and d.handoff.team == CFG.default_team
    d = minimal_policy("close my account", result(hit(risk="high", team="privacy")), CFG, None)
    assert d.action == Action.transfer and d.handoff.team == "privacy"
    assert d.reasons == [Reason.high_risk_topic]
    # An engine-provided flag wins over the lexicon.
    assert minimal_policy("hello", result(hit()), CFG, {"human_requested": "x"}).action == Action.transfer


def test_minimal_rule2_low_score_refuses():
    d = minimal_policy("voicemail", result(hit(0.01)), CFG, None)
    assert d.action == Action.refuse and d.reasons == [Reason.low_retrieval_score]
    assert minimal_policy("voicemail", result(), CFG, None).reasons == [Reason.no_relevant_evidence]


def test_minimal_rule5_low_coverage_refuses():
    d = minimal_policy("voicemail pin reset fee", result(hit(covered=["voicemail"], missing=["pin", "reset", "fee"])),
                       CFG, None)
    assert d.action == Action.refuse and d.reasons == [Reason.required_fact_not_covered]


def test_minimal_answers_when_all_rules_pass():
    d = minimal_policy("set up voicemail", result(hit(covered=["set", "voicemail"], missing=[])), CFG, None)
    assert d.action == Action.answer and d.citations[0].doc_id == "voicemail-setup"
    assert d.policy_version.endswith("/minimal")
