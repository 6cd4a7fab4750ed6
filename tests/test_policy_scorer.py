"""The answerability scorer: its file format, both model forms, the explanation, the calibration
and the cost-derived threshold; and the shipped scorer's own file."""
from __future__ import annotations

import json

import math

import pytest

from policy.features import FEATURES
from policy.scorer import DEFAULT_MODEL_FILE, Scorer, ScorerError, Tree, answer_threshold, load_scorer

pytestmark = pytest.mark.unit


def _stump(feature: str, split: float, low: float, high: float) -> Tree:
    return Tree([FEATURES.index(feature), -2, -2], [split, -2.0, -2.0], [1, -1, -1], [2, -1, -1], [0.0, low, high])


def test_trees_add_up_to_a_probability():
    s = Scorer(FEATURES, [0.0] * len(FEATURES), [1.0] * len(FEATURES), [0.0] * len(FEATURES), -1.0,
               trees=[_stump("unit_max", 0.5, -2.0, 2.0), _stump("cov", 0.5, -1.0, 1.0)], rate=1.0)
    assert s.probability({"unit_max": 0.9, "cov": 0.9}) == pytest.approx(1 / (1 + 2.718281828 ** -2), abs=1e-6)
    assert s.probability({"unit_max": 0.1, "cov": 0.1}) < 0.02
    top = s.explain({"unit_max": 0.9, "cov": 0.1}, top=1)
    assert top[0].startswith("unit_max +")


def test_logistic_form_and_round_trip():
    s = Scorer(FEATURES, [0.5] * len(FEATURES), [0.25] * len(FEATURES),
               [2.0 if f == "cov" else 0.0 for f in FEATURES], 0.0, {"fitted_on_hash": "x"})
    assert s.probability({**{f: 0.5 for f in FEATURES}, "cov": 0.75}) == pytest.approx(0.8808, abs=1e-4)
    again = Scorer.from_json(json.loads(json.dumps(s.to_json())))
    assert again.probability({"cov": 0.9}) == s.probability({"cov": 0.9}) and again.fingerprint == "x"


def test_malformed_scorers_are_refused():
    good = Scorer(FEATURES, [0.0] * len(FEATURES), [1.0] * len(FEATURES), [0.0] * len(FEATURES), 0.0).to_json()
    with pytest.raises(ScorerError, match="unknown features"):
        Scorer.from_json({**good, "features": ["nope", *good["features"][1:]]})
    with pytest.raises(ScorerError, match="differ in length"):
        Scorer.from_json({**good, "mean": [0.0]})
    with pytest.raises(ScorerError, match="malformed"):
        Scorer.from_json({"features": list(FEATURES)})


def test_calibration_maps_the_best_sections_p_to_the_turns_odds():
    s = Scorer(FEATURES, [0.0] * len(FEATURES), [1.0] * len(FEATURES), [0.0] * len(FEATURES), 0.0,
               calibration=(1.0, 0.0))
    assert s.answer_probability(0.8) == pytest.approx(0.8)
    s.calibration = (1.0, -1.0)  # a model too sure of itself
    assert s.answer_probability(0.8) < 0.8


def test_the_threshold_follows_from_the_costs():
    assert answer_threshold(10, 3) == pytest.approx(10 / 13)
    assert answer_threshold(1, 1) == 0.5


def test_the_shipped_scorer_loads_and_a_kb_may_carry_its_own(tmp_path):
    shipped = load_scorer()
    assert set(shipped.features) <= set(FEATURES) and shipped.trees and len(shipped.meta["domains"]) >= 6
    own = Scorer(FEATURES, [0.0] * len(FEATURES), [1.0] * len(FEATURES), [0.0] * len(FEATURES), 3.0,
                 {"fitted_on_hash": "kb-own"})
    (tmp_path / "_answerability.json").write_text(json.dumps(own.to_json()))
    assert load_scorer(tmp_path).fingerprint == "kb-own"
    assert load_scorer(tmp_path / "elsewhere").fingerprint == shipped.fingerprint
    (tmp_path / "_answerability.json").write_text("{not json")
    with pytest.raises(ScorerError, match="cannot read scorer"):
        load_scorer(tmp_path)
    assert DEFAULT_MODEL_FILE.name == "answerability.json"


@pytest.mark.unit
def test_all_rows_through_all_trees_at_once_give_the_per_tree_sums_exactly():
    import random

    from policy.scorer import load_scorer

    s = load_scorer()  # the shipped trees
    rng = random.Random(3)
    rows = [{f: rng.choice([0.0, 1.0, rng.random(), rng.uniform(-1, 2)]) for f in FEATURES} for _ in range(300)]
    one_by_one = []
    for row in rows:
        x = [row[n] for n in s.features]
        z = s.intercept + s.rate * sum(t.predict(x) for t in s.trees)
        one_by_one.append(1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z)))))
    assert s.probabilities(rows) == one_by_one  # the same floats, not merely close
    assert len(set(one_by_one)) > 100  # the rows reach many different leaves
