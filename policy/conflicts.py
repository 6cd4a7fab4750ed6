"""Do current sources disagree on the asked fact? The section that would be spoken is compared with
every current, permitted section of another document in the caller's scope that is about the same
thing, whatever its rank or kind of page: a different figure of the asked kind in the sentence each
would speak is a conflict. Only `supersedes` or facets that set them apart settle it; dates are
already in each document's status."""
from __future__ import annotations

from typing import Callable

from kb.tokenize import content_terms

from .evidence import GradedHit, best_unit_order, best_units, unit_fit
from .features import versions_of_one
from .language import FactKind, quantity_kinds
from .numbers import quantities

SAME_FACT_SIMILARITY = 0.6  # cosine of two answer sentences about the same fact
SAME_FACT_OVERLAP = 0.4  # without the dense model: share of the shorter sentence's words the other says too
# A sentence that fits the question this much worse than the one spoken is about a neighbouring fact
# (the booster's price beside the spay's), not the asked one, however alike the two sentences read.
# On the 19 development domains the closest rival sentence of every real conflict fits at most 0.23
# worse (most within 0.13); for 8 of the 23 answerable turns refused as conflicts it fitted over 0.25 worse.
NEIGHBOUR_FIT_GAP = 0.25
Similarity = Callable[[str, int, str, int], "float | None"]  # (locator, unit, locator, unit) -> cosine


def _facet_disjoint(a: GradedHit, b: GradedHit) -> bool:
    fa, fb = a.hit.applies_to, b.hit.applies_to
    return any(k in fb and fb[k] != v for k, v in fa.items())


def _figures(units: list[str], kind: FactKind) -> dict[str, set[str]]:
    wanted = quantity_kinds(kind)
    out: dict[str, set[str]] = {}
    for unit in units:
        for q in quantities(unit):
            if (wanted is None and q.kind != "number") or (wanted is not None and q.kind in wanted):
                out.setdefault(q.kind, set()).add(q.value)
    return out


def stated_figures(g: GradedHit, kind: FactKind) -> dict[str, set[str]]:
    """The figures, by quantity kind, in the sentences this section would speak as its answer."""
    return _figures(best_units(g, kind), kind)


def same_fact_units(best: GradedHit, b: GradedHit, kind: FactKind, similarity: Similarity | None,
                    neighbours: bool = False) -> list[str]:
    """The sentences of section b that say the same thing as the one best would speak: close in
    meaning ("space for six bikes on every train" / "a maximum of 4 bikes on each train"); without
    the dense model, sharing most of the shorter one's words, figures aside. With `neighbours`
    (b is a rival page not itself likely to answer), a sentence that fits the question much worse
    than the spoken one is about a neighbouring fact and is left out; a successor restating an old
    page's answer (policy/versions.py) may fit the question loosely and is never filtered."""
    spoken = best_unit_order(best, kind)[:1]
    if not spoken or not b.hit.units:
        return []
    near = list(range(len(b.hit.units)))
    if neighbours:
        floor = unit_fit(best, kind, spoken[0]) - NEIGHBOUR_FIT_GAP
        near = [j for j in near if unit_fit(b, kind, j) >= floor]
    if similarity is not None and similarity(best.hit.locator, spoken[0], b.hit.locator, 0) is not None:
        return [b.hit.units[j] for j in near
                if (similarity(best.hit.locator, spoken[0], b.hit.locator, j) or 0.0) >= SAME_FACT_SIMILARITY]
    ta = {t for t in content_terms(best.hit.units[spoken[0]]) if not t[:1].isdigit()}
    out = []
    for j in near:
        tb = {t for t in content_terms(b.hit.units[j]) if not t[:1].isdigit()}
        if ta and tb and len(ta & tb) / min(len(ta), len(tb)) >= SAME_FACT_OVERLAP:
            out.append(b.hit.units[j])
    return out


def find_conflicts(best: GradedHit, others: list[GradedHit], kind: FactKind, likely_p: float,
                   similarity: Similarity | None = None) -> list[tuple[GradedHit, GradedHit, str]]:
    """Current sections of other documents that give a different figure for what the best section
    would answer: a sentence saying the same thing with another figure, or, in a section likely to
    answer the question itself, the answer it would give."""
    pairs = []
    fa = stated_figures(best, kind)
    seen: set[str] = set()
    for b in others:
        if not b.active or b.doc_id == best.doc_id or b.doc_id in seen or versions_of_one(best.hit, b.hit) \
                or _facet_disjoint(best, b):
            continue
        fb = _figures(same_fact_units(best, b, kind, similarity, neighbours=b.p < likely_p), kind)
        if b.p >= likely_p:
            for k, v in stated_figures(b, kind).items():
                fb.setdefault(k, set()).update(v)
        for qkind in sorted(set(fa) & set(fb)):
            if fa[qkind].isdisjoint(fb[qkind]):
                desc = (f"{best.hit.title} ({best.doc_id}) says {', '.join(sorted(fa[qkind]))} and "
                        f"{b.hit.title} ({b.doc_id}) says {', '.join(sorted(fb[qkind]))} ({qkind})")
                pairs.append((best, b, desc))
                seen.add(b.doc_id)
                break
    return pairs
