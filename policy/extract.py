"""Lift sentences out of a section: the answer is extractive, so these choose what is spoken."""
from __future__ import annotations

import re

from kb.tokenize import content_terms

from .evidence import GradedHit
from .signals import evidence_has_fact

_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(*$])")
MAX_ANSWER_WORDS = 60
# Codes, settings and names a caller may ask for: RET-20, LOYAL10, *#123#, internet.northbeam, 1-800-555-0121
_IDENTIFIER = re.compile(r"\b[A-Z]{2,}[-]?\d+\b|[*#]\d+#|\b[a-z]+\.[a-z]+(\.[a-z]+)*\b|\b\d{1,4}(-\d{2,4}){2,}\b")


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
    # "What code / number / APN …?" is answered by the sentence that names one.
    wants_name = re.match(r"\s*(what|which)\b", question.lower()) is not None and fact_kind == "any"
    scored = []
    for i, s in enumerate(sents):
        overlap = len(q_terms & set(content_terms(s)))
        fact = 1.5 if evidence_has_fact(fact_kind, s) else 0.0  # type: ignore[arg-type]
        name = 1.0 if wants_name and _IDENTIFIER.search(s) else 0.0
        scored.append((overlap + fact + name - 0.01 * i, i))
    scored.sort(reverse=True)
    chosen = [scored[0][1]]
    words = len(sents[chosen[0]].split())
    for score, i in scored[1:]:
        if score <= 0.5 or words + len(sents[i].split()) > MAX_ANSWER_WORDS or len(chosen) >= 3:
            continue
        chosen.append(i)
        words += len(sents[i].split())
    return [sents[i] for i in sorted(chosen)]
