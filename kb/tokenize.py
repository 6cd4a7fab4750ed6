"""Text normalization shared by the KB index and the query side.

One function family serves both sides so that whatever a caller says ("I've been
charged $25", "cancelling", "5 GB") lands on the same terms the documents were indexed
with ("charg", "usd", "25usd", "cancel", "5gb"). Terms are deliberately crude stems:
they are matched, never shown to the caller.
"""
from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["tokenize", "content_terms", "content_tokens", "stem", "STOPWORDS", "has_cjk"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")

# Contractions first, so the apostrophe does not split "can't" into "can" + "t".
_CONTRACTIONS = [
    (re.compile(r"\bcan'?t\b"), "can not"),
    (re.compile(r"\bcannot\b"), "can not"),
    (re.compile(r"\bwon'?t\b"), "will not"),
    (re.compile(r"\bshan't\b"), "shall not"),
    (re.compile(r"\b(\w+)n't\b"), r"\1 not"),
    (re.compile(r"\bi'm\b"), "i am"),
    (re.compile(r"\b(\w+)'re\b"), r"\1 are"),
    (re.compile(r"\b(\w+)'ve\b"), r"\1 have"),
    (re.compile(r"\b(\w+)'ll\b"), r"\1 will"),
    (re.compile(r"\b(\w+)'d\b"), r"\1 would"),
    (re.compile(r"\b(\w+)'s\b"), r"\1"),  # possessive / "it's": the bare word carries the meaning
]
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u2013": "-", "\u2014": " ", "\u00a0": " "})

# Surface unit words -> one canonical unit term. Numbers next to a unit also yield a joined
# term ("5gb", "24hour", "25usd") so a query's "5 GB" matches a document's "5GB" exactly.
_UNITS: dict[str, str] = {}
for canon, forms in {
    "usd": ["usd", "dollar", "dollars", "buck", "bucks"],
    "eur": ["eur", "euro", "euros"],
    "gbp": ["gbp", "pound", "pounds"],
    "gb": ["gb", "gig", "gigs", "gigabyte", "gigabytes"],
    "mb": ["mb", "megabyte", "megabytes"],
    "tb": ["tb", "terabyte", "terabytes"],
    "kb": ["kb", "kilobyte", "kilobytes"],
    "mbps": ["mbps", "megabit", "megabits"],
    "gbps": ["gbps", "gigabit", "gigabits"],
    "hour": ["h", "hr", "hrs", "hour", "hours"],
    "minute": ["min", "mins", "minute", "minutes"],
    "second": ["sec", "secs", "second", "seconds"],
    "day": ["day", "days"],
    "week": ["wk", "wks", "week", "weeks"],
    "month": ["mo", "mos", "month", "months"],
    "year": ["yr", "yrs", "year", "years"],
    "pct": ["%", "pct", "percent", "percentage"],
}.items():
    for f in forms:
        _UNITS[f] = canon

_CURRENCY_SYMBOLS = {"$": "usd", "€": "eur", "£": "gbp"}
_CURRENCY_RE = re.compile(r"([$€£])\s?(\d)")
# A token: letters/digits, optionally with decimal parts ("4.99", "1,000") and hyphenated parts.
_TOKEN_RE = re.compile(r"[a-z0-9]+(?:[.,][0-9]+)*(?:-[a-z0-9]+(?:[.,][0-9]+)*)*|%")
_NUM_UNIT_RE = re.compile(r"^(\d+(?:\.\d+)?)([a-z]+)$")
_NUMBER_RE = re.compile(r"^\d+(?:\.\d+)?$")
_THOUSANDS_RE = re.compile(r"\d{1,3}(,\d{3})+(\.\d+)?")
_CURRENCY_AFTER_RE = re.compile(r"(usd|eur|gbp)_(\d+(?:[.,]\d+)*)")

STOPWORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are aren as at be because been before
    being below between both but by could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just let me more most my myself nor of off on once only or other our ours ourselves out over own
    same she should so some such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves
    can may might must shall also yes not no
    hi hello hey please thanks thank um uh er ah oh okay ok yeah hmm well really actually
    like want wanna gonna need know tell get got go going say said ask asking wondering question
    anyone someone something anything thing things
    的 了 吗 呢 吧 啊 是 我 你 他 她 它 们 我们 你们 在 有 和 与 或 就 都 也 要 会 能 可以 怎么 什么
    如何 想 并 我的 请 请问 一下 这个 那个 这 那 吗 嗎 么 把 被 给 对 从 到
    """.split()
)


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


_STEM_EXCEPTIONS = {"news", "series", "species", "always", "perhaps", "business", "address", "access"}


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A small suffix stripper: refunds -> refund, charges/charged -> charg,
    cancelled/cancelling/cancellation -> cancel, policies -> policy, billing -> bil.

    It only needs to be *consistent* (the same function runs on documents and queries),
    not linguistically right, so it prefers a few predictable rules over Porter's many.
    """
    w = word
    if len(w) <= 3 or not w.isalpha() or not w.isascii() or w in _STEM_EXCEPTIONS:
        return w
    # plurals and 3rd person
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("es") and (w[-3] in "sxz" or w[-4:-2] in ("ch", "sh")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    # derivational / inflectional suffixes, longest first; keep a stem of >= 3 letters
    for suf, rep in (
        ("izations", ""), ("ization", ""), ("ations", ""), ("ation", ""), ("ements", ""),
        ("ement", ""), ("ments", ""), ("ment", ""), ("ingly", ""), ("ings", ""), ("ing", ""),
        ("ied", "y"), ("edly", ""), ("ed", ""), ("ful", ""), ("able", ""), ("ible", ""),
        ("ness", ""), ("ly", ""),
    ):
        if suf == "ly" and (len(w) < 6 or w.endswith("pply")):  # apply, early, daily stay
            continue
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)] + rep
            break
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    # undouble a final consonant everywhere (bill/billing -> bil, cancelled -> cancel)
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiou":
        w = w[:-1]
    return w


