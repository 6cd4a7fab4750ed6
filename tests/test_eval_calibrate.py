"""Threshold calibration: the split, the grid, the retrieval cache, the override file, and one real
sweep over the fixture KB with a tiny grid."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from kb.models import RetrievalUnavailable
from evaluation.calibrate import (GRID, CachingRetriever, calibrate, grid_configs, safer_or_equal, split_cases,
                              write_override)
from evaluation.cases import Case, load_cases
from policy.config import load_policy_config

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kb"
CASES = ROOT / "fixtures" / "cases.yaml"


def mk(cid: str, bucket: str) -> Case:
    return Case.model_validate({"id": cid, "bucket": bucket, "question": "q", "expect": {"action": "answer"}})


@pytest.mark.unit
def test_split_is_stratified_seeded_and_disjoint():
    cases = [mk(f"a{i}", "a") for i in range(10)] + [mk(f"b{i}", "b") for i in range(4)] + [mk("c0", "c")]
    dev, test = split_cases(cases, 0.5, seed=3)
    assert not {c.id for c in dev} & {c.id for c in test}
    assert len(dev) + len(test) == len(cases)
    assert Counter(c.bucket for c in dev) == {"a": 5, "b": 2}  # a single-case bucket stays on one side
    again, _ = split_cases(cases, 0.5, seed=3)
    assert [c.id for c in again] == [c.id for c in dev]
    other, _ = split_cases(cases, 0.5, seed=4)
    assert {c.id for c in other} != {c.id for c in dev}
    dev30, _ = split_cases(cases, 0.3, seed=3)
    assert Counter(c.bucket for c in dev30)["a"] == 3
    with pytest.raises(ValueError, match="dev-fraction"):
        split_cases(cases, 1.0)


@pytest.mark.unit
def test_grid_starts_with_current_and_keeps_thresholds_consistent():
    base = load_policy_config()
    configs = grid_configs(base)
    assert configs[0] is base
    assert 1 < len(configs) <= 1 + 3 ** len(GRID)
    for cfg in configs[1:]:
        t = cfg.thresholds
        assert t.conflict_p >= t.related_p
        assert cfg.costs == base.costs and cfg.lexicons == base.lexicons
    tiny = grid_configs(base, {"related_p": [0.5], "conflict_p": [0.4]})
    assert len(tiny) == 1  # a conflict floor below the relatedness floor is skipped


@pytest.mark.unit
def test_write_is_refused_when_the_test_split_gets_less_safe():
    def report(unsafe_before, unsafe_after, cost_before, cost_after):
        return {"before": {"test": {"unsafe_answers": unsafe_before, "cost": cost_before}},
                "after": {"test": {"unsafe_answers": unsafe_after, "cost": cost_after}}}
    assert safer_or_equal(report(0, 0, 0.5, 0.4)) is None
    assert "unsafe answers on the test split would rise 0 -> 1" in safer_or_equal(report(0, 1, 0.5, 0.1))
    assert "cost on the test split would rise 0.5 -> 0.6" in safer_or_equal(report(1, 1, 0.5, 0.6))


class CountingRetriever:
    def __init__(self):
        self.calls = 0
        self.dense_available = True

    def search(self, query, *, role="public", facets=None, on_date=None, k=8, faults=()):
        self.calls += 1
        if "retrieval_unavailable" in faults:
            raise RetrievalUnavailable("index down")
        return (query, role, dict(facets or {}))


@pytest.mark.unit
def test_caching_retriever_reuses_results_and_failures():
    inner = CountingRetriever()
    r = CachingRetriever(inner)
    a = r.search("q", role="public", facets={"x": "1"})
    assert r.search("q", role="public", facets={"x": "1"}) is a
    r.search("q", role="agent", facets={"x": "1"})
    r.search("q", role="public", facets={"x": "2"})
    for _ in range(2):
        with pytest.raises(RetrievalUnavailable, match="index down"):
            r.search("q", faults=("retrieval_unavailable",))
    assert inner.calls == 4 and r.hits == 2
    assert r.dense_available is True  # everything else passes through


@pytest.mark.unit
def test_write_override_keeps_other_keys(tmp_path):
    (tmp_path / "_policy.yaml").write_text("retrieval: {k: 6}\nthresholds: {max_clarify_facets: 1}\n")
    report = {"seed": 0, "dev_cases": 5, "test_cases": 6,
              "before": {"thresholds": {"related_p": 0.3}, "dev": {"cost": 1.0, "unsafe_answers": 2},
                         "test": {"cost": 1.2, "unsafe_answers": 1}},
              "after": {"thresholds": {"related_p": 0.35}, "dev": {"cost": 0.5, "unsafe_answers": 0},
                        "test": {"cost": 0.9, "unsafe_answers": 1}}}
    path = write_override(tmp_path, report)
    text = path.read_text()
    assert text.startswith("# Written by `run.py calibrate` on ")
    assert "dev 5 cases, test 6 cases" in text and "dev cost 1.0 -> 0.5" in text
    data = yaml.safe_load(text)
    assert data == {"retrieval": {"k": 6}, "thresholds": {"max_clarify_facets": 1, "related_p": 0.35}}
    cfg = load_policy_config(kb_dir=tmp_path)  # the engine's loader accepts what we wrote
    assert cfg.thresholds.related_p == 0.35 and cfg.k == 6


@pytest.mark.slow
def test_calibrate_sweeps_fixture_with_cached_retrieval(tmp_path):
    from policy.engine import Engine

    cases = load_cases(CASES)[:60]
    engine = Engine.load(KB, state_dir=tmp_path)
    grid = {"related_p": [0.35, 0.99], "conflict_p": [0.5, 0.995], "facet_margin": [0.3]}
    report = calibrate(engine, cases, seed=1, grid=grid)
    assert report["dev_cases"] + report["test_cases"] == 60
    assert report["settings_tried"] == 1 + 3  # current + consistent combinations
    assert report["before"]["thresholds"]["related_p"] == engine.config.thresholds.related_p
    # Every setting searched for every turn (dev 5x, test before + after), but each distinct search
    # reached the real retriever once.
    dev, test = split_cases(cases, 0.5, seed=1)
    turns = lambda cs: sum(len(c.caller_turns) for c in cs)  # noqa: E731
    rc = report["retrieval_cache"]
    assert rc["searches"] + rc["reused"] == 4 * turns(dev) + 2 * turns(test)
    assert rc["searches"] <= turns(dev) + turns(test)
    # The chosen setting is never worse on dev than the current one.
    assert report["after"]["dev"]["cost"] <= report["before"]["dev"]["cost"]
    # An absurd floor (p >= 0.99 to be related at all) answers nothing: it must not win.
    assert report["after"]["thresholds"]["related_p"] == 0.35
