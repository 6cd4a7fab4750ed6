"""Every eval metric on hand-made Decisions (no engine, no KB)."""
from __future__ import annotations

import pytest

from evaluation.cases import Case
from policy.config import Costs
from policy.decision import Action, Citation, Decision, Handoff, Reason
from evaluation.metrics import (CaseResult, CitedSource, TurnRecord, case_failures, confusion_matrix,
                            evaluate_metrics, evidence_supported, summarize, turn_cost, version_safe)

pytestmark = pytest.mark.unit

A, C, R, T = Action.answer, Action.clarify, Action.refuse, Action.transfer
REFUND = ("Personal customers get a refund of the unused months within 5 to 10 business days. "
          "An admin fee of $25 is deducted.")


def dec(action: Action, message: str = "ok", *, cite: str | None = None, missing=(), team: str | None = None,
        reasons=(), status: str = "missing") -> Decision:
    return Decision(action=action, message=message,
                    citations=[Citation(doc_id=cite, section="s")] if cite else [],
                    missing_information=list(missing), reasons=list(reasons), evidence_status=status,
                    handoff=Handoff(team=team, summary="x") if team else None)


def case(cid: str = "c1", bucket: str = "b", **expect) -> Case:
    turns = expect.pop("turns", None)
    body = {"id": cid, "bucket": bucket, "expect": expect}
    body.update({"turns": turns} if turns else {"question": "q?"})
    return Case.model_validate(body)


def result(c: Case, *decisions: Decision, sources=None, stale=None) -> CaseResult:
    exp = c.expected_per_turn()
    turns = [TurnRecord(case_id=c.id, bucket=c.bucket, index=i, question=q, expected=exp[i], decision=d,
                        sources=(sources or {}).get(i, []), stale_numbers=(stale or {}).get(i, []))
             for i, (q, d) in enumerate(zip(c.caller_turns, decisions))]
    return CaseResult(case=c, turns=turns, failures=case_failures(c, turns))


def rec(expected, decision: Decision, sources=(), stale=()) -> TurnRecord:
    return TurnRecord(case_id="c", bucket="b", index=0, question="q", expected=expected, decision=decision,
                      sources=list(sources), stale_numbers=list(stale))


def src(text: str = REFUND, status: str = "active", doc: str = "refund") -> CitedSource:
    return CitedSource(doc_id=doc, section="s", text=text, status=status)


# ------------------------------------------------------------------ cost

@pytest.mark.parametrize("expected, got, cost", [
    ([R], A, 10), ([T], A, 10), ([R, T], A, 10), ([C], A, 6),
    ([A], R, 3), ([A], T, 3), ([A], C, 2),
    ([R], T, 1), ([C], R, 1), ([T], C, 1),
    ([A], A, 0), ([R, T], T, 0),
])
def test_turn_cost_uses_policy_weights(expected, got, cost):
    assert turn_cost(rec(expected, dec(got)), Costs()) == cost


def test_cost_weights_come_from_config():
    costs = Costs(answer_instead_of_refuse_or_transfer=50)
    assert turn_cost(rec([R], dec(A)), costs) == 50
    assert turn_cost(rec(None, dec(A)), costs) is None


def test_mean_cost_per_turn():
    results = [result(case("a", action="refuse"), dec(A)),  # 10
               result(case("b", action="answer"), dec(C)),  # 2
               result(case("c", action="answer"), dec(A, "x", cite="refund"), sources={0: [src()]}),  # 0
               result(case("d", action="clarify"), dec(R))]  # 1
    m = summarize(results, Costs())
    assert m["cost"] == pytest.approx(13 / 4)
    assert m["cost_total"] == 13


# ------------------------------------------------------------------ action accuracy & rates

def test_action_accuracy_with_synonyms_and_any():
    results = [result(case("a", action="abstain"), dec(R)),
               result(case("b", action_any=["refuse", "handoff"]), dec(T, team="x")),
               result(case("c", action="answer"), dec(R)),
               result(case("d", action="clarify"), dec(C, missing=["customer_type"]))]
    m = summarize(results, Costs())
    assert m["action_accuracy"] == 0.75
    assert m["case_pass_rate"] == 0.75


def test_case_checks_fail_case_but_not_action_accuracy():
    c = case("a", action="answer", contains_all=["5 to 10 business days"])
    r = result(c, dec(A, "It takes a while.", cite="refund"), sources={0: [src()]})
    m = summarize([r], Costs())
    assert m["action_accuracy"] == 1.0
    assert m["case_pass_rate"] == 0.0
    assert any("contains_all" in f for f in r.failures)


def test_unsafe_answer_rate_over_turns_where_answer_was_wrong():
    results = [result(case("a", action="refuse"), dec(A)),
               result(case("b", action_any=["refuse", "transfer"]), dec(R)),
               result(case("c", action="clarify"), dec(A)),
               result(case("d", action="transfer"), dec(T)),
               result(case("e", action="answer"), dec(A))]  # not in the denominator
    m = summarize(results, Costs())
    assert m["unsafe_answers"] == 2
    assert m["unsafe_answer_rate"] == 0.5


