"""Fit the urgency probe (policy/urgency.py) on gold cases across domains.

Every scored caller turn of every case is one example: the sentence embedding of the turn as the
policy reads it (`normalize_text`), labelled urgent when its case is in the contract's `high_risk`
bucket and expects that turn to be transferred. Nothing else in the case is read, and no gate's
decision: the lesson comes from the case alone. Sealed domains are never passed in.

A logistic regression with balanced class weights (urgent turns are about 5% of turns); its
weights are the probe."""
from __future__ import annotations

import numpy as np

from evaluation.cases import Case
from evaluation.corpus import Domain, Engines, PerDomain
from policy.decision import Action
from policy.language import normalize_text
from policy.urgency import UrgencyProbe

HIGH_RISK_BUCKET = "high_risk"
C = 1.0  # inverse regularisation: out of fold over 19 domains, 0.3-3 give AUC 0.93-0.94


def urgent_turns(case: Case) -> list[tuple[str, int]]:
    """(turn as the policy reads it, 1 if it must go to a person as high-risk) for each scored turn."""
    out = []
    for text, expected in zip(case.caller_turns, case.expected_per_turn()):
        if expected is None or case.faults:
            continue
        label = int(case.bucket.startswith(HIGH_RISK_BUCKET) and Action.transfer in expected)
        out.append((normalize_text(text), label))
    return out


def turn_vectors(domain: Domain, engines: Engines) -> tuple[np.ndarray, np.ndarray]:
    """A domain's turns' embeddings and labels (no rows without the dense model)."""
    turns = [t for case in domain.cases for t in urgent_turns(case)]
    engine = engines.get(domain)
    if not engine.retriever.model_id or not turns:
        vecs = np.zeros((0, 0), dtype=np.float32)
    else:
        vecs = engine.retriever.embed([t for t, _ in turns])
    return vecs, np.array([y for _, y in turns], dtype=np.int64)


_CACHE = PerDomain(turn_vectors)  # computed once per run


def fit_urgency(domains: list[Domain], engines: Engines) -> UrgencyProbe | None:
    """The probe fitted on these domains' turns; None without the dense model or without both kinds
    of turn."""
    from sklearn.linear_model import LogisticRegression  # heavy, optional: only to fit

    if any(d.sealed for d in domains):
        raise ValueError("sealed domains are never trained on")
    parts = [_CACHE.get(d, engines) for d in domains]
    parts = [(x, y) for x, y in parts if len(x)]
    if not parts:
        return None
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    if len(set(y.tolist())) < 2:
        return None
    model = LogisticRegression(C=C, class_weight="balanced", max_iter=2000).fit(x, y)
    meta = {"domains": sorted(d.name for d in domains), "turns": int(len(y)), "urgent": int(y.sum()), "C": C}
    return UrgencyProbe(model.coef_[0].astype(np.float32), float(model.intercept_[0]), meta)
