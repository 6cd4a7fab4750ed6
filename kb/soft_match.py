"""Soft term coverage: does a section say the caller's word in other words?

A caller says "shut", the store page says "close"; "gadgets" vs "devices". Exact-term coverage
calls those missing and the policy refuses an answerable question. Here each missing query word is
compared with the section's own words by MiniLM cosine; a close enough pair counts as covered. Word
vectors are cached per process, so after warm-up a turn embeds only words it has never seen."""
from __future__ import annotations

import re
import sys
import threading
from functools import lru_cache
from typing import Callable

import numpy as np

from .cache import cache_root, load_embeddings, save_embeddings
from .models import Hit
from .tokenize import STOPWORDS, content_terms

_WORD = re.compile(r"[a-z][a-z'-]{2,}")


@lru_cache(maxsize=100_000)
def _term_of(word: str) -> str | None:
    terms = content_terms(word)
    return terms[0] if len(terms) == 1 else None


def _surface_terms(text: str) -> dict[str, str]:
    """surface word -> its index term, for the content words of a text."""
    out: dict[str, str] = {}
    for w in _WORD.findall(text.lower()):
        w = w.strip("'-")
        if w in STOPWORDS or w in out:
            continue
        term = _term_of(w)
        if term is not None:
            out[w] = term
    return out


class SoftMatcher:
    def __init__(self, embed: Callable[[list[str]], np.ndarray], threshold: float = 0.57, max_cache: int = 200_000):
        self._embed = embed
        self.threshold = threshold
        self._vecs: dict[str, np.ndarray] = {}
        self._max = max_cache
        self._lock = threading.Lock()
        self._sections: dict[str, dict[str, str]] = {}  # locator -> its words (sections do not change)

    def _vectors(self, words: list[str]) -> np.ndarray:
        new = [w for w in dict.fromkeys(words) if w not in self._vecs]
        if new:
            vecs = self._embed(new)
            with self._lock:
                if len(self._vecs) + len(new) > self._max:
                    self._vecs.clear()
                self._vecs.update(zip(new, vecs))
        return np.stack([self._vecs[w] for w in words]) if words else np.zeros((0, 384), np.float32)

    def prime(self, texts: list[str], kb_version: str, model_id: str, progress: bool = False) -> int:
        """Embed every content word of the KB once, through the on-disk cache, so a turn only embeds
        the caller's own unseen words. Returns how many words are now cached."""
        words = sorted({w for t in texts for w in _surface_terms(t)})
        if not words:
            return 0
        root, key = cache_root(), f"words-{kb_version}"
        vecs, _ = load_embeddings(root, key, model_id, words)
        if vecs is None:
            bar = None
            if progress and len(words) > 500:
                from tqdm import tqdm  # optional: only for a progress bar

                bar = tqdm(total=len(words), desc="embedding KB words", unit="word", file=sys.stderr)
            chunks = []
            for i in range(0, len(words), 256):
                chunks.append(self._embed(words[i:i + 256]))
                if bar:
                    bar.update(len(words[i:i + 256]))
            if bar:
                bar.close()
            vecs = np.concatenate(chunks)
            try:
                save_embeddings(root, key, model_id, words, vecs)
            except OSError:
                pass  # a read-only cache only costs the next start this work again
        with self._lock:
            self._vecs.update(zip(words, vecs))
        return len(words)

    def _section_words(self, h: Hit) -> dict[str, str]:
        sec = self._sections.get(h.locator)
        if sec is None:
            if len(self._sections) > 50_000:
                self._sections.clear()
            sec = self._sections[h.locator] = _surface_terms(f"{h.title} {h.heading} {h.text}")
        return sec

    def annotate(self, query: str, hits: list[Hit]) -> None:
        """Fill `hit.soft_covered` (missing term -> the section word that says it) and `soft_scores`
        (missing term -> its best word cosine in the section) for each hit."""
        q_words = {w: t for w, t in _surface_terms(query).items() if any(t in h.missing_terms for h in hits)}
        if not q_words:
            return
        q_list = list(q_words)
        qv = self._vectors(q_list)
        for h in hits:
            sec = self._section_words(h)
            missing = [w for w in q_list if q_words[w] in h.missing_terms]
            if not missing or not sec:
                continue
            s_list = list(sec)
            sims = qv[[q_list.index(w) for w in missing]] @ self._vectors(s_list).T
            for i, w in enumerate(missing):
                j = int(np.argmax(sims[i]))
                term = q_words[w]
                h.soft_scores[term] = max(h.soft_scores.get(term, 0.0), round(float(sims[i, j]), 4))
                if sims[i, j] >= self.threshold:
                    h.soft_covered[term] = s_list[j]