def _normalize(text: str) -> str:
    t = text.translate(_QUOTES).lower()
    if "'" in t:
        for pat, rep in _CONTRACTIONS:
            t = pat.sub(rep, t)
    if "$" in t or "\u20ac" in t or "\u00a3" in t:
        t = _CURRENCY_RE.sub(lambda m: f"{_CURRENCY_SYMBOLS[m.group(1)]}_{m.group(2)}", t)
        # "$25" became "usd_25": put the unit after the number, as in "25 dollars"
        t = _CURRENCY_AFTER_RE.sub(r"\2 \1", t)
    return t


def _word(p: str) -> list[str]:
    """Terms of one hyphen-free piece: a word, a number, or a number glued to a unit."""
    u = _UNITS.get(p)
    if u:
        return [u]
    if p.isalpha():
        return [p if p in STOPWORDS else stem(p)]
    if _THOUSANDS_RE.fullmatch(p):
        p = p.replace(",", "")
    m = _NUM_UNIT_RE.match(p)
    if m and m.group(2) in _UNITS:  # "5gb", "24h", "30days"
        unit = _UNITS[m.group(2)]
        return [m.group(1), unit, m.group(1) + unit]
    return [p]


def _latin_tokens(text: str) -> list[str]:
    """Tokens of non-CJK text, already normalized by `_normalize`."""
    out: list[str] = []
    raw = _TOKEN_RE.findall(text)
    last = len(raw) - 1
    for i, tok in enumerate(raw):
        if "-" not in tok:
            out += _word(tok)
        else:
            parts = [p for p in tok.split("-") if p]
            for p in parts:
                out += _word(p)
            if len(parts) == 2 and _NUMBER_RE.match(parts[0]) and parts[1] in _UNITS:
                out.append(parts[0] + _UNITS[parts[1]])  # "10-day" -> "10day"
            elif len(parts) > 1 and not all(_NUMBER_RE.match(p) for p in parts):
                out.append(stem("".join(parts)))  # "auto-renewal" -> also "autorenewal"
        # "5 GB" / "24 hours": join a bare number with the unit word that follows it
        if i < last and tok[0].isdigit() and _NUMBER_RE.match(num := tok.replace(",", "")):
            nxt = raw[i + 1].split("-")[0]
            if nxt in _UNITS:
                out.append(num + _UNITS[nxt])
    return [t for t in out if t]


def tokenize(text: str) -> list[str]:
    """All normalized terms of `text`, in order (stopwords kept)."""
    if not text:
        return []
    t = _normalize(text)
    if not has_cjk(t):
        return _latin_tokens(t)
    import jieba  # heavy, optional: loads a dictionary; only for Chinese text

    jieba.setLogLevel(60)  # it logs dictionary loading at INFO on first use

    out: list[str] = []
    pos = 0
    for m in _CJK_RUN.finditer(t):
        out += _latin_tokens(t[pos : m.start()])
        out += [w for w in jieba.lcut_for_search(m.group(0)) if w.strip()]
        pos = m.end()
    out += _latin_tokens(t[pos:])
    return out


def content_tokens(text: str) -> list[str]:
    """`tokenize` without stopwords, duplicates kept: what the lexical index counts."""
    return [t for t in tokenize(text) if t not in STOPWORDS and t != "%"]


def content_terms(text: str) -> list[str]:
    """Query terms: content tokens with stopwords removed, first-seen order, deduplicated."""
    seen: dict[str, None] = {}
    for t in content_tokens(text):
        seen.setdefault(t, None)
    return list(seen)
