"""`eval --corpus --punctuation`: the same words without punctuation marks, and whether the action
changes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation.cases import Case
from evaluation.metrics import CaseResult, TurnRecord
from evaluation.cli import _parser
from evaluation.punctuation import asked_again, compare, final_mark_swapped, unpunctuated
from policy.decision import Action, Decision

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.unit
def test_marks_go_but_figures_and_joined_words_stay():
    assert unpunctuated("Hi, um. Is the set-up fee £7.50, or 8.5%? Thanks!") == \
        "Hi um Is the set-up fee £7.50 or 8.5% Thanks"


@pytest.mark.unit
def test_every_turn_of_a_case_loses_its_marks():
    case = Case.model_validate({"id": "c", "turns": ["Hello, there.", "It's for work."], "expect": {"action": "answer"}})
    assert asked_again(case).caller_turns == ["Hello there", "It's for work"]
    single = Case.model_validate({"id": "s", "question": "How much, then?", "expect": {"action": "answer"}})
    assert asked_again(single).caller_turns == ["How much then"]


@pytest.mark.unit
def test_final_marks_are_swapped_and_nothing_else():
    assert final_mark_swapped("Is it free, then?") == "Is it free, then."
    assert final_mark_swapped("I lost my card.") == "I lost my card?"
    assert final_mark_swapped("Help!") == "Help?"
    assert final_mark_swapped("the fee is 7.50") == "the fee is 7.50?"
    case = Case.model_validate({"id": "c", "turns": ["Hello, there.", "Is it £7.50?"], "expect": {"action": "answer"}})
    assert asked_again(case, "final").caller_turns == ["Hello, there?", "Is it £7.50."]
    assert _parser().parse_args(["--corpus", "x", "--punctuation", "final"]).punctuation == "final"
    assert _parser().parse_args(["--corpus", "x", "--punctuation", "--json"]).punctuation == "marks"


def _result(actions: list[Action], expected: list[list[Action]]) -> CaseResult:
    case = Case.model_validate({"id": "c", "turns": [f"t{i}" for i in range(len(actions))],
                                "expect": {"actions": expected}})
    turns = [TurnRecord(case_id="c", bucket="b", index=i, question=f"t{i}", expected=e,
                        decision=Decision(action=a, message="m")) for i, (a, e) in enumerate(zip(actions, expected))]
    return CaseResult(case=case, turns=turns)


@pytest.mark.unit
def test_a_change_is_counted_once_and_judged_against_the_expected_action():
    want = [[Action.clarify], [Action.answer], [Action.answer]]
    same = compare(_result([Action.clarify, Action.answer, Action.answer], want),
                   _result([Action.clarify, Action.answer, Action.answer], want))
    assert (same.turns, same.changed) == (3, 0)
    # turn 2 changes from right to wrong; turn 3 follows another conversation and is not compared
    worse = compare(_result([Action.clarify, Action.answer, Action.answer], want),
                    _result([Action.clarify, Action.refuse, Action.refuse], want))
    assert (worse.turns, worse.changed, worse.right_to_wrong, worse.wrong_to_right) == (2, 1, 1, 0)
    assert worse.examples == ["c turn 2: answer -> refuse (now wrong)"]
    better = compare(_result([Action.refuse], [[Action.answer]]), _result([Action.answer], [[Action.answer]]))
    assert (better.changed, better.right_to_wrong, better.wrong_to_right) == (1, 0, 1)


@pytest.mark.slow
def test_the_corpus_command_counts_changed_turns_per_domain(tmp_path):
    corpus = tmp_path / "corpus"
    src = ROOT / "fixtures" / "domains" / "clinic"
    (corpus / "clinic").mkdir(parents=True)
    spec = (src / "domain.yaml").read_text().replace("../../", f"{ROOT}/fixtures/") if (src / "domain.yaml").exists() \
        else f"kb: {src}/kb\ncases: {src}/cases.yaml\n"
    (corpus / "clinic" / "domain.yaml").write_text(spec)
    p = subprocess.run([sys.executable, str(ROOT / "run.py"), "eval", "--corpus", str(corpus), "--punctuation",
                        "--json"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])["clinic"]
    assert got["turns"] >= 60 and 0 <= got["changed"] <= got["turns"]
    assert got["right_to_wrong"] + got["wrong_to_right"] <= got["changed"]
