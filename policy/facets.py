"""Facets in the caller's words: "it's just for us at home" is residential, "we're over in Berlin" is
germany, "I've got a monthly pass for work" is a season ticket, for whatever facet keys and values a
KB's `applies_to` uses.

Each value is described by its own words (and the KB's synonyms, from `_policy.yaml`) and by what
the KB says in the documents scoped to it; a clause of the caller's turn is matched to the nearest
value in meaning, accepted only with a margin over the other values. The threshold is lower when the
caller answers our own clarifying question about that key than when they volunteer it. A negated
mention ("I don't have the Plus thing") of a key with two values means the other one."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from kb.tokenize import content_terms

from .language import asks_question, clauses, negated, run_on_pieces, specificity

MAX_CONTEXT = 60  # scoped section headings embedded per value
# How specific a caller's word must be (language.specificity: 1 for rare words) to name a value on
# its own when the KB uses it only in pages scoped to that value ("hatchback", "landlord").
TELLING = 0.6


@dataclass(frozen=True)
class FacetThresholds:
    prompted: float = 0.30  # the caller answers our question about this key
    prompted_margin: float = 0.06
    volunteered: float = 0.55  # the caller states it unasked, beside a question
    volunteered_margin: float = 0.20


class FacetReader:
    """Reads facet values from a caller's words for one KB view (role)."""

    def __init__(self, values: dict[str, dict[str, list[str]]], context: dict[str, dict[str, list[str]]],
                 embed: Callable[[list[str]], np.ndarray], th: FacetThresholds = FacetThresholds(),
                 scoped_text: dict[str, dict[str, list[str]]] | None = None):
        """`values`: key -> value -> its spoken phrases; `context`: key -> value -> texts of the KB
        scoped to that value (titles and headings); `scoped_text`: the same with the sections' text."""
        self._embed, self.th = embed, th
        self._telling = {key: telling_terms(by_value) for key, by_value in (scoped_text or {}).items()}
        self._names: dict[str, dict[str, np.ndarray]] = {}
        self._context: dict[str, dict[str, np.ndarray]] = {}
        for key, by_value in values.items():
            words = key.replace("_", " ")
            self._names[key] = {v: embed(sorted({*ps, f"{v.replace('_', ' ')} {words}"})) for v, ps in by_value.items()}
            self._context[key] = {v: embed(context.get(key, {}).get(v, [])[:MAX_CONTEXT] or [v])
                                  for v in by_value}

    def _scores(self, key: str, vec: np.ndarray, prompted: bool) -> dict[str, float]:
        """Per value, the closeness of a clause to its names, and (when we asked) to what the KB
        says under it: unasked, a clause about the topic of a scoped page says nothing of who the
        caller is."""
        out = {}
        for value, names in self._names[key].items():
            score = float((names @ vec).max())
            if prompted:
                score = max(score, float(np.sort(self._context[key][value] @ vec)[-3:].mean()))
            out[value] = score
        return out

    def read(self, text: str, keys: list[str] | None = None, prompted: bool = False) -> dict[str, str]:
        """The facet values this turn states, for `keys` (default: every key of the KB)."""
        keys = [k for k in (keys or list(self._names)) if k in self._names]
        parts = [c for c in clauses(text) if len(c) > 2]
        # a run-on clause ("it's for the shop I run a hairdresser's") is read in its pieces too
        parts += run_on_pieces(parts, "self", "subject")
        if not prompted:  # who the caller is, they state; a question clause asks, it does not tell
            parts = [c for c in parts if not asks_question(c)]
        if not keys or not parts:
            return {}
        vecs = self._embed(parts)
        floor = self.th.prompted if prompted else self.th.volunteered
        margin = self.th.prompted_margin if prompted else self.th.volunteered_margin
        found: dict[str, str] = {}
        for key in keys:
            votes: dict[str, tuple[float, str]] = {}  # value -> (its best margin, the clause)
            for clause, vec in zip(parts, vecs):
                ranked = sorted(self._scores(key, vec, prompted).items(), key=lambda kv: -kv[1])
                gap = ranked[0][1] - (ranked[1][1] if len(ranked) > 1 else 0.0)
                if ranked[0][1] >= floor and gap >= margin:
                    value = self._negated(key, ranked[0][0], clause)
                    if gap > votes.get(value, (0.0, ""))[0]:
                        votes[value] = (gap, clause)
            if len(votes) == 1:  # clauses that point to different values say nothing for sure
                found[key] = next(iter(votes))
            elif not votes and prompted and (named := self._named_by_words(key, parts)):
                found[key] = named
        return found

    def _named_by_words(self, key: str, parts: list[str]) -> str | None:
        """The one value whose pages alone use a specific word of the caller's answer ("a little
        hatchback": only the standard group's pages name hatchbacks); None when the words point to
        none or to several. A negated clause says what the caller is not, so it is not read."""
        telling = self._telling.get(key, {})
        words = {w.strip(",.;:!?'\"") for c in parts if not negated(c) for w in c.split()}
        named = {v for w in words if w and specificity(w) >= TELLING
                 for t in content_terms(w) for v, terms in telling.items() if t in terms}
        return next(iter(named)) if len(named) == 1 else None

    def _negated(self, key: str, value: str, clause: str) -> str:
        others = [v for v in self._names[key] if v != value]
        return others[0] if negated(clause) and len(others) == 1 else value


def telling_terms(texts_by_value: dict[str, list[str]]) -> dict[str, set[str]]:
    """Per value, the terms the KB uses in pages scoped to it and in no page scoped to another value."""
    terms = {v: {t for text in texts for t in content_terms(text)} for v, texts in texts_by_value.items()}
    return {v: ts.difference(*(o for w, o in terms.items() if w != v)) for v, ts in terms.items()}


def scoped_context(docs: list[tuple[dict[str, str], str]]) -> dict[str, dict[str, list[str]]]:
    """key -> value -> texts, from (applies_to, text) pairs of the documents a role may see."""
    out: dict[str, dict[str, list[str]]] = {}
    for scope, text in docs:
        for key, value in scope.items():
            out.setdefault(key, {}).setdefault(str(value), []).append(text)
    return out
