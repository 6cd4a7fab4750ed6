"""Fit the answerability scorer on gold cases across domains (`run.py train`).

Each case turn is run through the real session; every current section it retrieved becomes one
example, labelled from the case's expectation alone:
- a turn that must be answered: the cited document's section holding the expected phrases is a
  positive; every other current section is a negative (the wrong page, or the right page's wrong
  section);
- a turn that must be refused for lack of evidence (not a conflict, not a refused request): every
  current section is a negative;
- a first turn that must be clarified (the answer depends on who the caller is): a section of a
  document scoped by facets that states one of the case's per-facet answers (its `not_contains` or
  `contains_all` phrases) answers the question, for that caller; the other sections of those
  documents, and sections stating none of the phrases, do not;
- other turns (transfers, faults, conflicts, disallowed requests) teach nothing here.
The lesson comes from the case alone, never from the gate that decided the turn: a policy rule that
changes how a turn is read (a request for a person, say) must not change what the scorer learns.
Sealed domains are never passed in."""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from evaluation.cases import Case, CasesError
from evaluation.corpus import Domain, Engines, Fitted, PerDomain, discover
from kb.models import Hit
from policy.decision import Action
from policy.engine import Engine
from policy.evidence import GradedHit
from policy.features import FEATURES
from policy.scorer import DEFAULT_MODEL_FILE, Scorer, Tree, logit
from policy.turn_probes import DEFAULT_PROBES_FILE, HEADS, probes_to_json

if TYPE_CHECKING:
    from numpy.typing import NDArray

# buckets whose refusals are about the request, not the evidence: the sections found may well answer
_NOT_EVIDENCE_BUCKETS = ("conflict", "disallow", "high_risk", "human", "approval")


@dataclass
class Example:
    domain: str
    case_id: str
    row: dict[str, float]
    label: int
    turn: int = 0  # which caller turn of the case
    lesson: str = ""  # "answer" or "refuse": what the turn teaches
    doc_id: str = ""


def _norm(text: str) -> str:
    return " ".join(text.lower().replace("\u2019", "'").split())


def _holds(hit: Hit, phrases: list[str]) -> bool:
    """Whether the section states every phrase as written, never inside a longer figure or word
    ("£5" is not in "£50" or "£5.50", "7 days" is not in "17 days")."""
    text = _norm(" ".join([hit.heading, *hit.units, hit.text]))
    return all(re.search(rf"(?<![\w.,£$€]){re.escape(_norm(p))}(?!\w|[.,]\d)", text) for p in phrases)


def _teaches(case: Case, expected: list[Action] | None, turn: int = 0) -> str | None:
    """'answer', 'refuse', 'clarify' or None: what this turn says about answerability, from the case
    alone."""
    if case.faults or expected is None:
        return None
    if expected == [Action.answer]:
        return "answer"
    if expected == [Action.clarify] and turn == 0 and (case.expect.not_contains or case.expect.contains_all):
        return "clarify"
    about_request = any(b in case.bucket.lower() for b in _NOT_EVIDENCE_BUCKETS)
    if expected == [Action.refuse] and not case.expect.not_contains_any_alone and not about_request:
        return "refuse"
    return None


def _label_turn(case: Case, lesson: str, graded: list[GradedHit], final: bool) -> list[tuple[GradedHit, int]]:
    active = [g for g in graded if g.active]
    if lesson == "refuse":
        return [(g, 0) for g in active]
    if lesson == "clarify":
        return _label_clarify(case, active)
    if not final:
        return []  # cite_any and contains_all speak of the last turn
    cited = set(case.expect.cite_any)
    phrases = list(case.expect.contains_all)
    good = [g for g in active if (not cited or g.doc_id in cited) and (not phrases or _holds(g.hit, phrases))]
    if not phrases and cited:
        good = good[:1]  # without phrases, the cited document's best-ranked section
    if not good:
        return []  # retrieval missed the answer: nothing to learn about answerability
    # another page that states the same phrases answers too, though the case cites one: teach nothing
    ambiguous = [g for g in active if g not in good and phrases and _holds(g.hit, phrases)]
    return [(g, 1 if g in good else 0) for g in active if g not in ambiguous]


def _label_clarify(case: Case, active: list[GradedHit]) -> list[tuple[GradedHit, int]]:
    """A question asked before the caller said who they are: each facet's page that states its
    answer answers it; a page stating an answer but scoped to nobody is left out (it may be the
    general answer or a stray mention)."""
    keys = set(case.expect.missing_any)
    phrases = [*case.expect.not_contains, *case.expect.contains_all]

    def scoped(g: GradedHit) -> bool:
        return bool(g.hit.applies_to) and (not keys or bool(keys & set(g.hit.applies_to)))

    says = {id(g): any(_holds(g.hit, [p]) for p in phrases) for g in active}
    good = [g for g in active if says[id(g)] and scoped(g)]
    if not good:
        return []
    return [(g, 1 if g in good else 0) for g in active if g in good or not says[id(g)]]


