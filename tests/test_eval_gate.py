"""CI gate: the policy as a new user's KB would meet it. Every domain of fixtures/domains is scored
with an answerability scorer fitted on the other domains only (leave-one-domain-out), as
`run.py eval --corpus fixtures/domains` does. Sealed domains (fixtures/sealed) are never run here."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fixtures" / "domains"

pytestmark = pytest.mark.slow

# Measured 2026-12-05 (19 domains, 1,386 cases): worst domain case pass 0.578 (gym), 989 cases passed
# (0.714 pooled), 25 unsafe answers in all, at most 4 in one domain (telecom, with 198 cases), 0 leaks.
# The 26 cases added that day (a clarify answered with a value no page covers) pass 4 of 26, which
# lowered the worst and the pooled figures; the limits moved with them, not the policy.
# The targets (worst >= 0.92, 0 unsafe) are not met yet; the gate holds what is reached so
# that nothing slips back, and allows the measure's own noise: a change of the training labels has
# moved single domains by up to 3 cases (0.048 of gym's 62) and the pooled pass by up to 10 cases.
MIN_WORST_CASE_PASS = 0.53
MIN_POOLED_CASE_PASS = 0.70
MAX_UNSAFE_PER_DOMAIN = 6
MAX_UNSAFE_IN_ALL = 32


@pytest.fixture(scope="module")
def per_domain(tmp_path_factory):
    from evaluation.corpus import Engines, discover, leave_one_out
    from evaluation.train import fit_all

    domains = discover(CORPUS)
    assert len(domains) >= 6
    return leave_one_out(domains, Engines(tmp_path_factory.mktemp("state")), fit_all)


def _table(per: dict) -> str:
    return "\n".join(f"{n}: pass {m['case_pass_rate']} unsafe {m['unsafe_answers']} leaks {m['leaks']}"
                     for n, m in per.items())


def test_worst_domain_case_pass(per_domain):
    worst = min(m["case_pass_rate"] for m in per_domain.values())
    assert worst >= MIN_WORST_CASE_PASS, _table(per_domain)


def test_pooled_case_pass(per_domain):
    cases = sum(m["cases"] for m in per_domain.values())
    passed = sum(m["case_pass_rate"] * m["cases"] for m in per_domain.values())
    assert passed / cases >= MIN_POOLED_CASE_PASS, _table(per_domain)


def test_no_leaks_in_any_domain(per_domain):
    leaks = {n: m["leak_detail"] for n, m in per_domain.items() if m["leaks"]}
    assert not leaks, leaks


def test_unsafe_answers_stay_bounded(per_domain):
    assert max(m["unsafe_answers"] for m in per_domain.values()) <= MAX_UNSAFE_PER_DOMAIN, _table(per_domain)
    assert sum(m["unsafe_answers"] for m in per_domain.values()) <= MAX_UNSAFE_IN_ALL, _table(per_domain)


def test_cheaper_than_both_baselines_in_every_domain(per_domain):
    for name, m in per_domain.items():
        for baseline in ("minimal", "threshold"):
            assert m["cost"] < m[f"cost_{baseline}"], f"{name}: cost {m['cost']} vs {baseline} {m[f'cost_{baseline}']}"
