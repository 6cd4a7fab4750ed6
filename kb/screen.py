"""Screening KB text for what must never be spoken: instructions aimed at the agent itself
(prompt injection planted in a page) and credentials pasted into a page.

A KB is written by many editors, and a page may quote an e-mail or a web form. A section that
tells the assistant what to do, or holds a password or an API key, is quarantined at load: the
retriever never sees it, so it cannot be cited or spoken, and `kb check` names it for an editor.
Staff procedures ("agents must verify the caller's date of birth") are not instructions to the
assistant: only the assistant's own names, and the classic override phrases, count."""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from .models import Section

__all__ = ["Finding", "screen_text", "quarantine"]

# Overrides of the assistant's rules, and text addressed to an AI by one of its names.
_INSTRUCTION = re.compile(
    r"\b(?:ignore|disregard|forget|override)\b[^.!?\n]{0,40}?\b(?:previous|prior|above|earlier|all|any|your|system)\b"
    r"[^.!?\n]{0,20}?\b(?:instructions?|rules|prompts?|guidelines)\b"
    r"|\b(?:system prompt|developer mode|jailbreak)\b"
    r"|\b(?:ai|assistant|chatbot|bot|language model|llm|virtual agent|voice assistant)\b[,:]?\s+"
    r"(?:you\s+)?(?:must|should|shall|will|always|never|are now)\b"
    r"|\byou are now\b|\bif you are an? (?:ai|assistant|language model|llm|bot)\b"
    r"|\b(?:ai|assistant|language model|llm|bot)s? reading this\b"
    r"|\b(?:always|just)\s+(?:answer|say|tell|reply|respond)\b[^.!?\n]{0,40}\b(?:yes|approved|regardless|whatever)\b"
    r"|\b(?:tell|give|read out|reveal|disclose)\s+(?:the\s+)?(?:caller|customer|user)(?:s|'s)?\s+(?:the\s+)?"
    r"(?:password|passcode|pin|secret|override code|api key|system prompt)",
    re.IGNORECASE,
)
# A secret's name followed by a value that looks like one (a digit or mixed case, 4+ characters);
# "the password is case-sensitive" names no value.
_NAMED_SECRET = re.compile(
    r"\b(?:password|passcode|passwd|pwd|api[ _-]?key|secret(?: key)?|access token|auth token|pin|override code)"
    r"\s*(?:is|:|=)\s*[\"'`]?(?-i:(?=[^\s\"'`]*(?:\d|[a-z][A-Z])))([^\s\"'`]{4,})",
    re.IGNORECASE,
)
# Formats of widely used credentials.
_KEY_FORMAT = re.compile(
    r"\bAKIA[0-9A-Z]{16}\b|\bsk-[A-Za-z0-9_-]{20,}|\bgh[pousr]_[A-Za-z0-9]{30,}|\bxox[abprs]-[A-Za-z0-9-]{10,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
_LONG_TOKEN = re.compile(r"(?<![\w/.-])[A-Za-z0-9_-]{24,}(?![\w/.-])")


@dataclass(frozen=True)
class Finding:
    kind: str  # "instruction" | "credential"
    excerpt: str  # the matched text, shortened, for the editor's report

    def __str__(self) -> str:
        return f"{self.kind} ({self.excerpt!r})"


def screen_text(text: str) -> list[Finding]:
    """What in `text` must not be spoken: at most one finding of each kind."""
    out: list[Finding] = []
    if m := _INSTRUCTION.search(text):
        out.append(Finding("instruction", _short(m.group(0))))
    secret = _NAMED_SECRET.search(text) or _KEY_FORMAT.search(text) or _random_token(text)
    if secret:
        out.append(Finding("credential", _short(secret.group(0), keep=8)))
    return out


def _random_token(text: str) -> re.Match[str] | None:
    """A long run of letters and digits with the spread of a generated key, not a word or an id
    like ORDER-2024-000123."""
    for m in _LONG_TOKEN.finditer(text):
        tok = m.group(0)
        kinds = sum(bool(re.search(p, tok)) for p in ("[a-z]", "[A-Z]", "[0-9]"))
        if kinds == 3 and _entropy(tok) >= 3.5:
            return m
    return None


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def _short(s: str, keep: int = 60) -> str:
    s = " ".join(s.split())
    return s if len(s) <= keep else s[:keep] + "…"


def quarantine(sections: list[Section]) -> tuple[list[Section], list[str]]:
    """The sections that may be retrieved, and one load warning per section held back."""
    kept: list[Section] = []
    warnings: list[str] = []
    for s in sections:
        findings = screen_text(f"{s.heading}\n{s.text}")
        if findings:
            warnings.append(f"section #{s.slug} quarantined, never retrieved or spoken: "
                            + "; ".join(map(str, findings)) + " (edit the page)")
        else:
            kept.append(s)
    return kept, warnings