def capture(engine: Engine, cases: list[Case], domain: str) -> list[Example]:
    """Run the cases (text path) and turn their retrieved sections into labelled examples."""
    out: list[Example] = []
    for case in cases:
        session = engine.session(role=case.role(), facets=case.caller.all_facets())
        expected = case.expected_per_turn()
        turns = case.caller_turns
        for i, text in enumerate(turns):
            res = session.turn(text, faults=tuple(case.faults))
            lesson = _teaches(case, expected[i], i)
            if lesson is None:
                continue
            for g, label in _label_turn(case, lesson, res.graded, i == len(turns) - 1):
                out.append(Example(domain, case.id, dict(g.features), label, i, lesson, g.doc_id))
    return out


# More of what the question asks, said more closely, never makes a section less likely to answer:
# trees fitted on a few thousand sections otherwise learn bumps that do not carry to another KB
# (a section saying none of "I want to talk to a person" scored 0.5 once).
MONOTONE = {"dense": 1, "unit_max": 1, "heading": 1, "cov": 1, "cov_exact": 1, "miss_max": -1, "dense_margin": 1,
            "unit_margin": 1, "kind_missing": -1, "kind_top": 1, "lex": 1, "rank": 1, "align": 1, "focus": 1,
            "unit_cov": 1}


# Boosting rounds at the learning rate below. Leave-one-domain-out over the 19 development domains
# (policy 2026.12-15): 150 rounds 996 cases, 26 unsafe, cost 1,150; 200: 1,001 / 24 / 1,123; 250:
# 1,001 / 24 / 1,122; 300: 1,000 / 23 / 1,119; 400: 999 / 23 / 1,120. 150 stopped short of the plateau.
TREES = 300


def fit(examples: list[Example], *, trees: int = TREES, depth: int = 3, rate: float = 0.05) -> Scorer:
    """Gradient-boosted trees under the MONOTONE constraints (scikit-learn's histogram boosting),
    exported to the scorer's own format."""
    from sklearn.ensemble import HistGradientBoostingClassifier  # heavy, optional: only to fit

    if len({e.label for e in examples}) < 2:
        raise ValueError("need both answering and non-answering sections to fit the scorer")
    x = np.array([[e.row[f] for f in FEATURES] for e in examples])
    y = np.array([e.label for e in examples])
    model = HistGradientBoostingClassifier(max_iter=trees, max_depth=depth, learning_rate=rate, min_samples_leaf=10,
                                           monotonic_cst=[MONOTONE.get(f, 0) for f in FEATURES],
                                           early_stopping=False, random_state=0).fit(x, y)
    exported, gain = [], np.zeros(len(FEATURES))
    for (predictor,) in model._predictors:  # one tree per round (binary: one class)
        exported.append(_tree(predictor.nodes))
        splits = predictor.nodes[predictor.nodes["is_leaf"] == 0]
        np.add.at(gain, splits["feature_idx"], np.maximum(splits["gain"], 0.0))
    domains = sorted({e.domain for e in examples})
    digest = hashlib.sha256(json.dumps([domains, len(examples), trees, depth, rate, "monotone"]).encode()).hexdigest()[:8]
    meta = {"domains": domains, "examples": len(examples), "positives": int(y.sum()), "trees": trees,
            "depth": depth, "fitted_on_hash": f"scorer-{digest}"}
    importance = [float(v) for v in gain / (gain.sum() or 1.0)]
    return Scorer(FEATURES, [float(v) for v in x.mean(axis=0)], [float(v) for v in x.std(axis=0)], importance,
                  float(np.ravel(model._baseline_prediction)[0]), meta, exported, 1.0)


def _tree(nodes: NDArray[np.void]) -> Tree:
    """A histogram-boosting tree's node records as the scorer's arrays (leaf values already carry
    the learning rate; a leaf's children are -1)."""
    leaf = [bool(v) for v in nodes["is_leaf"]]
    return Tree([int(f) for f in nodes["feature_idx"]], [float(v) for v in nodes["num_threshold"]],
                [-1 if is_leaf else int(v) for v, is_leaf in zip(nodes["left"], leaf)],
                [-1 if is_leaf else int(v) for v, is_leaf in zip(nodes["right"], leaf)],
                [float(v) for v in nodes["value"]])


# examples per domain, captured once per run (features do not depend on the scorer)
_CACHE: PerDomain[list[Example]] = PerDomain(lambda d, engines: capture(engines.get(d), list(d.cases), d.name))


def fit_on_domains(domains: list[Domain], engines: Engines) -> Scorer:
    """The scorer for a held-out domain: fitted on these (never sealed) domains only, its answer
    probability calibrated on each of them as if it were unseen (the others fitted without it)."""
    if any(d.sealed for d in domains):
        raise ValueError("sealed domains are never trained on")
    by_domain = {d.name: _CACHE.get(d, engines) for d in domains}
    scorer = fit([e for ex in by_domain.values() for e in ex])
    scorer.meta["embedding"] = engines.get(domains[0]).retriever.model_id  # the cosines' space
    if len(by_domain) > 2:
        pairs = []
        for name, held in by_domain.items():
            inner = fit([e for n, ex in by_domain.items() if n != name for e in ex])
            pairs += turn_tops(held, inner)
        scorer.calibration = calibrate_turns(pairs)
        scorer.meta["calibration_turns"] = len(pairs)
        scorer.meta["calibration_document"] = "likeliest section"  # what the calibrated probability is of
    return scorer