def test_over_abstain_rate():
    results = [result(case("a", action="answer"), dec(R)),
               result(case("b", action="answer"), dec(C)),
               result(case("c", action="answer"), dec(A)),
               result(case("d", action_any=["answer", "clarify"]), dec(C)),  # acceptable: not over-abstaining
               result(case("e", action="refuse"), dec(R))]  # not in the denominator
    m = summarize(results, Costs())
    assert m["over_abstain_rate"] == 0.5


def test_empty_denominators_are_none_not_one():
    m = summarize([result(case("a", action="answer"), dec(A, "x", cite="refund"), sources={0: [src()]})], Costs())
    assert m["unsafe_answer_rate"] is None
    assert m["clarification_precision"] is None
    assert m["handoff_precision"] is None
    assert m["conflict_detection_rate"] is None


def test_clarification_precision():
    results = [
        result(case("a", action="clarify", missing_any=["customer_type"]), dec(C, missing=["customer_type"])),
        result(case("b", action="clarify", missing_any=["customer_type"]), dec(C, missing=["plan_type"])),
        result(case("c", action="refuse"), dec(C, missing=["customer_type"])),  # clarify not warranted
        result(case("d", turns=["q1", "q2"], actions=["clarify", "answer"]), dec(C, missing=["plan_type"]),
               dec(A, "x", cite="refund"), sources={1: [src()]}),  # no missing_any: any asked facet counts
    ]
    m = summarize(results, Costs())
    assert m["clarification_precision"] == 0.5


def test_handoff_precision():
    results = [result(case("a", action="transfer", team="privacy"), dec(T, team="privacy")),
               result(case("b", action="transfer", team="privacy"), dec(T, team="billing")),
               result(case("c", action="transfer", team="fraud"), dec(T, team="fraud")),
               result(case("d", action="transfer"), dec(T, team="anything"))]  # no expected team: not counted
    m = summarize(results, Costs())
    assert m["handoff_precision"] == pytest.approx(2 / 3, abs=1e-4)
    assert "team: transferred to billing, expected privacy" in results[1].failures


# ------------------------------------------------------------------ evidence support

def test_answer_supported_by_cited_text():
    ok, problems = evidence_supported(rec([A], dec(A, "Personal customers get a refund within 5 to 10 business days; "
                                                    "a $25 admin fee is deducted.", cite="refund"), [src()]))
    assert ok, problems


def test_number_missing_from_cited_text_is_unsupported():
    ok, problems = evidence_supported(rec([A], dec(A, "Personal customers get a refund within 14 business days.",
                                                    cite="refund"), [src()]))
    assert not ok
    assert any("14" in p for p in problems)


def test_amount_must_match_exactly():
    ok, _ = evidence_supported(rec([A], dec(A, "Personal customers pay an admin fee of $30 on refunds.",
                                             cite="refund"), [src()]))
    assert not ok


def test_claim_not_in_cited_text_is_unsupported():
    ok, problems = evidence_supported(rec([A], dec(A, "Routers reboot automatically every night at midnight.",
                                                    cite="refund"), [src()]))
    assert not ok
    assert any("terms" in p for p in problems)


def test_answer_without_citation_or_with_unknown_section_is_unsupported():
    assert not evidence_supported(rec([A], dec(A, "Refunds take 5 to 10 business days.")))[0]
    missing = CitedSource(doc_id="nope", section="s", status="missing")
    assert not evidence_supported(rec([A], dec(A, "Refunds take 5 to 10 business days.", cite="nope"), [missing]))[0]


def test_evidence_support_rate_counts_answers_only():
    good = result(case("a", action="answer"), dec(A, "Refund within 5 to 10 business days.", cite="refund"),
                  sources={0: [src()]})
    bad = result(case("b", action="answer"), dec(A, "Refund within 3 business days.", cite="refund"),
                 sources={0: [src()]})
    refused = result(case("c", action="refuse"), dec(R, "I can't say; it was 3 days once."))
    m = summarize([good, bad, refused], Costs())
    assert m["answers"] == 2
    assert m["evidence_support_rate"] == 0.5


# ------------------------------------------------------------------ version safety & conflicts

def test_version_safety():
    d = dec(A, "Refund within 5 to 10 business days.", cite="refund")
    assert version_safe(rec([A], d, [src()]))[0]
    assert not version_safe(rec([A], d, [src(status="deprecated")]))[0]
    assert not version_safe(rec([A], d, [src(status="draft")]))[0]
    # An active citation, but the message repeats the old document's figure.
    stale = rec([A], dec(A, "Refund within 30 days.", cite="refund"), [src()], stale=["30"])
    ok, problems = version_safe(stale)
    assert not ok and "outdated number 30" in problems[0]


