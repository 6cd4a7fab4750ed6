"""Word error rate of transcripts against what was said, for `run.py bench wer`.

Both sides are normalised alike before they are aligned (by jiwer): case and punctuation
dropped, number words read as digits by the project's own number reader (`policy.numbers`, so
"twenty five euros" and "€25" both become "25 euros"), ordinals as digits, runs of digits joined
("0 1 9 9", "0199" and "twenty twenty six"/"2026" all alike), certain contractions spelt out
("they're" = "they are"), and hesitation sounds ("um", "uh", the policy's own filler list) left
out: whisper drops them, and the agent ignores them anyway.
Repeated words of a restart ("I, I want") stay: a transcript that loses them is counted wrong."""
from __future__ import annotations

import re
from dataclasses import dataclass

from policy.language import FILLERS
from policy.numbers import words_to_digits

_CURRENCY = {"$": "dollars", "€": "euros", "£": "pounds"}
_ORDINALS = {w: str(i) for i, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split(), 1)}
_SAME = {"ok": "okay", "alright": "all right"}
_MONEY = re.compile(r"([$€£])\s?(\d[\d,]*(?:\.\d+)?)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_ORDINAL_SUFFIX = re.compile(r"(?<=\d)(?:st|nd|rd|th)\b")
_PUNCT = re.compile(r"[^\w\s'.]")
_NOT_DECIMAL = re.compile(r"(?<!\d)\.|\.(?!\d)")
_AM_PM = re.compile(r"\b([ap])\.m\b\.?")
# contractions whose long form is certain ('s and 'd are not: is/has, would/had)
_CONTRACTIONS = [(re.compile(r"\bcan't\b|\bcannot\b"), "can not"), (re.compile(r"\bwon't\b"), "will not"),
                 (re.compile(r"n't\b"), " not"), (re.compile(r"'re\b"), " are"), (re.compile(r"'ve\b"), " have"),
                 (re.compile(r"'ll\b"), " will"), (re.compile(r"\bi'm\b"), "i am")]


class WerUnavailable(RuntimeError):
    """jiwer, which aligns the words, is not installed."""


def normalize_words(text: str) -> list[str]:
    """The words of `text` as they are compared."""
    t = words_to_digits(text.replace("\u2019", "'"))
    t = _MONEY.sub(lambda m: f"{m[2]} {_CURRENCY[m[1]]}", t).replace("%", " percent")
    t = _AM_PM.sub(r"\1m", _ORDINAL_SUFFIX.sub("", _THOUSANDS.sub("", t.lower())))
    for rx, long in _CONTRACTIONS:
        t = rx.sub(long, t)
    t = _NOT_DECIMAL.sub(" ", _PUNCT.sub(" ", t))
    words: list[str] = []
    for raw in t.split():
        w = raw.strip("'_")
        w = _SAME.get(w, _ORDINALS.get(w, w))
        if not w or w in FILLERS:
            continue
        if words and w.isdigit() and words[-1].isdigit():
            words[-1] += w  # digits read one by one or as a number compare alike
        else:
            words.extend(w.split())
    return words


@dataclass
class WerCount:
    """Alignment counts; `rate` is (substitutions + deletions + insertions) / reference words."""

    words: int = 0
    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    files: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate(self) -> float | None:
        return self.errors / self.words if self.words else None

    def add(self, other: "WerCount") -> None:
        self.words += other.words
        self.substitutions += other.substitutions
        self.deletions += other.deletions
        self.insertions += other.insertions
        self.files += other.files

    def as_dict(self) -> dict[str, float | int | None]:
        return {"files": self.files, "words": self.words, "substitutions": self.substitutions,
                "deletions": self.deletions, "insertions": self.insertions,
                "wer": None if self.rate is None else round(self.rate, 4)}


def count(reference: str, hypothesis: str) -> WerCount:
    """One file's counts: `reference` is what was said, `hypothesis` what was heard."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    if not ref or not hyp:  # nothing to align: every word is missing or extra
        return WerCount(words=len(ref), deletions=len(ref), insertions=len(hyp), files=1)
    try:
        import jiwer  # the aligner; only this benchmark needs it
    except ImportError:
        raise WerUnavailable("jiwer is not installed: run `pip install '.[wer]'` (or `pip install jiwer`)") from None
    out = jiwer.process_words(" ".join(ref), " ".join(hyp))
    return WerCount(words=len(ref), substitutions=out.substitutions, deletions=out.deletions,
                    insertions=out.insertions, files=1)
