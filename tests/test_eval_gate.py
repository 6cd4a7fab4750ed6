"""CI gate: the policy as a new user's KB would meet it. Every domain of fixtures/domains is scored
with an answerability scorer fitted on the other domains only (leave-one-domain-out), as
`run.py eval --corpus fixtures/domains` does. Sealed domains (fixtures/sealed) are never run here."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fixtures" / "domains"

pytestmark = pytest.mark.slow

# Measured 2026-11-30 (15 domains): worst domain case pass 0.581 (gym), 18 unsafe answers in all, at
# most 2 in one domain, 0 leaks. The targets (worst >= 0.92, 0 unsafe) are not met yet; the
# gate holds what is reached so that nothing slips back.
MIN_WORST_CASE_PASS = 0.57
MAX_UNSAFE_PER_DOMAIN = 2
MAX_UNSAFE_IN_ALL = 18


@pytest.fixture(scope="module")
def per_domain(tmp_path_factory):
    from evaluation.corpus import Engines, discover, leave_one_out
    from evaluation.train import fit_on_domains

    domains = discover(CORPUS)
    assert len(domains) >= 6
    return leave_one_out(domains, Engines(tmp_path_factory.mktemp("state")), fit_on_domains)


def _table(per: dict) -> str:
    return "\n".join(f"{n}: pass {m['case_pass_rate']} unsafe {m['unsafe_answers']} leaks {m['leaks']}"
                     for n, m in per.items())


def test_worst_domain_case_pass(per_domain):
    worst = min(m["case_pass_rate"] for m in per_domain.values())
    assert worst >= MIN_WORST_CASE_PASS, _table(per_domain)


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
