"""The corpus: discovery, leaks, training labels and fit, the rule count, cases' dates and the
conflict check; one real leave-one-out run on a small corpus."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation.corpus import discover
from evaluation.leaks import LeakCheck
from evaluation.policy_stats import count_python, count_yaml, policy_stats
from evaluation.train import Example, _label_turn, _teaches, fit
from kb.loader import load_kb
from evaluation.cases import Case, CasesError, load_cases
from policy.decision import Action, Decision
from policy.features import FEATURES
from evaluation.metrics import TurnRecord, case_failures

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.unit
def test_domains_are_folders_or_named_by_domain_yaml(tmp_path):
    (tmp_path / "a" / "kb").mkdir(parents=True)
    (tmp_path / "a" / "cases.yaml").write_text("[]")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "domain.yaml").write_text("kb: ../a/kb\ncases: ../a/cases.yaml\n")
    (tmp_path / "not-a-domain").mkdir()
    assert [d.name for d in discover(tmp_path)] == ["a", "b"]
    assert discover(tmp_path)[1].kb == (tmp_path / "a" / "kb").resolve()
    with pytest.raises(CasesError, match="no domains"):
        discover(tmp_path / "not-a-domain")
    names = {d.name for d in discover(ROOT / "fixtures" / "domains")}
    assert {"telecom", "clinic"} <= names and len(names) >= 6
    assert not names & {d.name for d in discover(ROOT / "fixtures" / "sealed", sealed=True)}


@pytest.mark.unit
def test_a_domain_named_in_both_corpora_is_refused_and_kept_apart(tmp_path, capsys):
    """Two corpora that each hold an "a": one line and exit 2 before any model loads; in the caches
    the two are different domains, never one engine or one set of examples."""
    from evaluation.cli import corpus_cli

    for side in ("open", "sealed"):
        (tmp_path / side / "a" / "kb").mkdir(parents=True)
        (tmp_path / side / "a" / "cases.yaml").write_text("[]")
    assert corpus_cli(["--corpus", str(tmp_path / "open"), "--sealed", str(tmp_path / "sealed")]) == 2
    assert "domain 'a' is in both" in capsys.readouterr().err
    one, two = discover(tmp_path / "open")[0], discover(tmp_path / "sealed", sealed=True)[0]
    assert one.name == two.name and one.key != two.key


@pytest.mark.unit
def test_cases_files_carry_their_date(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("today: 2026-11-30\ncases:\n- id: a\n  question: q\n  expect: {action: refuse}\n")
    assert load_cases(p).today == dt.date(2026, 11, 30)
    p.write_text("today: 2026-13-01\ncases:\n- id: a\n  question: q\n  expect: {action: refuse}\n")
    with pytest.raises(CasesError, match="today: expected a date"):
        load_cases(p)


@pytest.mark.unit
def test_one_side_of_a_conflict_alone_fails_the_case():
    case = Case.model_validate({"id": "c", "question": "q", "expect": {
        "action_any": ["refuse", "transfer"], "not_contains_any_alone": ["£12", "£15"]}})

    def failures(message):
        rec = TurnRecord(case_id="c", bucket="b", index=0, question="q", expected=[Action.refuse],
                         decision=Decision(action=Action.refuse, message=message))
        return case_failures(case, [rec])
    assert failures("The charge is £12.") == ["not_contains_any_alone: turn 1 states only ['£12']"]
    assert failures("Our pages say £12 and £15.") == [] and failures("I can't confirm that.") == []


@pytest.mark.unit
def test_leaks_are_what_only_hidden_documents_say():
    kb = load_kb(ROOT / "fixtures" / "kb")
    check = LeakCheck(kb)
    assert check.leaks("Try the code RET-20 for twenty percent off.", "public")
    assert not check.leaks("Try the code RET-20 for twenty percent off.", "agent")
    assert not check.leaks("What does RET-20 give?", "public", caller_said="what does RET-20 give")
    assert not check.leaks("Your bill is due 21 days after it is issued.", "public")


@pytest.mark.unit
def test_a_run_of_words_straddling_the_callers_quote_is_not_a_leak(tmp_path):
    (tmp_path / "s.md").write_text("---\nid: s\ntitle: Staff\nacl: [agent]\n---\n# Waivers\n"
                                   "Annual card fee waivers and refunds need a manager code.\n")
    (tmp_path / "p.md").write_text("---\nid: p\ntitle: Public\n---\n# Fees\nThe card costs nothing.\n")
    check = LeakCheck(load_kb(tmp_path))
    q = "list everything under annual card fee waivers"
    assert not check.leaks('Nothing answers "list everything under annual card fee waivers", and I won\'t guess.',
                           "public", q)
    assert check.leaks("Annual card fee waivers and refunds need a manager code.", "public", q)


def _ex(label, row=None, lesson="answer"):
    return Example("d", "c", {f: 0.0 for f in FEATURES} | (row or {}), label, 0, lesson, "doc")


@pytest.mark.unit
def test_turns_teach_answerability_only_from_evidence_outcomes_read_from_the_case():
    answer = Case.model_validate({"id": "a", "question": "q", "expect": {"action": "answer"}})
    refuse = Case.model_validate({"id": "r", "bucket": "no_answer", "question": "q", "expect": {"action": "refuse"}})
    conflict = Case.model_validate({"id": "c", "bucket": "conflicting_sources", "question": "q",
                                    "expect": {"action": "refuse"}})
    disallowed = Case.model_validate({"id": "x", "bucket": "disallowed", "question": "q",
                                      "expect": {"action": "refuse"}})
    assert _teaches(answer, [Action.answer]) == "answer"
    assert _teaches(refuse, [Action.refuse]) == "refuse"
    assert _teaches(disallowed, [Action.refuse]) is None  # refused for what is asked, not for evidence
    assert _teaches(conflict, [Action.refuse]) is None
    assert _teaches(answer, [Action.transfer]) is None
    assert _teaches(answer, None) is None
    ask_back = Case.model_validate({"id": "m", "question": "q", "expect": {
        "action": "clarify", "missing_any": ["plan"], "not_contains": ["£5", "£9"]}})
    assert _teaches(ask_back, [Action.clarify]) == "clarify"
    assert _teaches(ask_back, [Action.clarify], turn=1) is None  # a later clarify asks again: nothing new
    assert _teaches(answer, [Action.clarify]) is None  # no per-facet answers named


@pytest.mark.unit
def test_a_question_asked_before_the_facet_is_answered_by_each_facets_page():
    from tests.policy_helpers import hit
    from policy.evidence import GradedHit

    case = Case.model_validate({"id": "m", "question": "q", "expect": {
        "action": "clarify", "missing_any": ["plan"], "not_contains": ["£5", "£9"]}})
    basic = GradedHit(hit("fees-basic", "The fee is £5.", applies_to={"plan": "basic"}, section="fee"), 0.3)
    plus = GradedHit(hit("fees-plus", "The fee is £9.", applies_to={"plan": "plus"}, section="fee"), 0.3)
    how = GradedHit(hit("fees-plus", "Pay online.", applies_to={"plan": "plus"}, section="how"), 0.3)
    faq = GradedHit(hit("faq", "Fees start at £5.", section="x"), 0.3)  # says it, scoped to nobody: left out
    other = GradedHit(hit("other", "Unrelated.", section="y"), 0.3)
    labels = {g.hit.locator: y for g, y in _label_turn(case, "clarify", [basic, plus, how, faq, other], False)}
    assert labels == {"fees-basic#fee": 1, "fees-plus#fee": 1, "fees-plus#how": 0, "other#y": 0}


@pytest.mark.unit
def test_the_section_holding_the_expected_phrase_is_the_positive():
    from tests.policy_helpers import hit
    from policy.evidence import GradedHit

    case = Case.model_validate({"id": "a", "question": "q", "expect": {
        "action": "answer", "cite_any": ["fees"], "contains_all": ["£5"]}})
    right = GradedHit(hit("fees", "The fee is £5.", section="fee"), 0.5)
    wrong = GradedHit(hit("fees", "Pay online.", section="how"), 0.5)
    also = GradedHit(hit("faq", "It costs £5.", section="x"), 0.5)  # says it too: teaches nothing
    other = GradedHit(hit("other", "Unrelated.", section="y"), 0.5)
    labels = {g.hit.locator: y for g, y in _label_turn(case, "answer", [right, wrong, also, other], True)}
    assert labels == {"fees#fee": 1, "fees#how": 0, "other#y": 0}
    assert _label_turn(case, "answer", [right], final=False) == []


@pytest.mark.unit
def test_an_expected_phrase_is_never_found_inside_a_longer_figure():
    from tests.policy_helpers import hit
    from evaluation.train import _holds

    assert not _holds(hit("a", "It costs £50,000 or £5.50, within 17 days."), ["£5"])
    assert not _holds(hit("a", "Reply within 17 days."), ["7 days"])
    assert _holds(hit("a", "It costs £5. Reply within 7 days."), ["£5", "7 days"])


@pytest.mark.unit
def test_the_fitted_trees_are_exported_exactly():
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingClassifier

    from evaluation.train import MONOTONE

    rng = np.random.default_rng(0)
    examples = [_ex(int(u + c > 1.0), {"unit_max": u, "cov": c}) for u, c in rng.random((200, 2))]
    scorer = fit(examples, trees=20)
    x = np.array([[e.row[f] for f in FEATURES] for e in examples])
    ref = HistGradientBoostingClassifier(max_iter=20, max_depth=3, learning_rate=0.05, min_samples_leaf=10,
                                         monotonic_cst=[MONOTONE.get(f, 0) for f in FEATURES], early_stopping=False,
                                         random_state=0).fit(x, [e.label for e in examples])
    ours = [scorer.probability(e.row) for e in examples[:30]]
    assert np.allclose(ours, ref.predict_proba(x[:30])[:, 1], atol=1e-9)
    with pytest.raises(ValueError, match="both answering"):
        fit([_ex(0), _ex(0)])


@pytest.mark.unit
def test_more_of_the_question_said_never_lowers_the_probability():
    """Fitted on noisy labels where coverage helps, a section that says more of the question (or
    stands further ahead) is never scored lower, whatever bumps the sample has."""
    import numpy as np

    rng = np.random.default_rng(1)
    rows = [{"unit_max": u, "cov": c, "dense_margin": m} for u, c, m in rng.random((400, 3))]
    examples = [_ex(int(r["cov"] + 0.5 * rng.random() > 0.8), r) for r in rows]
    scorer = fit(examples, trees=40)
    base = {f: 0.0 for f in FEATURES} | {"unit_max": 0.6, "dense_margin": 0.2}
    for feature in ("cov", "dense_margin", "unit_max"):
        ps = scorer.probabilities([base | {feature: v} for v in np.linspace(0, 1, 21)])
        assert all(b >= a - 1e-12 for a, b in zip(ps, ps[1:])), feature


@pytest.mark.unit
def test_the_rule_count_reads_code_not_comments():
    src = ('import re\n# re.compile("\\\\bnot counted")\nA = re.compile(r"\\bx\\b")\n'
           'B = [r"\\b(a|b)\\b", r"\\bc\\b"]\nWORDS = frozenset("alpha beta gamma delta".split())\n'
           'def f(t):\n    return re.search(r"\\by\\b", t)\n')
    assert count_python(src) == {"regexes": 4, "word_lists": 1}
    # a table of compiled patterns counts each pattern once; a type's allowed values are no word list
    table = ('import re\nfrom typing import Literal\nKind = Literal["amount", "duration", "when"]\n'
             'T = [("a", re.compile(r"\\bhow much\\b")), ("b", re.compile(r"\\bhow long\\b"))]\n')
    assert count_python(table) == {"regexes": 2, "word_lists": 0}
    assert count_yaml({"lexicons": {"h": ["a", "b"]}, "facet_synonyms": {"k": {"v": ["x"], "w": ["y"]}},
                       "intents": {"human_request": {"examples": ["x"]}}}) == {"regexes": 2, "word_lists": 3}
    assert count_yaml({"synonyms": {"annual leave": ["vacation days"], "bill": ["invoice"]}})["word_lists"] == 2
    stats = policy_stats(ROOT)
    assert stats["total"] == stats["regexes"] + stats["word_lists"] > 0
    assert not any(name.endswith(("cases.py", "metrics.py")) for name in stats["files"])


@pytest.mark.slow
def test_punctuation_never_changes_the_action(tmp_path):
    from evaluation.corpus import Engines

    engines = Engines(tmp_path)
    changed = []
    for d in discover(ROOT / "fixtures" / "domains")[:4]:
        engine = engines.get(d)
        for case in d.cases:
            if case.turns or case.faults:
                continue
            q = case.question.rstrip("?.! ")
            acts = {end: engine.session(role=case.role(), facets=case.caller.all_facets()).turn(q + end).decision.action
                    for end in ("?", ".", "")}
            if len(set(acts.values())) > 1:
                changed.append(f"{d.name}/{case.id}: {acts}")
    assert not changed, changed


@pytest.mark.slow
def test_corpus_command_scores_leave_one_out_and_gates_the_worst(tmp_path):
    corpus = tmp_path / "corpus"
    for name in ("telecom", "clinic", "bank"):
        src = ROOT / "fixtures" / "domains" / name
        (corpus / name).mkdir(parents=True)
        if (src / "domain.yaml").exists():
            spec = (src / "domain.yaml").read_text().replace("../../", f"{ROOT}/fixtures/")
            (corpus / name / "domain.yaml").write_text(spec)
        else:
            (corpus / name / "domain.yaml").write_text(f"kb: {src}/kb\ncases: {src}/cases.yaml\n")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, str(ROOT / "run.py"), "eval", "--corpus", str(corpus), "--no-baselines",
                        "--out", str(out), "--json", "--min-worst", "0.99"], capture_output=True, text=True,
                       timeout=900, cwd=ROOT)
    assert p.returncode == 1 and "worst domain" in p.stderr  # no domain passes 99% of its cases
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert set(res["domains"]) == {"telecom", "clinic", "bank"}
    assert all(m["leaks"] == 0 for m in res["domains"].values())
    assert (out / "corpus.png").stat().st_size > 5000 and json.loads((out / "corpus.json").read_text())


@pytest.mark.slow
def test_train_probes_fits_on_the_given_domains_only(tmp_path, capsys):
    """`run.py train --probes --out FILE`: probes fitted on two domains' turns, loadable by the policy."""
    from evaluation.train import cli
    from policy.turn_probes import load_probes

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("vet", "water"):
        (corpus / name).symlink_to(ROOT / "fixtures" / "domains" / name)
    out = tmp_path / "probes.json"
    assert cli(["--corpus", str(corpus), "--probes", "--out", str(out)]) == 0
    probes = load_probes(out)
    assert probes.keys() == {"urgent", "disallowed", "human_request"}
    for head, probe in probes.items():
        assert probe.meta["domains"] == ["vet", "water"] and probe.meta["positives"] > 0, head
        assert str(probe.meta["embedding"]).startswith("minilm-"), head  # the space its weights hold in
    printed = capsys.readouterr().out
    assert "urgent)" in printed and "disallowed)" in printed
    assert cli(["--corpus", str(corpus), "--urgency", "--out", str(out)]) == 0  # the earlier flag still works


@pytest.mark.slow
def test_train_probes_says_which_head_a_corpus_cannot_teach(tmp_path, capsys):
    """A corpus without a refused disallowed case fits no disallowed probe, and says so."""
    import yaml

    from evaluation.train import cli
    from policy.turn_probes import load_probes

    for name in ("vet", "water"):
        src = ROOT / "fixtures" / "domains" / name
        data = yaml.safe_load((src / "cases.yaml").read_text(encoding="utf-8"))
        data["cases"] = [c for c in data["cases"] if c["bucket"] != "disallowed"]
        (tmp_path / "corpus" / name).mkdir(parents=True)
        (tmp_path / "corpus" / name / "kb").symlink_to(src / "kb")
        (tmp_path / "corpus" / name / "cases.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "probes.json"
    assert cli(["--corpus", str(tmp_path / "corpus"), "--probes", "--out", str(out)]) == 0
    assert load_probes(out).keys() == {"urgent", "human_request"}
    assert "warning: no disallowed probe" in capsys.readouterr().err
