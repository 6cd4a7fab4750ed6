"""Intents by meaning: a clause of the caller's turn close to one of an intent's examples (from the
policy file) has that intent. "Get me someone who can sort this out" is a request for a person
although no pattern names it. Works beside the lexicon patterns, which stay exact."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .config import Intent
from .language import clauses, normalize_text, run_on_pieces


# A request for a person that only a turn's meaning suggests (no request pattern reads it) is not
# taken from a doubtful hearing of more than MAX_DOUBTFUL_ASK_WORDS words. Below DOUBTFUL_LOGPROB (mean
# token log-probability) tiny.en mishears much of a turn (over 437 domain recordings it marks turns
# with a word error rate over 0.4 at AUC 0.947). On the first set of domain recordings two such
# hearings held "agent" among garbled words ("witch over from another agent", -0.95); the real
# requests read so were short, however doubtful ("Can I speak to her, one?", -0.90), or heard
# surely ("I'd rather discuss this with a member of the team", 14 words, -0.04).
MAX_DOUBTFUL_ASK_WORDS = 12
DOUBTFUL_LOGPROB = -0.5


def heard_intents(found: dict[str, float], text: str, avg_logprob: float | None) -> dict[str, float]:
    """The intents read by meaning in a turn, as its hearing allows (`avg_logprob`: the hearing's
    mean token log-probability; None for typed text)."""
    doubtful = avg_logprob is not None and avg_logprob < DOUBTFUL_LOGPROB
    if doubtful and "human_request" in found and len(text.split()) > MAX_DOUBTFUL_ASK_WORDS:
        return {k: v for k, v in found.items() if k != "human_request"}
    return found


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
