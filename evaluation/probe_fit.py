"""Fit the turn probes (policy/turn_probes.py) on gold cases across domains.

Every scored caller turn of every case is one example: the sentence embedding of the turn as the
policy reads it (`normalize_text`). Its label for each head comes from the case alone, never from a
gate's decision:
- `urgent`: the case is in the contract's `high_risk` bucket and expects that turn to be transferred;
- `disallowed`: the case is in the `disallowed` bucket and expects that turn to be refused;
- `human_request`: the case is in the `human_request` bucket and expects that turn to be transferred.
Sealed domains are never passed in. A head may also learn from general turns of no domain, in
`fixtures/probe_training/<head>_turns.yaml` (its kind of turn, and calm turns beside it), written blind
to the policy and to every test set: the corpus holds few turns of some kinds a caller in danger says
(one about suicide in 1,519), and a probe learns a direction only from what it has seen.

One logistic regression per head, with balanced class weights (each kind is about 5% of turns);
its weights are the probe."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import yaml

from evaluation.cases import Case
from evaluation.corpus import Domain, Engines, PerDomain
from policy.decision import Action
from policy.language import normalize_text
from policy.turn_probes import HEADS, Head, LinearProbe, TurnProbes

# head -> (bucket its cases are in, the action such a turn expects)
LESSONS: dict[Head, tuple[str, Action]] = {"urgent": ("high_risk", Action.transfer),
                                           "disallowed": ("disallowed", Action.refuse),
                                           "human_request": ("human_request", Action.transfer)}
C = 1.0  # inverse regularisation: out of fold over 19 domains, 0.3-3 give AUC 0.93-0.95 for urgent and disallowed


def labelled_turns(case: Case) -> list[tuple[str, dict[Head, int]]]:
    """(turn as the policy reads it, its label per head) for each scored turn."""
    out = []
    for text, expected in zip(case.caller_turns, case.expected_per_turn()):
        if expected is None or case.faults:
            continue
        labels = {h: int(case.bucket.startswith(bucket) and action in expected) for h, (bucket, action) in LESSONS.items()}
        out.append((normalize_text(text), labels))
    return out


def turn_vectors(domain: Domain, engines: Engines) -> tuple[np.ndarray, dict[Head, np.ndarray]]:
    """A domain's turns' embeddings and their labels per head (no rows without the dense model)."""
    turns = [t for case in domain.cases for t in labelled_turns(case)]
    engine = engines.get(domain)
    if not engine.retriever.model_id or not turns:
        vecs = np.zeros((0, 0), dtype=np.float32)
    else:
        vecs = engine.retriever.embed([t for t, _ in turns])
    return vecs, {h: np.array([labels[h] for _, labels in turns], dtype=np.int64) for h in HEADS}


_CACHE = PerDomain(turn_vectors)  # computed once per run
GENERAL_TURNS = Path(__file__).resolve().parents[1] / "fixtures" / "probe_training"
_GENERAL: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}


def general_turns(head: Head, embed: Callable[[list[str]], np.ndarray], model_id: str | None,
                  folder: Path = GENERAL_TURNS) -> tuple[np.ndarray, np.ndarray] | None:
    """The head's general turns, embedded, and their labels (1: the head's kind, 0: calm); None
    when the folder has no file for the head."""
    path = folder / f"{head}_turns.yaml"
    if not path.is_file():
        return None
    key = (str(path), model_id or "")
    if key not in _GENERAL:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        pos, neg = list(data.get(head, [])), list(data.get("calm", []))
        texts = [normalize_text(t) for t in pos + neg]
        _GENERAL[key] = (embed(texts), np.array([1] * len(pos) + [0] * len(neg), dtype=np.int64))
    return _GENERAL[key]


def fit_probes(domains: list[Domain], engines: Engines) -> TurnProbes:
    """A probe per head fitted on these domains' turns; a head without both kinds of turn (or without
    the dense model) gets none."""
    from sklearn.linear_model import LogisticRegression  # heavy, optional: only to fit

    if any(d.sealed for d in domains):
        raise ValueError("sealed domains are never trained on")
    parts = [p for p in (_CACHE.get(d, engines) for d in domains) if len(p[0])]
    if not parts:
        return {}
    x = np.concatenate([p[0] for p in parts])
    retriever = engines.get(domains[0]).retriever
    embedding = retriever.model_id  # the vectors' space: the probes hold only in it
    probes: TurnProbes = {}
    for head in HEADS:
        xh, y = x, np.concatenate([p[1][head] for p in parts])
        general = general_turns(head, retriever.embed, embedding)
        if general is not None:
            xh, y = np.concatenate([x, general[0]]), np.concatenate([y, general[1]])
        if len(set(y.tolist())) < 2:
            continue
        model = LogisticRegression(C=C, class_weight="balanced", max_iter=3000).fit(xh, y)
        meta = {"domains": sorted(d.name for d in domains), "turns": int(len(y)), "positives": int(y.sum()), "C": C,
                "embedding": embedding, "general_turns": 0 if general is None else int(len(general[1]))}
        probes[head] = LinearProbe(model.coef_[0].astype(np.float32), float(model.intercept_[0]), meta)
    return probes
