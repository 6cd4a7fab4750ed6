"""Words that sound like a KB word: "cast" for "cost", "build" for "bill", "Ruger" for "router".

A mishearing keeps most of a word's consonant skeleton, so two words whose Metaphone keys are at most
one edit apart, and whose spellings are alike, are sound-alikes. `sound_repairs` proposes, for each
word of a transcript that the KB does not use, the one KB word it most likely was; it never decides
whether to accept the result (the caller of it checks that the evidence got stronger)."""
from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

import jellyfish

from .tokenize import STOPWORDS

_WORD = re.compile(r"[A-Za-z][A-Za-z']*")
# Least Jaro-Winkler spelling likeness, by sound-key distance: "cast"/"cost" 0.85 (same key),
# "build"/"bill" 0.89 and "plant"/"plan" 0.96 (one edit); not "stolen"/"still" 0.76 or "camera"/"carry".
MIN_SPELLING = {0: 0.80, 1: 0.84}


@functools.lru_cache(maxsize=65536)
def sound_key(word: str) -> str:
    return jellyfish.metaphone(word.lower().replace("'", "")).replace(" ", "")


def _key_distance(a: str, b: str) -> int:
    return jellyfish.levenshtein_distance(a, b)


@dataclass(frozen=True)
class SoundRepair:
    heard: str
    meant: str
    key_distance: int
    spelling: float

    @property
    def likeness(self) -> float:
        """Spelling likeness, less a little per sound-key edit: "cast" is "cost" (same key) before "case"."""
        return round(self.spelling - 0.05 * self.key_distance, 6)

    def __str__(self) -> str:
        return f"{self.heard}->{self.meant} (sounds alike: key distance {self.key_distance}, spelling {self.spelling:.2f})"


class SoundIndex:
    """The KB's words by sound key, for `sound_repairs`. Short keys only match exactly: two
    consonants leave too little to tell one word from another."""

    def __init__(self, kb_words: Iterable[str]):
        self.words = {w.lower() for w in kb_words if len(w) >= 3 and w.isalpha()}
        self._by_key: dict[str, list[str]] = {}
        for w in sorted(self.words):
            self._by_key.setdefault(sound_key(w), []).append(w)

    def nearest(self, word: str) -> SoundRepair | None:
        """The single KB word that sounds most like `word`; None when none is close or two tie."""
        key = sound_key(word)
        if len(key) < 2:
            return None
        best: list[SoundRepair] = []
        for k, words in self._by_key.items():
            d = _key_distance(key, k)
            if d > (0 if len(key) <= 2 else 1):
                continue
            for w in words:
                # rounded: "cut"/"cat" is 0.8 in exact arithmetic but 0.79999... in floating point
                s = round(jellyfish.jaro_winkler_similarity(word.lower(), w), 6)
                if s >= MIN_SPELLING[d]:
                    best.append(SoundRepair(word, w, d, s))
        if not best:
            return None
        best.sort(key=lambda r: -r.likeness)
        if len(best) > 1 and best[1].likeness == best[0].likeness:
            return None  # two KB words fit equally: no way to tell which was meant
        return best[0]


def _repairs_in(text: str, index: SoundIndex, keep: frozenset[str]) -> list[tuple[re.Match[str], SoundRepair]]:
    """Each word of `text` the KB does not use that has a KB sound-alike, with its repair."""
    found = []
    for m in _WORD.finditer(text):
        low = m.group(0).lower()
        if len(low) < 3 or low in index.words or low in keep:
            continue
        if (r := index.nearest(low)) is not None:
            found.append((m, r))
    return found


def _as_heard(m: re.Match[str], r: SoundRepair) -> str:
    return r.meant.capitalize() if m.group(0)[:1].isupper() else r.meant


def sound_repairs(text: str, index: SoundIndex, keep: frozenset[str] = STOPWORDS) -> tuple[str, list[SoundRepair]]:
    """`text` with each word the KB does not use replaced by its KB sound-alike, and the repairs
    made. `keep`: words never replaced (by default function words)."""
    found = _repairs_in(text, index, keep)
    out, at = [], 0
    for m, r in found:
        out += [text[at:m.start()], _as_heard(m, r)]
        at = m.end()
    return "".join(out) + text[at:], [r for _, r in found]


def sound_alikes(text: str, index: SoundIndex, keep: frozenset[str] = STOPWORDS) -> list[tuple[str, SoundRepair]]:
    """One hypothesis per repairable word: `text` with only that word replaced by its sound-alike."""
    return [(text[:m.start()] + _as_heard(m, r) + text[m.end():], r) for m, r in _repairs_in(text, index, keep)]