def test_version_safety_rate():
    results = [result(case("a", action="answer"), dec(A, "Refund within 5 to 10 business days.", cite="refund"),
                      sources={0: [src()]}),
               result(case("b", action="answer"), dec(A, "Refund within 5 to 10 business days.", cite="old"),
                      sources={0: [src(status="deprecated", doc="old")]})]
    assert summarize(results, Costs())["version_safety_rate"] == 0.5


def test_conflict_detection_rate():
    results = [
        result(case("a", "conflicting_sources", action_any=["refuse", "transfer"]),
               dec(R, reasons=[Reason.conflicting_sources])),
        result(case("b", "conflicting_sources", action_any=["refuse", "transfer"]),
               dec(T, team="billing", status="conflicting")),
        result(case("c", "conflicting_sources", action_any=["refuse", "transfer"]),
               dec(R, reasons=[Reason.no_relevant_evidence])),  # not answered, but conflict not detected
        result(case("d", "conflicting_sources", action_any=["refuse", "transfer"]),
               dec(A, "x", reasons=[Reason.conflicting_sources])),  # answered: never counts
        result(case("e", "direct_evidence", action="refuse"), dec(R, reasons=[Reason.conflicting_sources])),
    ]
    m = summarize(results, Costs())
    assert m["conflict_detection_rate"] == 0.5


# ------------------------------------------------------------------ case checks

def test_case_check_cite_any():
    c = case(action="answer", cite_any=["refund-2026"])
    assert case_failures(c, result(c, dec(A, "x", cite="refund-2026")).turns) == []
    assert "cite_any" in case_failures(c, result(c, dec(A, "x", cite="refund-2025")).turns)[0]


def test_case_check_missing_any():
    c = case(action="clarify", missing_any=["customer_type"])
    assert case_failures(c, result(c, dec(C, missing=["customer_type"])).turns) == []
    assert "missing_any" in case_failures(c, result(c, dec(C, missing=["plan_type"])).turns)[0]


def test_case_check_contains_and_not_contains_case_insensitive():
    c = case(action="answer", contains_all=["5 to 10 Business Days"], not_contains=["$30"])
    assert case_failures(c, result(c, dec(A, "It takes 5 to 10  business days.")).turns) == []
    fails = case_failures(c, result(c, dec(A, "It used to cost $30, now 5 to 10 business days.")).turns)
    assert fails == ["not_contains: turn 1 says '$30'"]


def test_not_contains_checks_every_turn():
    c = case(turns=["q1", "q2"], actions=["clarify", "answer"], not_contains=["secret"])
    r = result(c, dec(C, "The SECRET code is...", missing=["x"]), dec(A, "fine"))
    assert r.failures == ["not_contains: turn 1 says 'secret'"]


def test_multi_turn_per_turn_actions_and_last_turn_only_for_action():
    c = case(turns=["q1", "q2"], actions=["clarify", "answer"])
    r = result(c, dec(C, missing=["customer_type"]), dec(R))
    assert r.failures == ["turn 2: expected answer, got refuse"]
    c2 = case(turns=["q1", "q2"], action="transfer")
    assert c2.expected_per_turn() == [None, [T]]
    assert result(c2, dec(A), dec(T, team="x")).ok


# ------------------------------------------------------------------ confusion & buckets

def test_confusion_matrix_rows_expected_cols_actual():
    turns = [rec([A], dec(A)), rec([A], dec(R)), rec([R, T], dec(T)), rec([R, T], dec(A)), rec(None, dec(C))]
    m = confusion_matrix(turns)
    assert m[0] == [1, 0, 1, 0]  # expected answer: 1 right, 1 refused
    assert m[3] == [0, 0, 0, 1]  # action_any right -> counted under the actual (transfer)
    assert m[2] == [1, 0, 0, 0]  # action_any wrong -> first acceptable (refuse)
    assert sum(map(sum, m)) == 4


def test_per_bucket_breakdown():
    results = [result(case("a", "x", action="refuse"), dec(A)),
               result(case("b", "y", action="refuse"), dec(R))]
    m = evaluate_metrics(results, Costs())
    assert set(m["buckets"]) == {"x", "y"}
    assert m["buckets"]["x"]["unsafe_answer_rate"] == 1.0
    assert m["buckets"]["y"]["unsafe_answer_rate"] == 0.0
    assert m["unsafe_answer_rate"] == 0.5
    assert m["confusion"]["labels"] == ["answer", "clarify", "refuse", "transfer"]


def test_out_line_shape():
    r = result(case("a", "x", action="refuse"), dec(A, "x"))
    line = r.line()
    assert {"id", "bucket", "transcripts", "decisions", "ok", "failures"} <= set(line)
    assert line["ok"] is False and line["decisions"][0]["action"] == "answer"
    assert "debug" not in line["decisions"][0]
