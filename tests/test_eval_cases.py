"""Loading gold cases: both file formats, the CONTRACT §3 shape, and clear errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.cases import CasesError, load_cases
from policy.decision import Action

pytestmark = pytest.mark.unit
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cases.yaml"


def write(tmp_path: Path, text: str, name: str = "cases.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_yaml_contract_example(tmp_path):
    p = write(tmp_path, """
- id: m01
  bucket: missing_slot
  question: "Can I get a refund if I cancel my annual plan early?"
  caller: {role: public, customer_type: personal}
  faults: [retrieval_unavailable]
  expect:
    action: abstain
    cite_any: [refund-personal-2026]
    missing_any: customer_type
    team: finance_ops
    contains_all: ["5 to 10 business days"]
    not_contains: ["30 days"]
- id: t01
  turns: ["refund?", "I'm a personal customer."]
  caller: {role: agent, facets: {plan_type: monthly}}
  expect: {actions: [clarify, [answer, handoff]]}
""")
    m01, t01 = load_cases(p)
    assert m01.expect.action == Action.refuse  # synonym
    assert m01.expect.missing_any == ["customer_type"]
    assert m01.caller.all_facets() == {"customer_type": "personal"}
    assert m01.role() == "public" and m01.faults == ["retrieval_unavailable"]
    assert m01.expected_per_turn() == [[Action.refuse]]
    assert t01.bucket == "default" and t01.role() == "agent"
    assert t01.caller.all_facets() == {"plan_type": "monthly"}
    assert t01.expected_per_turn() == [[Action.clarify], [Action.answer, Action.transfer]]


def test_jsonl(tmp_path):
    rows = [{"id": "a", "question": "q?", "expect": {"action_any": ["refuse", "transfer"]}},
            {"id": 7, "question": "q2?", "expect": {"action": "answer"}}]
    p = write(tmp_path, "\n".join(json.dumps(r) for r in rows) + "\n\n", "cases.jsonl")
    cases = load_cases(p)
    assert [c.id for c in cases] == ["a", "7"]
    assert cases[0].expected_per_turn() == [[Action.refuse, Action.transfer]]


@pytest.mark.parametrize("body, needle", [
    ("- id: a\n  question: q\n  expect: {action: maybe}\n", "case 'a': expect.action"),
    ("- id: a\n  question: q\n  expect: {cite_any: [x]}\n", "case 'a': expect: expect needs one of"),
    ("- id: a\n  expect: {action: answer}\n", "case 'a': give exactly one of question or turns"),
    ("- id: a\n  question: q\n  turns: [q]\n  expect: {action: answer}\n", "exactly one of question or turns"),
    ("- id: a\n  turns: [q1, q2]\n  expect: {actions: [answer]}\n", "1 entries for 2 turn(s)"),
    ("- id: a\n  question: q\n  expect: {action: answer, acton_any: [refuse]}\n", "expect.acton_any"),
    ("- id: a\n  question: q\n  expect: {action: answer}\n- id: a\n  question: r\n  expect: {action: answer}\n",
     "case 'a': duplicate case id"),
    ("- question: q\n  expect: {action: answer}\n", "case #1: id"),
    ("- just a string\n", "case #1: expected a mapping"),
    ("{a: 1}\n", "expected a list of cases"),
    ("- id: [unclosed\n", "invalid YAML"),
    ("[]\n", "no cases in file"),
])
def test_errors_name_path_case_and_reason(tmp_path, body, needle):
    p = write(tmp_path, body)
    with pytest.raises(CasesError) as err:
        load_cases(p)
    assert str(p) in str(err.value)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_and_bad_jsonl(tmp_path):
    with pytest.raises(CasesError, match="cases file not found"):
        load_cases(tmp_path / "nope.yaml")
    p = write(tmp_path, '{"id": "a"}\n{oops\n', "c.jsonl")
    with pytest.raises(CasesError, match=r"c\.jsonl:2: invalid JSON"):
        load_cases(p)


@pytest.mark.skipif(not FIXTURE.exists(), reason="fixtures/cases.yaml not written yet")
def test_fixture_cases_load():
    cases = load_cases(FIXTURE)
    assert len(cases) >= 160
    assert len({c.bucket for c in cases}) >= 10
