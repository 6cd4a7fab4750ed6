"""A superseded page that answers vouches for the page that replaced it.

An old version often holds the answer in one place (one table of every fee) where its successor
spreads it over sections, so the old page can fit the question better than any current section
does. The question is the same whichever version answers it: a current section of a document that
`supersedes` the old one, and says the same thing as the old page's answer sentence (another figure
is fine: that is what changed), is as likely to answer as the old section was. Only the current
section is ever spoken; the old one stays background."""
from __future__ import annotations

from typing import Callable

from kb.models import EffectiveStatus

from .conflicts import Similarity, same_fact_units
from .evidence import GradedHit
from .language import FactKind


def carry_over(graded: list[GradedHit], kind: FactKind, similarity: Similarity | None,
               answers: Callable[[float], bool]) -> list[GradedHit]:
    """`graded` with, for each old version that would answer were it current (`answers` of its
    probability), the likeliest current successor section that restates its answer sentence raised
    to that version's probability, best first again. One old section vouches for one section: its
    evidence is not counted twice in a document's probability."""
    olds = [g for g in graded if g.hit.status == EffectiveStatus.deprecated and answers(g.p)]
    for old in olds:
        heirs = [g for g in graded if g.active and old.doc_id in g.hit.supersedes and g.p < old.p
                 and same_fact_units(old, g, kind, similarity)]
        if heirs:
            heir = max(heirs, key=lambda g: g.p)
            heir.p, heir.vouched_by = old.p, old.hit.locator
    return sorted(graded, key=lambda g: -g.p) if olds else graded
