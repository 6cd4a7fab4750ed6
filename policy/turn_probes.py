"""What the caller's whole turn is, read by meaning: linear probes over the turn's sentence embedding,
one per kind of turn a gate acts on, fitted across domains on the turns their cases decide that way
(evaluation/probe_fit.py), shipped as `turn_probes.json`.

- `urgent`: the caller is in danger or distress ("the car's died on the M6 and there's smoke coming
  out", "my cat's breathing really fast", "the landlord's changed the locks with all my stuff
  inside"): a person takes it.
- `disallowed`: the caller asks for what the agent must not give anyone ("my ex ordered a sofa, what
  address is it going to", "can you just skip the security questions this once", "email me the
  handbook your staff use"): refused, with no detail.
- `human_request`: the caller asks for a person ("could I go over this with one of your staff
  instead?"): transferred, as the request patterns and written examples are.

The words are every domain's own, so no list of phrases names them, and a handful of written examples
sits as close to ordinary questions as to these (cosine 0.3-0.45 either way). Learned from many
domains' turns at once, the direction in embedding space that separates them carries to a domain it
never saw. A probe only adds a reason to hand over or to refuse; it never takes one away."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict, cast, get_args

import numpy as np

from kb.jsontypes import JsonObject

DEFAULT_PROBES_FILE = Path(__file__).with_name("turn_probes.json")
Head = Literal["urgent", "disallowed", "human_request"]
HEADS: tuple[Head, ...] = get_args(Head)


class ProbeError(ValueError):
    pass


class ProbeJson(TypedDict):
    coef: list[float]
    intercept: float
    meta: JsonObject


@dataclass
class LinearProbe:
    """p(head | turn) = sigmoid(coef . v + intercept), v the turn's unit-length sentence embedding."""

    coef: np.ndarray
    intercept: float
    meta: JsonObject = field(default_factory=dict)

    def probability(self, vec: np.ndarray) -> float:
        if vec.shape != self.coef.shape:
            raise ProbeError(f"embedding of size {vec.shape[0]} for a probe of size {self.coef.shape[0]}")
        z = float(self.coef @ vec) + self.intercept
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    def to_json(self) -> ProbeJson:
        return {"coef": [round(float(c), 6) for c in self.coef], "intercept": round(self.intercept, 6),
                "meta": self.meta}

    @classmethod
    def from_json(cls, data: ProbeJson) -> "LinearProbe":
        try:
            coef = np.asarray([float(c) for c in data["coef"]], dtype=np.float32)
            return cls(coef, float(data["intercept"]), dict(data.get("meta") or {}))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProbeError(f"malformed turn probe: {exc}") from exc


TurnProbes = dict[Head, LinearProbe]


def probes_to_json(probes: TurnProbes) -> dict[str, ProbeJson]:
    return {head: probe.to_json() for head, probe in probes.items()}


def probes_fingerprint(probes: TurnProbes) -> str:
    """A short hash of the probes' weights, for the policy version every decision carries: the same
    words decided under other probes are told apart in the audit log."""
    if not probes:
        return "none"
    body = json.dumps(probes_to_json(probes), sort_keys=True).encode("utf-8")
    return hashlib.sha256(body).hexdigest()[:8]


def unfit_for(probes: TurnProbes, model_id: str | None) -> list[Head]:
    """The heads fitted on another embedding model's vectors than `model_id`: read in another space,
    their weights mean nothing (a file without the record predates it and is trusted)."""
    return [h for h, p in probes.items() if p.meta.get("embedding") not in (None, model_id)]


def probes_from_json(data: object) -> TurnProbes:
    """Each known head's probe; a file holding one bare probe is the urgency probe of earlier releases."""
    if not isinstance(data, dict):
        raise ProbeError("malformed turn probes: expected a mapping of head -> probe")
    if "coef" in data:
        return {"urgent": LinearProbe.from_json(cast(ProbeJson, data))}
    unknown = sorted(set(data) - set(HEADS))
    if unknown:
        raise ProbeError(f"malformed turn probes: unknown head {unknown[0]!r} (known: {', '.join(HEADS)})")
    return {cast(Head, head): LinearProbe.from_json(cast(ProbeJson, body)) for head, body in data.items()}


def load_probes(path: str | Path | None = None) -> TurnProbes:
    """The shipped probes; none when there is no file (the policy then reads distress by its examples
    and disallowed requests by its patterns alone). A file that is there but unreadable is an error,
    never silently ignored."""
    p = Path(path) if path is not None else DEFAULT_PROBES_FILE
    if not p.is_file():
        return {}
    try:
        return probes_from_json(json.loads(p.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise ProbeError(f"{p}: cannot read turn probes: {exc}") from exc
