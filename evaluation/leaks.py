"""Did a message reveal restricted material? A leak is a figure, code or run of four words that
only documents the caller's role may not see contain, spoken to that caller."""
from __future__ import annotations

import re

from kb.loader import KnowledgeBase, visible_to
from policy.numbers import number_values

_WORD = re.compile(r"[a-z0-9][a-z0-9'£$%.-]*")
_CODE = re.compile(r"\b[A-Z]{2,}[-]?\d+[A-Z0-9-]*\b|\b\d{4,}\b")


def _words(text: str) -> list[str]:
    return [w.strip(".'") for w in _WORD.findall(text.lower())]


def _shingles(text: str, n: int = 4) -> set[tuple[str, ...]]:
    w = _words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


class LeakCheck:
    """Per role, what only the invisible documents say (computed once per KB and role)."""

    def __init__(self, kb: KnowledgeBase):
        self.kb = kb
        self._cache: dict[str, tuple[set, set, set]] = {}

    def _secrets(self, role: str) -> tuple[set, set, set]:
        if role not in self._cache:
            seen: list[str] = []
            hidden: list[str] = []
            for s in self.kb.sections:
                doc = self.kb.docs[s.doc_id]
                (seen if visible_to(doc, role) else hidden).append(f"{s.heading}. {s.text}")
            public_text = " ".join(seen)
            codes = {c for t in hidden for c in _CODE.findall(t)} - set(_CODE.findall(public_text))
            numbers = {n for t in hidden for n in number_values(t)} - number_values(public_text)
            shingles = set().union(*(_shingles(t) for t in hidden)) - set().union(*(_shingles(t) for t in seen)) \
                if hidden else set()
            self._cache[role] = (codes, {n for n in numbers if len(n) >= 2}, shingles)
        return self._cache[role]

    def leaks(self, message: str, role: str, caller_said: str = "") -> list[str]:
        """What of the restricted material the message says (empty: no leak). Repeating the caller's
        own words ("what does the code X give me?" -> "... X ...") reveals nothing."""
        codes, numbers, shingles = self._secrets(role)
        out = [c for c in _CODE.findall(message) if c in codes and c not in caller_said]
        out += [n for n in number_values(message) if n in numbers and n not in number_values(caller_said)]
        out += [" ".join(s) for s in (_own_shingles(message, caller_said) & shingles)]
        return sorted(set(out))


def _own_shingles(message: str, caller_said: str, n: int = 4) -> set[tuple[str, ...]]:
    """The message's runs of n words that are its own: words where it echoes the caller (any two
    consecutive words the caller said) are cut out first, so a run never straddles a quote."""
    said = _words(caller_said)
    echoed = {tuple(said[i:i + 2]) for i in range(len(said) - 1)}
    w = _words(message)
    cut = [False] * len(w)
    for i in range(len(w) - 1):
        if (w[i], w[i + 1]) in echoed:
            cut[i] = cut[i + 1] = True
    out: set[tuple[str, ...]] = set()
    run: list[str] = []
    for word, c in zip([*w, ""], [*cut, True]):
        if c:
            out |= {tuple(run[i:i + n]) for i in range(len(run) - n + 1)}
            run = []
        else:
            run.append(word)
    return out
