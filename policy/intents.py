"""Intents by meaning: a clause of the caller's turn close to one of an intent's examples (from the
policy file) has that intent. "Get me someone who can sort this out" is a request for a person
although no pattern names it. Works beside the lexicon patterns, which stay exact."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .config import Intent
from .language import clauses, normalize_text, run_on_pieces


class IntentReader:
    def __init__(self, intents: dict[str, Intent], embed: Callable[[list[str]], np.ndarray]):
        self._embed = embed
        self._intents = {name: (i.threshold, embed(i.examples + i.spoken)) for name, i in intents.items()
                         if i.examples or i.spoken}

    def clauses(self, text: str) -> list[str]:
        """The turn's clauses, the pieces of a run-on clause (a transcript without punctuation reads as
        one long clause, in which a short "I'm scared" is lost), and the whole turn."""
        parts = [c for c in clauses(text) if len(c) > 2]
        return parts + run_on_pieces(parts, "self") + ([normalize_text(text)] if len(parts) > 1 else [])

    def scores(self, text: str) -> dict[str, float]:
        """Per intent, the closest any clause (or the whole turn) comes to one of its examples."""
        parts = self.clauses(text)
        if not parts or not self._intents:
            return {}
        vecs = self._embed(parts)
        return {name: float((vecs @ ex.T).max()) for name, (_, ex) in self._intents.items()}

    def detect(self, text: str) -> dict[str, float]:
        """The intents this turn has, with their score."""
        th = {name: t for name, (t, _) in self._intents.items()}
        return {name: s for name, s in self.scores(text).items() if s >= th[name]}
