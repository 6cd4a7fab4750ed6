"""`eval --corpus --against`: what changed since an earlier run, case by case (sealed domains by totals)."""
from __future__ import annotations

import json

import pytest

from evaluation.corpus_diff import DiffError, diff_runs, load_run, turn_label
from policy.decision import Action, Decision, Reason

pytestmark = pytest.mark.unit


def _domain(cases: int, failures: list[str], unsafe: int, decisions: dict[str, list[str]] | None,
            sealed: bool = False, rate: float = 0.5) -> dict:
    m = {"cases": cases, "failures": {c: ["why"] for c in failures}, "unsafe_answers": unsafe, "sealed": sealed,
         "case_pass_rate": rate}
    if decisions is not None:
        m["decisions"] = decisions
    return m


def test_gains_losses_and_turns_that_moved_without_changing_a_case():
    before = {"vet": _domain(3, ["a", "b"], 2, {"a": ["refuse:x"], "b": ["answer:g"], "c": ["answer:g", "refuse:y"]})}
    now = {"vet": _domain(3, ["b", "c"], 1, {"a": ["answer:g"], "b": ["refuse:x"], "c": ["answer:g", "answer:g"]})}
    d = diff_runs(before, now)
    assert d.passed == (1, 1) and d.unsafe == (2, 1)
    assert d.gained == ["vet/a"] and d.lost == ["vet/c"]
    assert d.turns_changed == 3 and d.turns_changed_in_same_outcome == 1  # b failed both times, yet moved
    assert "cases passed 1 -> 1, unsafe answers 2 -> 1" in d.lines()[0]


def test_sealed_domains_compare_by_totals_only():
    before = {"insurer": _domain(10, [], 1, None, sealed=True, rate=0.5)}
    now = {"insurer": _domain(10, [], 1, None, sealed=True, rate=0.6), "new": _domain(2, [], 0, {})}
    d = diff_runs(before, now)
    assert d.sealed == {"insurer": (0.5, 0.6)} and d.gained == d.lost == [] and d.missing == ["new"]
    assert any("sealed insurer: case pass 0.500 -> 0.600" in line for line in d.lines())


def test_an_older_run_without_turns_says_so():
    d = diff_runs({"vet": _domain(1, [], 0, None)}, {"vet": _domain(1, [], 0, {"a": ["answer:g"]})})
    assert "unknown" in d.lines()[1]


def test_bad_earlier_run_is_a_clear_error(tmp_path):
    bad = tmp_path / "corpus.json"
    bad.write_text("[1, 2]")
    with pytest.raises(DiffError, match="not a corpus run"):
        load_run(bad)
    with pytest.raises(DiffError, match="cannot read"):
        load_run(tmp_path / "missing.json")
    good = tmp_path / "ok.json"
    good.write_text(json.dumps({"vet": _domain(1, [], 0, {})}))
    assert load_run(good)["vet"]["cases"] == 1


def test_turn_label_is_action_and_first_reason():
    d = Decision(action=Action.refuse, message="no", reasons=[Reason.low_retrieval_score, Reason.partial_evidence])
    assert turn_label(d) == "refuse:low_retrieval_score"
    assert turn_label(Decision(action=Action.answer, message="yes")) == "answer"
