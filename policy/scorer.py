"""The answerability scorer: the probability that a section answers the question, from its evidence
features (policy/features.py). Small gradient-boosted trees, monotone in each feature, fitted across
domains (evaluation/train.py), shipped as `answerability.json`; a KB may carry its own next to `_policy.yaml`.

Evaluating it is numpy over the trees' node arrays (policy/forest.py), so a turn never imports
scikit-learn."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict, cast

import numpy as np

from kb.jsontypes import JsonObject

from .features import FEATURES
from .forest import Forest

DEFAULT_MODEL_FILE = Path(__file__).with_name("answerability.json")
KB_MODEL_NAME = "_answerability.json"


class ScorerError(ValueError):
    pass


class TreeJson(TypedDict):
    """One tree in the scorer file: `Tree`'s fields."""

    feature: list[int]
    threshold: list[float]
    left: list[int]
    right: list[int]
    value: list[float]


class ScorerJson(TypedDict):
    """The scorer file (`answerability.json`): `Scorer.to_json()`, read back by `Scorer.from_json()`."""

    features: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    rate: NotRequired[float]
    meta: NotRequired[JsonObject]
    trees: NotRequired[list[TreeJson]]
    calibration: NotRequired[list[float]]


@dataclass
class Tree:
    """One regression tree: node arrays as scikit-learn stores them (a leaf has left == -1)."""

    feature: list[int]
    threshold: list[float]
    left: list[int]
    right: list[int]
    value: list[float]

    def predict(self, x: list[float]) -> float:
        node = 0
        while self.left[node] != -1:
            node = self.left[node] if x[self.feature[node]] <= self.threshold[node] else self.right[node]
        return self.value[node]


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z))))


def logit(p: float) -> float:
    """Log-odds of a probability kept off 0 and 1: the scale the turn calibration is fitted and applied on."""
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


@dataclass
class Scorer:
    """Gradient-boosted trees over the features (or, with no trees, a logistic model on scaled
    features): raw score = intercept + rate * sum of trees (or coef . scaled x); p = sigmoid(raw)."""

    features: tuple[str, ...]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    meta: JsonObject = field(default_factory=dict)  # what it was fitted on, for the audit
    trees: list[Tree] = field(default_factory=list)
    rate: float = 1.0
    # P(the best section of a turn answers it) from its p: a logistic in logit(p), fitted on turns
    # of domains the trees were not fitted on (evaluation/train.py); (1, 0) leaves p as it is
    calibration: tuple[float, float] = (1.0, 0.0)
    _forest: tuple[int, int, Forest] | None = field(default=None, init=False, repr=False, compare=False)

    def _raws(self, xs: list[list[float]]) -> list[float]:
        if not self.trees:
            return [self.intercept + sum(c * (v - m) / (s or 1.0) for v, m, s, c in zip(x, self.mean, self.scale, self.coef))
                    for x in xs]
        if self._forest is None or self._forest[:2] != (id(self.trees), len(self.trees)):
            self._forest = (id(self.trees), len(self.trees), Forest.of(self.trees))
        sums = self._forest[2].tree_sums(np.array(xs, dtype=np.float64))
        return [self.intercept + self.rate * float(v) for v in sums]

    def probabilities(self, rows: list[dict[str, float]]) -> list[float]:
        """The probability of answering for each row of features, all in one pass over the trees."""
        if not rows:
            return []
        zs = self._raws([[row.get(n, 0.0) for n in self.features] for row in rows])
        return [_sigmoid(z) for z in zs]

    def probability(self, row: dict[str, float]) -> float:
        return self.probabilities([row])[0]

    def answer_probability(self, p: float) -> float:
        """Calibrated: how likely a turn's best section (of probability p) answers the turn."""
        a, b = self.calibration
        z = a * logit(p) + b
        return _sigmoid(z)

    def explain(self, row: dict[str, float], top: int = 3) -> list[str]:
        """The features that moved this probability most: how p changes when each one is set to
        its average over the training sections ('unit_max +0.31')."""
        p, *moved = self.probabilities([row, *({**row, name: m} for name, m in zip(self.features, self.mean))])
        parts = [(p - q, name) for q, name in zip(moved, self.features)]
        parts.sort(key=lambda x: -abs(x[0]))
        return [f"{n} {v:+.2f}" for v, n in parts[:top]]

    def to_json(self) -> ScorerJson:
        return {"features": list(self.features), "mean": self.mean, "scale": self.scale, "coef": self.coef,
                "intercept": self.intercept, "rate": self.rate, "meta": self.meta,
                "trees": [cast(TreeJson, t.__dict__) for t in self.trees], "calibration": list(self.calibration)}

    @classmethod
    def from_json(cls, data: ScorerJson) -> "Scorer":
        try:
            names = tuple(data["features"])
            unknown = set(names) - set(FEATURES)
            if unknown:
                raise ScorerError(f"unknown features {sorted(unknown)}")
            n = len(names)
            if not (len(data["mean"]) == len(data["scale"]) == len(data["coef"]) == n):
                raise ScorerError("features, mean, scale and coef differ in length")
            trees = [Tree(**t) for t in data.get("trees") or []]
            return cls(names, [float(x) for x in data["mean"]], [float(x) for x in data["scale"]],
                       [float(x) for x in data["coef"]], float(data["intercept"]), dict(data.get("meta") or {}),
                       trees, float(data.get("rate", 1.0)),
                       tuple(float(v) for v in data.get("calibration", (1.0, 0.0))))  # type: ignore[arg-type]
        except (KeyError, TypeError) as exc:
            raise ScorerError(f"malformed scorer: {exc}") from exc

    @property
    def fingerprint(self) -> str:
        return str(self.meta.get("fitted_on_hash", "unfitted"))


def load_scorer(kb_dir: str | Path | None = None) -> Scorer:
    """The KB's own fitted scorer when it has one, else the shipped one."""
    path = DEFAULT_MODEL_FILE
    if kb_dir is not None and (Path(kb_dir) / KB_MODEL_NAME).is_file():
        path = Path(kb_dir) / KB_MODEL_NAME
    try:
        return Scorer.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise ScorerError(f"{path}: cannot read scorer: {exc}") from exc


def answer_threshold(wrong_answer_cost: float, needless_refusal_cost: float) -> float:
    """Answer when the expected cost of answering is below that of refusing:
    (1 - p) * wrong_answer_cost < p * needless_refusal_cost."""
    return wrong_answer_cost / (wrong_answer_cost + needless_refusal_cost)
