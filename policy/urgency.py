"""Is the caller in danger or distress? A linear probe over the sentence embedding of the whole turn,
fitted across domains on the turns their cases send to a person as high-risk (evaluation/urgency_fit.py),
shipped as `urgency.json`.

"The car's died on the M6 and there's smoke coming out", "my cat's breathing really fast", "the
landlord's changed the locks with all my stuff inside": the words are every domain's own, so no
list of phrases names them, and a handful of written examples sits as close to ordinary questions
as to these (cosine 0.3-0.45 either way). Learned from many domains' turns at once, the direction
in embedding space that separates them carries to a domain it never saw. The probe only adds a
reason to hand over; it never stops one."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import numpy as np

from kb.jsontypes import JsonObject

DEFAULT_URGENCY_FILE = Path(__file__).with_name("urgency.json")


class UrgencyError(ValueError):
    pass


class UrgencyJson(TypedDict):
    coef: list[float]
    intercept: float
    meta: JsonObject


@dataclass
class UrgencyProbe:
    """p(urgent | turn) = sigmoid(coef . v + intercept), v the turn's unit-length sentence embedding."""

    coef: np.ndarray
    intercept: float
    meta: JsonObject = field(default_factory=dict)

    def probability(self, vec: np.ndarray) -> float:
        if vec.shape != self.coef.shape:
            raise UrgencyError(f"embedding of size {vec.shape[0]} for a probe of size {self.coef.shape[0]}")
        z = float(self.coef @ vec) + self.intercept
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    def to_json(self) -> UrgencyJson:
        return {"coef": [round(float(c), 6) for c in self.coef], "intercept": round(self.intercept, 6),
                "meta": self.meta}

    @classmethod
    def from_json(cls, data: UrgencyJson) -> "UrgencyProbe":
        try:
            coef = np.asarray([float(c) for c in data["coef"]], dtype=np.float32)
            return cls(coef, float(data["intercept"]), dict(data.get("meta") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise UrgencyError(f"malformed urgency probe: {exc}") from exc


def load_urgency(path: str | Path | None = None) -> UrgencyProbe | None:
    """The shipped probe; None when there is no file (the policy then reads distress by its examples
    alone). A file that is there but unreadable is an error, never silently ignored."""
    p = Path(path) if path is not None else DEFAULT_URGENCY_FILE
    if not p.is_file():
        return None
    try:
        return UrgencyProbe.from_json(json.loads(p.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise UrgencyError(f"{p}: cannot read urgency probe: {exc}") from exc
