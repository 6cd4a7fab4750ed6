"""Why a turn went as it did, in one line an operator can act on: the decision's reasons, the section
most likely to answer, how likely, and the caller's words it does not say (a sentence on the page or a
`synonyms` entry in `_policy.yaml` is the usual fix)."""
from __future__ import annotations

from collections.abc import Sequence

from policy.decision import Action, Decision
from policy.evidence import GradedHit

SHOWN_WORDS = 4  # the heaviest missing words; the rest seldom decide


def turn_why(decision: Decision, graded: Sequence[GradedHit]) -> str:
    reasons = ", ".join(r.value for r in decision.reasons) or "none"
    active = [g for g in graded if g.active]
    if not active:
        return f"reasons: {reasons}; no current section retrieved"
    best = max(active, key=lambda g: g.p)
    if decision.action == Action.answer and decision.citations:
        spoken = {c.doc_id for c in decision.citations}
        best = max((g for g in active if g.doc_id in spoken), key=lambda g: g.p, default=best)
    line = f"reasons: {reasons}; likeliest {best.hit.locator} p {best.p:.2f}"
    if best.missing:
        line += ", not said: " + ", ".join(repr(w) for w in best.missing[:SHOWN_WORDS])
    return line
