"""Hybrid retrieval: BM25 + MiniLM cosine, fused by reciprocal rank, filtered first.

Filtering happens before anything is scored or ranked:
- role: the lexical index (IDF, avgdl) is built only over the sections the caller's role
  may see, so a restricted document cannot shift a public caller's scores, ranks or counts;
- facets: a section whose document sets `applies_to[k]` to a value other than the caller's
  is dropped before ranking (documents without that key stay).
Status and dates do *not* remove anything: outdated and not-yet-valid sections come back
with `Hit.status` telling the policy so.
"""
from __future__ import annotations

import datetime as dt
import re
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import cache as emb_cache
from .embed import DIM, Embedder, EmbeddingUnavailable, load_embedder
from .lexical import LexicalIndex, make_index
from .loader import KnowledgeBase, effective_status, visible_to
from .models import Hit, RetrievalResult, RetrievalUnavailable, Section
from .tokenize import content_terms, content_tokens
from .units import UnitIndex, section_units
from .vocabulary import salient_words

__all__ = ["Retriever", "rrf", "section_embed_text", "section_index_text"]

FAULT_RETRIEVAL = "retrieval_unavailable"
FAULT_EMBEDDING = "embedding_unavailable"


def rrf(ranks: Collection[int | None], k: int = 60) -> float:
    """Reciprocal-rank fusion of 1-based ranks; a list a section is absent from adds 0."""
    return float(sum(1.0 / (k + r) for r in ranks if r is not None))


def section_index_text(title: str, s: Section) -> str:
    """What BM25 sees: headings count as much as body text (callers name topics), plus the
    initials of capitalised names in the text ("United Kingdom" is also "UK")."""
    text = " ".join([title, *s.heading_path[1:], s.heading if s.heading != title else "", s.text])
    return " ".join([text, *initialisms(s.text)])


_NAME_RUN = re.compile(r"(?<![.!?:]\s)(?<!^)\b((?:[A-Z][a-z]+\s+){1,3}[A-Z][a-z]+)\b")


def initialisms(text: str) -> list[str]:
    """Initials of runs of two to four capitalised words inside a sentence (not its first word):
    how callers say them ("the UK", "a DD")."""
    return sorted({"".join(w[0] for w in m.group(1).split()).lower() for m in _NAME_RUN.finditer(text)})


def section_embed_text(title: str, s: Section) -> str:
    if s.heading and s.heading != title:
        return f"{title}. {s.heading}. {s.text}"
    return f"{title}. {s.text}"


@dataclass
class _View:
    """Everything one visibility set (role) needs: its sections, BM25 index, embeddings."""

    sections: np.ndarray  # global section indices visible, ascending
    lexical: LexicalIndex
    emb: np.ndarray | None  # rows for `sections`, or None without dense
    top_idf: float = 1.0  # highest IDF in this view: the weight of a term no visible section uses


@dataclass
class _Dense:
    """The dense half of one search."""

    scores: np.ndarray | None = None  # cosine per visible section; None when dense did not run
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # candidates, best first
    qv: np.ndarray | None = None  # the query's embedding
    degraded: str | None = None  # why the search fell back to lexical-only


