"""Lexical (BM25 Okapi) engines behind one small interface.

`RankBM25Index` wraps rank_bm25's BM25Okapi as the reference. `FastBM25Index` computes
the same scores from inverted postings whose BM25 weight is precomputed per posting, so
a query costs one numpy scatter-add per query term instead of a pass over every section.
Both count a repeated query term once per occurrence and floor negative IDFs to
`epsilon * mean(idf)` exactly as BM25Okapi does.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Callable, Protocol, Sequence

import numpy as np

__all__ = ["LexicalIndex", "FastBM25Index", "RankBM25Index", "make_index", "ENGINES"]

K1, B, EPSILON = 1.5, 0.75, 0.25


class LexicalIndex(Protocol):
    size: int

    def build(self, corpus: Sequence[Sequence[str]]) -> "LexicalIndex": ...

    def scores(self, query_terms: Sequence[str]) -> np.ndarray: ...  # (size,) float64


def _okapi_idf(df: dict[str, int], n: int, epsilon: float) -> dict[str, float]:
    """BM25Okapi's IDF, including its floor for terms in more than half the sections."""
    idf: dict[str, float] = {}
    negative: list[str] = []
    total = 0.0
    for word, freq in df.items():
        v = math.log(n - freq + 0.5) - math.log(freq + 0.5)
        idf[word] = v
        total += v
        if v < 0:
            negative.append(word)
    if idf:
        eps = epsilon * (total / len(idf))
        for word in negative:
            idf[word] = eps
    return idf


class FastBM25Index:
    """Inverted postings with precomputed per-posting BM25 weights (numpy)."""

    name = "fast"

    def __init__(self, k1: float = K1, b: float = B, epsilon: float = EPSILON):
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self.size = 0
        self.avgdl = 0.0
        self.idf: dict[str, float] = {}
        self._term_ids: dict[str, int] = {}
        self._offsets = np.zeros(1, dtype=np.int64)
        self._docs = np.zeros(0, dtype=np.int32)
        self._weights = np.zeros(0, dtype=np.float64)

    def build(self, corpus: Sequence[Sequence[str]]) -> "FastBM25Index":
        self.size = n = len(corpus)
        doc_len = np.fromiter((len(d) for d in corpus), dtype=np.float64, count=n)
        self.avgdl = float(doc_len.sum() / n) if n else 0.0
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, doc in enumerate(corpus):
            for term, tf in Counter(doc).items():
                p = postings.get(term)
                if p is None:
                    postings[term] = ([i], [tf])
                else:
                    p[0].append(i)
                    p[1].append(tf)
        self.idf = _okapi_idf({t: len(p[0]) for t, p in postings.items()}, n, self.epsilon)
        self._term_ids = {t: j for j, t in enumerate(postings)}
        lengths = np.fromiter((len(p[0]) for p in postings.values()), dtype=np.int64, count=len(postings))
        self._offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        total = int(self._offsets[-1])
        docs = np.empty(total, dtype=np.int32)
        tfs = np.empty(total, dtype=np.float64)
        idfs = np.empty(total, dtype=np.float64)
        for j, (t, (ds, fs)) in enumerate(postings.items()):
            a, z = self._offsets[j], self._offsets[j + 1]
            docs[a:z] = ds
            tfs[a:z] = fs
            idfs[a:z] = self.idf[t]
        if n:
            norm = self.k1 * (1 - self.b + self.b * doc_len[docs] / self.avgdl) if self.avgdl else self.k1 * (1 - self.b)
            self._weights = idfs * (tfs * (self.k1 + 1) / (tfs + norm))
        self._docs = docs
        return self

    def scores(self, query_terms: Sequence[str]) -> np.ndarray:
        out = np.zeros(self.size, dtype=np.float64)
        for q in query_terms:
            j = self._term_ids.get(q)
            if j is None:
                continue
            a, z = self._offsets[j], self._offsets[j + 1]
            out[self._docs[a:z]] += self._weights[a:z]  # a term's postings hold each doc once
        return out


class RankBM25Index:
    """The reference: rank_bm25.BM25Okapi, unchanged."""

    name = "rank-bm25"

    def __init__(self, k1: float = K1, b: float = B, epsilon: float = EPSILON):
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self.size = 0
        self._bm25 = None

    def build(self, corpus: Sequence[Sequence[str]]) -> "RankBM25Index":
        from rank_bm25 import BM25Okapi  # optional: only for the rank-bm25 engine

        self.size = len(corpus)
        # BM25Okapi divides by the corpus size: an empty corpus simply scores nothing.
        self._bm25 = BM25Okapi([list(d) for d in corpus], k1=self.k1, b=self.b, epsilon=self.epsilon) if corpus else None
        return self

    @property
    def idf(self) -> dict[str, float]:
        return dict(self._bm25.idf) if self._bm25 is not None else {}

    def scores(self, query_terms: Sequence[str]) -> np.ndarray:
        if self._bm25 is None:
            return np.zeros(0, dtype=np.float64)
        return np.asarray(self._bm25.get_scores(list(query_terms)), dtype=np.float64)


ENGINES: dict[str, Callable[[], LexicalIndex]] = {"fast": FastBM25Index, "rank-bm25": RankBM25Index}


def make_index(engine: str = "fast") -> LexicalIndex:
    try:
        return ENGINES[engine]()
    except KeyError:
        raise ValueError(f"unknown lexical engine {engine!r} (expected one of {', '.join(ENGINES)})") from None
