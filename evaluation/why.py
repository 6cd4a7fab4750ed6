"""Why a turn went as it did, in one line an operator can act on: the decision's reasons, the section
most likely to answer, how likely, and the caller's words it does not say (a sentence on the page or a
`synonyms` entry in `_policy.yaml` is the usual fix); and, over a run, which of those words come back
most in the answerable turns that were not answered."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from policy.decision import Action, Decision
from policy.evidence import GradedHit

from .audio_gap import hearing_lines
from .metrics import CaseResult

SHOWN_WORDS = 4  # the heaviest missing words of a turn; the rest seldom decide
SHOWN_GAPS = 12  # words in the run's summary


def turn_why(decision: Decision, graded: Sequence[GradedHit]) -> tuple[str, list[str]]:
    """The line, and the caller's words the likeliest (or spoken) section does not say."""
    reasons = ", ".join(r.value for r in decision.reasons) or "none"
    active = [g for g in graded if g.active]
    if not active:
        return f"reasons: {reasons}; no current section retrieved", []
    best = max(active, key=lambda g: g.p)
    if decision.action == Action.answer and decision.citations:
        spoken = {c.doc_id for c in decision.citations}
        best = max((g for g in active if g.doc_id in spoken), key=lambda g: g.p, default=best)
    line = f"reasons: {reasons}; likeliest {best.hit.locator} p {best.p:.2f}"
    words = best.missing[:SHOWN_WORDS]
    if words:
        line += ", not said: " + ", ".join(repr(w) for w in words)
    return line, words


def vocabulary_gaps(results: Sequence[CaseResult]) -> Counter[str]:
    """How often each caller word is missing from the likeliest section of a turn that should have been
    answered and was not: the KB's vocabulary gaps, most frequent first."""
    return Counter(w for r in results for t in r.turns
                   if t.expected and Action.answer in t.expected and t.decision.action != Action.answer
                   for w in t.lacking)


def print_failures(results: list[CaseResult], limit: int) -> None:
    bad = [r for r in results if not r.ok]
    if not bad or limit <= 0:
        return
    print(f"\nfailing cases ({len(bad)}):")
    for r in bad[:limit]:
        print(f"  {r.case.id} [{r.case.bucket}]: {'; '.join(r.failures)}")
        if r.mode == "audio":  # what was heard decides an audio case: show it beside the failure
            for line in hearing_lines(r):
                print(f"      {line}")
    if len(bad) > limit:
        print(f"  ... and {len(bad) - limit} more (see --out)")
    if gaps := vocabulary_gaps(results).most_common(SHOWN_GAPS):
        print("\ncallers' words the likeliest section did not say, in turns that should have been answered: "
              + ", ".join(f"'{w}' ({n})" for w, n in gaps)
              + "\n(say them on the page, or map them to the KB's words with `synonyms` in _policy.yaml)")
