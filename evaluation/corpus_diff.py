"""`run.py eval --corpus DIR --against OLD/corpus.json`: what changed since an earlier run of the same
corpus, case by case. A change to the scorer's inputs moves turns it does not touch (the refit shifts:
about ±5 cases over the 19 development domains), so the report counts the turns whose decision changed
beside the cases that passed or failed, and a reader can check that the turns a change is meant for are
the ones that moved. Sealed domains are compared by their totals only: they are never read case by case."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from policy.decision import Decision

from .metrics import Metrics


def turn_label(d: Decision) -> str:
    """A turn's decision as one comparable word: its action and first reason."""
    return f"{d.action.value}:{d.reasons[0].value}" if d.reasons else d.action.value


class DiffError(ValueError):
    """The earlier run cannot be read or is not a corpus run."""


@dataclass
class CorpusDiff:
    passed: tuple[int, int] = (0, 0)  # (before, now), unsealed domains both runs scored
    unsafe: tuple[int, int] = (0, 0)
    gained: list[str] = field(default_factory=list)  # "domain/case"
    lost: list[str] = field(default_factory=list)
    turns_changed: int = 0  # turns whose action or first reason differs (cases in both runs)
    turns_changed_in_same_outcome: int = 0  # ... in cases that passed (or failed) both times
    sealed: dict[str, tuple[float, float]] = field(default_factory=dict)  # domain -> case pass before, now
    missing: list[str] = field(default_factory=list)  # domains scored now but not before
    turns_known: bool = True  # the earlier run recorded each turn's decision (older runs did not)

    def lines(self) -> list[str]:
        out = [f"against the earlier run: cases passed {self.passed[0]} -> {self.passed[1]}, "
               f"unsafe answers {self.unsafe[0]} -> {self.unsafe[1]}",
               f"turns whose decision changed: {self.turns_changed} ({self.turns_changed_in_same_outcome} of them "
               "in cases that passed, or failed, both times)" if self.turns_known
               else "turns whose decision changed: unknown (the earlier run did not record each turn's decision)"]
        out += [f"  gained {c}" for c in self.gained] + [f"  lost   {c}" for c in self.lost]
        out += [f"  sealed {n}: case pass {a:.3f} -> {b:.3f}" for n, (a, b) in self.sealed.items()]
        out += [f"  {n}: not in the earlier run" for n in self.missing]
        return out


def read_run(path: str | Path, what: str) -> object:
    """An earlier run's JSON file (`what`: "corpus" or "voice"), or a DiffError saying why not."""
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DiffError(f"{p}: cannot read an earlier {what} run ({exc})") from None


def load_run(path: str | Path) -> dict[str, Metrics]:
    data = read_run(path, "corpus")
    if not isinstance(data, dict) or not all(isinstance(v, dict) and "cases" in v for v in data.values()):
        raise DiffError(f"{path}: not a corpus run (expected the corpus.json that `eval --corpus --out DIR` writes)")
    return data  # checked above: a mapping of domain -> metrics


def diff_runs(before: Mapping[str, Metrics], now: Mapping[str, Metrics]) -> CorpusDiff:
    d = CorpusDiff()
    passed, unsafe = [0, 0], [0, 0]
    for name, m in now.items():
        old = before.get(name)
        if old is None:
            d.missing.append(name)
            continue
        if m.get("sealed"):
            d.sealed[name] = (old.get("case_pass_rate") or 0.0, m.get("case_pass_rate") or 0.0)
            continue
        fails_old, fails_new = set(old.get("failures", {})), set(m.get("failures", {}))
        passed[0] += old["cases"] - len(fails_old)
        passed[1] += m["cases"] - len(fails_new)
        unsafe[0] += int(old.get("unsafe_answers") or 0)
        unsafe[1] += int(m.get("unsafe_answers") or 0)
        d.gained += sorted(f"{name}/{c}" for c in fails_old - fails_new)
        d.lost += sorted(f"{name}/{c}" for c in fails_new - fails_old)
        before_turns, now_turns = old.get("decisions", {}), m.get("decisions", {})
        d.turns_known = d.turns_known and "decisions" in old
        for case, labels in now_turns.items():
            prior = before_turns.get(case)
            if prior is None:
                continue
            changed = sum(a != b for a, b in zip(prior, labels)) + abs(len(prior) - len(labels))
            d.turns_changed += changed
            if (case in fails_old) == (case in fails_new):
                d.turns_changed_in_same_outcome += changed
    d.passed, d.unsafe = (passed[0], passed[1]), (unsafe[0], unsafe[1])
    return d
