"""Lift sentences out of a section: the answer is extractive, so these choose what is spoken."""
from __future__ import annotations

import re

from kb.tokenize import content_terms

from .evidence import GradedHit
from .signals import evidence_has_fact

_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(*$])")
MAX_ANSWER_WORDS = 60


def sentences(text: str) -> list[str]:
    """Split prose into sentences; list items and line breaks also end a sentence."""
    out: list[str] = []
    for line in text.splitlines():
        line = re.sub(r"^\s*([-*+]|\d+[.)])\s+", "", line).strip()
        if not line or line.startswith("|"):
            continue
        out.extend(s.strip() for s in _SENT_SPLIT.split(line) if s.strip())
    return out


def pick_sentences(g: GradedHit, question: str, fact_kind: str) -> list[str]:
    """The sentences of the section that best answer the question, in their original order."""
    q_terms = set(content_terms(question))
    sents = sentences(g.hit.text)
    if not sents:
        return []
    scored = []
    for i, s in enumerate(sents):
        overlap = len(q_terms & set(content_terms(s)))
        fact = 1.5 if evidence_has_fact(fact_kind, s) else 0.0  # type: ignore[arg-type]
        scored.append((overlap + fact - 0.01 * i, i))
    scored.sort(reverse=True)
    chosen = [scored[0][1]]
    words = len(sents[chosen[0]].split())
    for score, i in scored[1:]:
        if score <= 0.5 or words + len(sents[i].split()) > MAX_ANSWER_WORDS or len(chosen) >= 3:
            continue
        chosen.append(i)
        words += len(sents[i].split())
    return [sents[i] for i in sorted(chosen)]
