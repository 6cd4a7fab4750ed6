"""Salient surface words of a knowledge base (`Retriever.vocabulary`): names and product terms,
then title and heading words, then frequent content words. Used to bias ASR and repair
mis-heard words, so it only ever sees the documents the caller's role may see."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from .models import Document, Section
from .tokenize import STOPWORDS

__all__ = ["salient_words"]

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-'][A-Za-z0-9]+)*")


def salient_words(sections: Sequence[Section], docs: Sequence[Document], key: frozenset[str],
                  limit: int) -> list[str]:
    """Most salient first, at most `limit`; `docs[i]` is the document of `sections[i]`, and only
    documents whose id is in `key` count."""
    names: Counter[str] = Counter()
    headed: Counter[str] = Counter()
    common: Counter[str] = Counter()
    seen_titles: set[str] = set()
    for s, d in zip(sections, docs):
        if d.id not in key:
            continue
        if d.id not in seen_titles:
            seen_titles.add(d.id)
            for w in _WORD.findall(d.title):
                headed[w if _mixed_case(w) else w.lower()] += 3
        for w in _WORD.findall(s.heading):
            headed[w if _mixed_case(w) else w.lower()] += 1
        for sentence in re.split(r"(?<=[.!?:])\s+|\n+", s.text):
            for i, w in enumerate(_WORD.findall(sentence)):
                if _is_name(w) and (i > 0 or any(c.isupper() for c in w[1:])):
                    names[w] += 1  # capitalised mid-sentence, or mixed case (eSIM, FiberMax)
                else:
                    common[w.lower()] += 1
    out: dict[str, None] = {}

    def add(words: list[str]) -> None:
        for w in words:
            lw = w.lower()
            if len(w) < 3 or lw in STOPWORDS or lw in out or w in out:
                continue
            out[w] = None

    add([w for w, _ in names.most_common()])
    add([w for w, _ in headed.most_common()])
    add([w for w, c in common.most_common() if c >= 2])
    # drop lower-case duplicates of names already listed
    lowered = {w.lower() for w in out if w != w.lower()}
    return [w for w in out if not (w == w.lower() and w in lowered)][:limit]


def _mixed_case(w: str) -> bool:
    return any(c.isupper() for c in w[1:])


def _is_name(w: str) -> bool:
    return any(c.isupper() for c in w)