class Retriever:
    def __init__(
        self,
        kb: KnowledgeBase,
        *,
        dense: bool = True,
        cache_dir: Path | None = None,
        progress: bool = False,
        rrf_k: int = 60,
        lexical_engine: str = "fast",
        candidates: int = 50,
        dense_floor: float = 0.2,
    ):
        if kb is None:
            raise RetrievalUnavailable("knowledge base not loaded")
        make_index(lexical_engine)  # validate the name now, not on the first query
        self.kb = kb
        self.kb_version = kb.kb_version
        self.rrf_k, self.candidates, self.dense_floor = rrf_k, candidates, dense_floor
        self.lexical_engine = lexical_engine
        self.cache_dir = emb_cache.cache_root(cache_dir)
        self.cache_status: str = "unused"
        self._sections = kb.sections
        self._docs = [kb.docs[s.doc_id] for s in self._sections]
        # Interning shares one string object per distinct term: at 100k sections the token
        # lists would otherwise dominate memory.
        intern: dict[str, str] = {}
        self._tokens = [
            [intern.setdefault(t, t) for t in content_tokens(section_index_text(d.title, s))]
            for s, d in zip(self._sections, self._docs)
        ]
        self._views: dict[frozenset[str], _View] = {}
        self.units: UnitIndex | None = None  # sentence embeddings, see attach_units
        self._role_keys: dict[str, frozenset[str]] = {}
        self._vocab: dict[tuple[frozenset[str], int], list[str]] = {}
        self._lock = threading.Lock()
        self._embedder: Embedder | None = None
        self._emb: np.ndarray | None = None
        self.dense_available = False
        self.dense_error: str | None = "dense retrieval disabled" if not dense else None
        if dense:
            try:
                self._embedder = load_embedder()
                self._emb = self._section_embeddings(progress)
                self.dense_available = True
            except EmbeddingUnavailable as e:
                self._embedder, self._emb = None, None
                self.dense_error = str(e)

    # ------------------------------------------------------------------ building

    def _section_embeddings(self, progress: bool) -> np.ndarray:
        assert self._embedder is not None
        texts = [section_embed_text(d.title, s) for s, d in zip(self._sections, self._docs)]
        model_id = self._embedder.model_id
        arr, why = emb_cache.load_embeddings(self.cache_dir, self.kb_version, model_id, texts)
        if arr is not None:
            self.cache_status = "hit"
            return arr
        bar = None
        if progress and len(texts) > 200:
            from tqdm import tqdm  # optional: only for a progress bar

            bar = tqdm(total=len(texts), desc="embedding KB sections", unit="sec", file=sys.stderr)
        try:
            arr = self._embedder.embed(texts, progress=bar.update if bar else None)
        finally:
            if bar:
                bar.close()
        self.cache_status = "rebuilt" if why != "miss" else "miss"
        if why != "miss":
            print(f"warning: embedding cache {why}; rebuilt", file=sys.stderr)
        try:
            emb_cache.save_embeddings(self.cache_dir, self.kb_version, model_id, texts, arr)
        except OSError as e:  # a read-only cache only costs the next start some time
            print(f"warning: could not write embedding cache under {self.cache_dir}: {e}", file=sys.stderr)
        return arr

    def _visible_key(self, role: str) -> frozenset[str]:
        key = self._role_keys.get(role)
        if key is None:
            key = self._role_keys[role] = frozenset(d.id for d in self.kb.docs.values() if visible_to(d, role))
        return key

    def _view(self, role: str) -> _View:
        key = self._visible_key(role)
        v = self._views.get(key)
        if v is not None:
            return v
        with self._lock:
            v = self._views.get(key)
            if v is None:
                idx = np.array([i for i, s in enumerate(self._sections) if s.doc_id in key], dtype=np.int64)
                lex = make_index(self.lexical_engine).build([self._tokens[i] for i in idx])
                emb = None
                if self._emb is not None:
                    # the whole KB visible: share the matrix instead of copying it
                    emb = self._emb if len(idx) == len(self._sections) else np.ascontiguousarray(self._emb[idx])
                top = max((getattr(lex, "idf", None) or {}).values(), default=1.0)
                v = self._views[key] = _View(idx, lex, emb, top)
        return v

    def attach_units(self, progress: bool = False) -> None:
        """Embed every answer unit (sentence, list item, table row) so hits carry the question's
        cosine to each; without the dense model hits still carry the units' text."""
        if self._embedder is None or self.units is not None:
            return
        units = UnitIndex(self._sections, self._embedder.embed, self.kb_version, self._embedder.model_id)
        units.build(progress)
        self.units = units

    # ------------------------------------------------------------------ querying

    @property
    def model_id(self) -> str | None:
        """The dense model's identity (for caches keyed by it); None without the model."""
        return self._embedder.model_id if self._embedder is not None else None

    def embed(self, texts: list[str]) -> np.ndarray:
        """(n, 384) float32 L2-normalized; raises EmbeddingUnavailable without the model."""
        if self._embedder is None:
            raise EmbeddingUnavailable(self.dense_error or "dense model unavailable")
        return self._embedder.embed(list(texts))

    def search(
        self,
        query: str,
        *,
        role: str = "public",
        facets: dict[str, str] | None = None,
        on_date: dt.date | None = None,
        k: int = 8,
        faults: Collection[str] = (),
    ) -> RetrievalResult:
        if FAULT_RETRIEVAL in faults:
            raise RetrievalUnavailable("retrieval unavailable (fault injected)")
        try:
            return self._search(query, role, facets or {}, on_date or dt.date.today(), k, faults)
        except RetrievalUnavailable:
            raise
        except Exception as e:  # a broken index must read as "retrieval down", not a crash
            raise RetrievalUnavailable(f"retrieval failed: {type(e).__name__}: {e}") from e

    def _search(self, query: str, role: str, facets: dict[str, str], on_date: dt.date, k: int,
                faults: Collection[str]) -> RetrievalResult:
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        terms = content_terms(query)
        view = self._view(role)
        n = len(view.sections)
        if view.lexical.size != n or (view.emb is not None and view.emb.shape != (n, DIM)):
            raise RetrievalUnavailable("index corrupt: index size does not match the visible sections")
        allowed = self._facet_mask(view.sections, facets)
        t1 = time.perf_counter()
        timings["prepare"] = (t1 - t0) * 1000

        lex_scores = view.lexical.scores(terms) if terms else np.zeros(n)
        # != 0, not > 0: in a tiny KB a term in every section has a negative (floored) IDF
        # but still matches; it ranks after positive scores instead of vanishing.
        lex_order = _top(lex_scores, allowed & (lex_scores != 0), self.candidates)
        t2 = time.perf_counter()
        timings["lexical"] = (t2 - t1) * 1000

        dense = self._dense(query, view, allowed, faults, timings, t2)
        dense_scores, dense_order, lexical_only = dense.scores, dense.order, dense.degraded is not None
        t4 = time.perf_counter()

        lex_rank = {int(j): r + 1 for r, j in enumerate(lex_order)}
        dense_rank = {int(j): r + 1 for r, j in enumerate(dense_order)}
        cands = set(lex_rank) | set(dense_rank)
        fused = {j: rrf((lex_rank.get(j), dense_rank.get(j)), self.rrf_k) for j in cands}

        def sort_key(j: int) -> tuple:
            return (-fused[j], -lex_scores[j], -(dense_scores[j] if dense_scores is not None else 0.0), j)

        ranked = sorted(cands, key=sort_key)[: max(k, 0)]
        hits = [
            self._hit(j, int(view.sections[j]), r + 1, fused[j], lex_scores, dense_scores,
                      lex_rank.get(j), dense_rank.get(j), terms, on_date, lexical_only)
            for r, j in enumerate(ranked)
        ]
        self._unit_scores(hits, None if lexical_only or dense_scores is None else dense.qv)
        timings["fuse"] = (time.perf_counter() - t4) * 1000
        timings["total"] = (time.perf_counter() - t0) * 1000
        # IDF over the caller's visible sections; a term no visible section uses gets the rarest weight.
        idf = getattr(view.lexical, "idf", None) or {}
        weights = {t: round(float(idf.get(t, view.top_idf)), 4) for t in terms}
        return RetrievalResult(
            query=query, query_terms=terms, hits=hits, lexical_only=lexical_only, term_weights=weights,
            degraded_reason=dense.degraded, kb_version=self.kb_version, visible_sections=n,
            timings_ms={a: round(b, 3) for a, b in timings.items()},
        )

    def _dense(self, query: str, view: _View, allowed: np.ndarray, faults: Collection[str],
               timings: dict[str, float], t_start: float) -> _Dense:
        """Cosine scores and candidate order for the query, or why there are none (lexical-only)."""
        if FAULT_EMBEDDING in faults:
            return _Dense(degraded="embedding model unavailable (fault injected): lexical-only retrieval")
        if view.emb is None or self._embedder is None:
            return _Dense(degraded=f"embedding model unavailable ({self.dense_error}): lexical-only retrieval")
        if not query.strip():
            return _Dense()
        try:
            qv = self._embedder.embed([query])[0]
        except EmbeddingUnavailable as e:
            return _Dense(degraded=f"{e}: lexical-only retrieval")
        t3 = time.perf_counter()
        timings["embed"] = (t3 - t_start) * 1000
        dense_scores = view.emb @ qv
        if self.units is not None and (unit_max := self.units.section_max(qv)) is not None:
            # a section is as close as its closest sentence or table row: a long page, or a
            # table, is found by the one line that answers
            rank_scores = np.maximum(dense_scores, unit_max[view.sections])
        else:
            rank_scores = dense_scores
        order = _top(rank_scores, allowed & (rank_scores >= self.dense_floor), self.candidates)
        timings["dense"] = (time.perf_counter() - t3) * 1000
        return _Dense(dense_scores, order, qv)

    def _unit_scores(self, hits: list[Hit], qv: np.ndarray | None) -> None:
        for h in hits:
            if self.units is not None:
                h.units = self.units.units(h.locator)
                if qv is not None:
                    h.unit_scores = self.units.scores(h.locator, qv)
                    h.heading_score = self.units.heading_score(h.locator, qv)
            else:
                section = self.kb.section(h.locator)
                h.units = section_units(section) if section else []

    def _facet_mask(self, sections: np.ndarray, facets: dict[str, str]) -> np.ndarray:
        mask = np.ones(len(sections), dtype=bool)
        want = {str(a): _norm_facet(b) for a, b in facets.items() if b not in (None, "")}
        if not want:
            return mask
        bad_docs = {
            d.id for d in self.kb.docs.values()
            if any(key in d.applies_to and _norm_facet(d.applies_to[key]) != val for key, val in want.items())
        }
        if bad_docs:
            for j, gi in enumerate(sections):
                if self._sections[gi].doc_id in bad_docs:
                    mask[j] = False
        return mask

    def _hit(self, j: int, gi: int, rank: int, fused: float, lex_scores: np.ndarray,
             dense_scores: np.ndarray | None, lr: int | None, dr: int | None, terms: list[str],
             on_date: dt.date, lexical_only: bool) -> Hit:
        s, d = self._sections[gi], self._docs[gi]
        have = set(self._tokens[gi])  # the indexed terms: text, headings and title
        return Hit(
            locator=s.locator, doc_id=d.id, section=s.slug, heading=s.heading, title=d.title,
            version=d.version, text=s.text, status=effective_status(d, on_date, self.kb),
            applies_to=dict(d.applies_to), risk=d.risk, handoff_team=d.handoff_team,
            supersedes=list(d.supersedes), effective_from=d.effective_from, effective_until=d.effective_until,
            lexical_score=float(lex_scores[j]),
            dense_score=None if lexical_only or dense_scores is None else float(dense_scores[j]),
            lexical_rank=lr, dense_rank=dr, fused_score=fused, fused_rank=rank,
            covered_terms=[t for t in terms if t in have], missing_terms=[t for t in terms if t not in have],
        )

    # ------------------------------------------------------------------ vocabulary

    def vocabulary(self, role: str = "public", limit: int = 400) -> list[str]:
        """Salient surface words of the KB visible to `role`, most salient first: names and
        product terms, then title and heading words, then frequent content words. For ASR
        biasing and repairing mis-heard words; never includes restricted documents' words."""
        key = self._visible_key(role)
        if (key, limit) not in self._vocab:
            self._vocab[(key, limit)] = salient_words(self._sections, self._docs, key, limit)
        return list(self._vocab[(key, limit)])


def _norm_facet(v: object) -> str:
    return str(v).strip().lower()


def _top(scores: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n best-scoring entries where mask is set, best first (ties: lower index)."""
    idx = np.flatnonzero(mask)
    if len(idx) > n:
        part = np.argpartition(-scores[idx], n - 1)[:n]
        idx = idx[part]
    return idx[np.lexsort((idx, -scores[idx]))]
