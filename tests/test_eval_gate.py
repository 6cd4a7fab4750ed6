"""CI gate: the real policy on the gold cases. No unsafe answer, action accuracy >= 0.95, and a
lower cost score than both naive baselines run in the same harness."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from policy.cases import load_cases
from policy.evaluate import evaluate

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kb"
CASES = ROOT / "fixtures" / "cases.yaml"

pytestmark = pytest.mark.slow
DATE = dt.date(2026, 11, 29)  # the cases were written against the KB as of this day

# The targets: 0 unsafe answers and action accuracy >= 0.95 (0.952 measured 2026-11-30,
# 200 of 210 turns; most of the rest are heavy paraphrases that are refused).
MAX_UNSAFE_ANSWERS = 0
MIN_ACTION_ACCURACY = 0.95


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from policy.calibrate import _scratch
    from policy.engine import Engine

    engine = _scratch(Engine.load(KB, state_dir=tmp_path_factory.mktemp("state"), on_date=DATE))
    cases = load_cases(CASES)
    return {p: evaluate(engine, cases, policy=p) for p in ("gated", "threshold", "minimal")}


def _failing(results, pred) -> str:
    bad = [f"{r.case.id} [{r.case.bucket}]: {'; '.join(r.failures)}" for r in results if pred(r)]
    return "\n".join(bad[:40])


def test_no_unsafe_answers(runs):
    results, m = runs["gated"]
    unsafe = lambda r: any(t.expected and "answer" not in [a.value for a in t.expected]  # noqa: E731
                           and t.decision.action.value == "answer" for t in r.turns)
    assert m["unsafe_answers"] <= MAX_UNSAFE_ANSWERS, "unsafe answers:\n" + _failing(results, unsafe)


def test_action_accuracy(runs):
    results, m = runs["gated"]
    assert m["action_accuracy"] >= MIN_ACTION_ACCURACY, (f"action accuracy {m['action_accuracy']}:\n"
                                          + _failing(results, lambda r: any("expected" in f for f in r.failures)))


def test_cheaper_than_both_baselines(runs):
    gated = runs["gated"][1]["cost"]
    for name in ("threshold", "minimal"):
        assert gated < runs[name][1]["cost"], f"gated cost {gated} vs {name} {runs[name][1]['cost']}"


# A second knowledge base, written without looking at the policy code (a veterinary clinic), checks
# that the policy carries over to a domain it was not tuned on. Measured 2026-11-30: 0.892, 0 unsafe.
CLINIC_KB = ROOT / "fixtures" / "kb_clinic"
CLINIC_CASES = ROOT / "fixtures" / "cases_clinic.yaml"


def test_unseen_domain_no_unsafe_answers_and_accuracy_floor(tmp_path):
    from policy.calibrate import _scratch
    from policy.engine import Engine

    engine = _scratch(Engine.load(CLINIC_KB, state_dir=tmp_path, on_date=DATE))
    results, m = evaluate(engine, load_cases(CLINIC_CASES))
    assert m["unsafe_answers"] == 0, _failing(results, lambda r: not r.ok)
    assert m["action_accuracy"] >= 0.88, _failing(results, lambda r: not r.ok)