def fit_all(domains: list[Domain], engines: Engines) -> Fitted:
    """The scorer and the turn probes for a held-out domain, all fitted on these domains only."""
    from evaluation.probe_fit import fit_probes

    return Fitted(fit_on_domains(domains, engines), fit_probes(domains, engines))


def turn_tops(examples: list[Example], scorer: Scorer) -> list[tuple[float, int]]:
    """Per turn, the probability that the most likely document answers (its likeliest
    section's, as the gates compute it) and whether answering from it is right (an answer turn
    whose answering section is in that document)."""
    turns: dict[tuple[str, int], list[tuple[float, Example]]] = {}
    for e, p in zip(examples, scorer.probabilities([e.row for e in examples])):
        if e.lesson != "clarify":  # such a turn is asked back whatever its sections say
            turns.setdefault((e.case_id, e.turn), []).append((p, e))
    out = []
    for rows in turns.values():
        by_doc: dict[str, list[tuple[float, Example]]] = {}
        for p, e in rows:
            by_doc.setdefault(e.doc_id, []).append((p, e))
        doc_p = {d: max(p for p, _ in rs) for d, rs in by_doc.items()}
        doc = max(doc_p, key=lambda d: doc_p[d])
        right = any(e.lesson == "answer" and e.label == 1 for _, e in by_doc[doc])
        out.append((doc_p[doc], int(right)))
    return out


def calibrate_turns(pairs: list[tuple[float, int]]) -> tuple[float, float]:
    from sklearn.linear_model import LogisticRegression  # heavy, optional: scikit-learn, only to fit

    if len({y for _, y in pairs}) < 2:
        return (1.0, 0.0)
    x = [[logit(p)] for p, _ in pairs]
    model = LogisticRegression(C=10.0).fit(x, [y for _, y in pairs])
    return (float(model.coef_[0][0]), float(model.intercept_[0]))


def _write(target: Path, payload: object) -> int:
    try:
        target.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        print(f"error: --out {target}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {target}")
    return 0


def _fit_scorer(domains: list[Domain], target: Path | None) -> int:
    scorer = fit_on_domains(domains, Engines())
    print(f"fitted on {scorer.meta['examples']} sections ({scorer.meta['positives']} answering) "
          f"from {', '.join(cast('list[str]', scorer.meta['domains']))}")  # as fit() wrote them
    for name, weight in sorted(zip(scorer.features, scorer.coef), key=lambda x: -abs(x[1])):
        print(f"  {name:<14}{weight:.3f} importance")
    return _write(target, scorer.to_json()) if target else 0


def _fit_probes(domains: list[Domain], target: Path | None) -> int:
    from evaluation.probe_fit import LESSONS, fit_probes

    probes = fit_probes(domains, Engines())
    if not probes:
        print("error: no turn probe: the dense model is unavailable, or no case has a high-risk turn to "
              "transfer or a disallowed one to refuse", file=sys.stderr)
        return 2
    for head, probe in probes.items():
        print(f"fitted the {head} probe on {probe.meta['turns']} turns ({probe.meta['positives']} {head}) "
              f"from {', '.join(cast('list[str]', probe.meta['domains']))}")
    for head in (h for h in HEADS if h not in probes):
        bucket, action = LESSONS[head]
        print(f"warning: no {head} probe: no case in a `{bucket}` bucket expects a turn to {action.value}; "
              f"the file holds none, so that reading is off", file=sys.stderr)
    return _write(target, probes_to_json(probes)) if target else 0


def cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="run.py train", description="Fit the answerability scorer (or, with "
                                "--probes, the turn probes) on a corpus.")
    p.add_argument("--corpus", required=True, help="folder of domains (each: kb/ + cases.yaml, or domain.yaml)")
    p.add_argument("--probes", "--urgency", dest="probes", action="store_true",
                   help=f"fit the turn probes ({DEFAULT_PROBES_FILE.name}: urgent, disallowed) instead of the scorer")
    p.add_argument("--write", action="store_true",
                   help=f"write it to {DEFAULT_MODEL_FILE.name} ({DEFAULT_PROBES_FILE.name} with --probes)")
    p.add_argument("--out", help="write it here instead")
    args = p.parse_args(argv)
    default = DEFAULT_PROBES_FILE if args.probes else DEFAULT_MODEL_FILE
    target = Path(args.out) if args.out else (default if args.write else None)
    if target is not None and not (target.parent.is_dir() and os.access(target.parent, os.W_OK)):
        print(f"error: --out {target}: cannot write there (no such folder, or no permission)", file=sys.stderr)
        return 2  # said before minutes of fitting, not after
    try:
        domains = discover(args.corpus)
        return (_fit_probes if args.probes else _fit_scorer)(domains, target)
    except (CasesError, ValueError) as exc:  # a bad corpus; cases that mark no section as answering
        print(f"error: {exc}", file=sys.stderr)
        return 2
