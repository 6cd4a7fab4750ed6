"""The one reader of numbers in text: figures, amounts, durations, dates and times, in a comparable
form. Number words go through text2num ("eighteen", "seventy-five", "three hundred and twenty");
a few spoken measures it does not know are added ("a fortnight", "half an hour").

Used by conflict detection (two current documents giving different figures), the pre-TTS recheck
(every number spoken must stand in a cited section), the spoken-number normalization of caller
turns, and the eval's evidence checks."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from text_to_num import alpha2digit

# Spoken measures that are a number and a unit in one word.
_MEASURES = {"fortnight": "14 days", "fortnights": "14 days", "half an hour": "30 minutes",
             "half a day": "12 hours", "a dozen": "12", "a couple of": "2", "a hundred": "100",
             "a thousand": "1000", "a week": "1 week", "a month": "1 month", "a year": "1 year",
             "a day": "1 day", "an hour": "1 hour"}
_MEASURE_RX = re.compile(r"\b(?:a |an )?(" + "|".join(sorted((re.escape(k) for k in _MEASURES), key=len,
                                                              reverse=True)) + r")\b", re.I)

_UNIT_KIND = {
    "second": "time", "minute": "time", "hour": "time", "day": "time", "week": "time", "month": "time",
    "year": "time", "$": "money", "usd": "money", "dollar": "money", "cent": "money", "€": "money",
    "eur": "money", "euro": "money", "£": "money", "gbp": "money", "pound": "money", "p": "money",
    "pence": "money", "%": "percent", "percent": "percent", "gb": "data", "mb": "data", "tb": "data",
    "mbps": "speed", "gbps": "speed", "kwh": "energy",
}
_NUM = r"\d+(?:[.,]\d+)*"
_QUANTITY = re.compile(
    r"(?P<cur>[$€£])\s?(?P<amt>" + _NUM + r")"
    r"|(?P<num>" + _NUM + r")(?:\s?(?:to|-|–|or)\s?(?P<num2>" + _NUM + r"))?\s?(?P<unit>%|percent|gb|mb|tb|mbps|gbps|kwh|usd|eur|gbp|dollars?|cents?|euros?|"
    r"pounds?|pence|p(?=\W|$)|(?:business |working |calendar |banking )?"
    r"(?:seconds?|minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?))(?:(?<=%)|\b)",  # "%" has no word edge
    re.IGNORECASE,
)
_DATE = re.compile(r"\b(19|20)\d\d-\d\d(?:-\d\d)?\b")
_CLOCK = re.compile(r"\b(\d{1,2})(?::(\d\d))?\s?(am|pm|a\.m\.|p\.m\.)|\b(\d{1,2}):(\d\d)\b", re.I)
_BARE = re.compile(r"(?<![\w.])" + _NUM + r"(?![\w])")


@dataclass(frozen=True)
class Quantity:
    value: str  # canonical number text ("10", "7.5"); pence are pounds ("0.75")
    kind: str  # time | money | percent | data | speed | energy | number | date | clock
    unit: str = field(default="", compare=False)  # the unit word, singular ("month" in "24 months")

    def __str__(self) -> str:
        return f"{self.value} ({self.kind})"


def _canon(num: str) -> str:
    n = num.replace(",", "")
    if "." in n:
        n = n.rstrip("0").rstrip(".")
    return n or "0"


def _unit_base(unit: str) -> str:
    """The unit word, singular and whole: "business days" is "day", "hrs" is "hour"."""
    u = unit.lower().split()[-1]
    u = {"mins": "minute", "min": "minute", "hrs": "hour", "hr": "hour"}.get(u, u)
    return u[:-1] if u.endswith("s") and u not in ("gbps", "mbps", "pence") else u


def _unit_kind(unit: str) -> str:
    return _UNIT_KIND.get(_unit_base(unit), "number")


# text2num keeps numbers below this as words: "two guest tickets" is 2 tickets, but "one" stays a word
# ("no one", "the two-year one").
_WORDS_BELOW = 1.5


def _after_figure(preceding: str) -> bool:
    """Whether the text ends in a figure, its unit or what it counts ("£5", "20 GB", "five
    pounds", "50 parcels", "three guest visits"): within its last three words, in one clause."""
    words: list[str] = []
    for w in reversed(preceding.split()[-3:]):
        if w[-1] in ",;:.!?":  # "£5, a month later": the clause broke
            break
        words.insert(0, w)
    if not words:
        return False
    if _unit_base(words[-1]) in _UNIT_KIND:
        return True
    return any(ch.isdigit() for ch in _as_digits(" ".join(words), threshold=0))


# The spoken measures that are one unit of time ("a month"): after a figure, a rate basis instead.
_ONE_TIME_UNIT = {k for k, v in _MEASURES.items() if v.startswith("1 ") and _unit_kind(v.split()[1]) == "time"}


def _measure(m: re.Match[str]) -> str:
    """A spoken measure as a figure; but "a month" after a figure is what it is counted per
    ("£5 a month", "2 hours a day"), not a length of time, so its words stay."""
    key = m.group(1).lower()
    if key in _ONE_TIME_UNIT and _after_figure(m.string[:m.start()]):
        return m.group(0)
    return _MEASURES[key]


def _as_digits(text: str, threshold: float) -> str:
    """Number words as digits (text2num), numbers below `threshold` kept as words; unparseable
    number words stay words."""
    try:
        return alpha2digit(text, "en", threshold=threshold)
    except Exception:  # noqa: BLE001 - text2num raises on some word runs it cannot read
        return text


@lru_cache(maxsize=4096)
def words_to_digits(text: str) -> str:
    """'eighteen months' -> '18 months', 'a fortnight' -> '14 days'; other words are kept."""
    return _as_digits(_MEASURE_RX.sub(_measure, text), _WORDS_BELOW)


# A price as it is said ("7 pounds 50", "2 dollars and 50 cents"), from digits: as it is printed.
_SPOKEN_PRICE = re.compile(r"\b(\d+) (pound|dollar|euro)s?(?: and)? (\d{1,2})(?: (?:pence|p|cents?))?\b", re.I)
_SYMBOL = {"pound": "£", "dollar": "$", "euro": "€"}


def spoken_prices(text: str, changes: list[str] | None = None) -> str:
    """'7 pounds 50' -> '£7.50', '2 dollars and 50 cents' -> '$2.50' (each rewrite noted in `changes`)."""
    def written(m: re.Match[str]) -> str:
        new = f"{_SYMBOL[m.group(2).lower()]}{m.group(1)}.{int(m.group(3)):02d}"
        if changes is not None:
            changes.append(f"money: {m.group(0)} -> {new}")
        return new
    return _SPOKEN_PRICE.sub(written, text)


def _money_value(num: str, unit: str) -> str:
    value = _canon(num)
    if unit.lower() in ("p", "pence", "cent", "cents"):
        return _canon(f"{float(value) / 100:.4f}")
    return value


def quantities(text: str) -> list[Quantity]:
    """Numbers with their kind; dates and clock times as whole tokens; bare numbers as 'number'."""
    t = spoken_prices(words_to_digits(text))
    found: list[Quantity] = []
    spans: list[tuple[int, int]] = []
    for rx, kind in ((_DATE, "date"), (_CLOCK, "clock")):
        for m in rx.finditer(t):
            if not any(s <= m.start() < e for s, e in spans):
                found.append(Quantity(_clock(m) if kind == "clock" else m.group(0), kind))
                spans.append(m.span())
    for m in _QUANTITY.finditer(t):
        if any(s <= m.start() < e for s, e in spans):
            continue
        if m.group("cur"):
            found.append(Quantity(_canon(m.group("amt")), "money"))
        else:  # "5 to 10 business days": both ends are durations
            kind = _unit_kind(m.group("unit"))
            for num in filter(None, (m.group("num"), m.group("num2"))):
                found.append(Quantity(_money_value(num, m.group("unit")) if kind == "money" else _canon(num), kind,
                                      _unit_base(m.group("unit"))))
        spans.append(m.span())
    for m in _BARE.finditer(t):
        if not any(s <= m.start() < e for s, e in spans):
            found.append(Quantity(_canon(m.group(0)), "number"))
    return found


def _clock(m: re.Match[str]) -> str:
    if m.group(4):
        return f"{int(m.group(4))}:{m.group(5)}"
    hour = int(m.group(1)) % 12 + (12 if m.group(3).lower().startswith("p") else 0)
    return f"{hour}:{m.group(2) or '00'}"


# A month as 30 days and a year as 12 months: enough to tell that "two years" is "24 months".
_DAYS = {"day": 1, "week": 7, "month": 30, "year": 360}


def durations(text: str) -> set[float]:
    """The lengths of time a text states, in days, however written: "the two-year one", "a one year
    contract" and a facet value `24_month` all state 720."""
    # "one year" too: only numbers before a unit count here
    t = _as_digits(text.replace("-", " ").replace("_", " "), threshold=0)
    return {float(q.value) * _DAYS[q.unit] for q in quantities(t) if q.kind == "time" and q.unit in _DAYS}


def number_values(text: str) -> set[str]:
    """Every number the text contains, as canonical strings (dates and times split into parts too)."""
    values: set[str] = set()
    for q in quantities(text):
        values.add(q.value)
        if q.kind in ("date", "clock"):
            values.update(p.lstrip("0") or "0" for p in q.value.replace(":", "-").split("-"))
    return values


def unsupported_numbers(message: str, sources: list[str]) -> list[str]:
    """Numbers the message states that none of the source texts contains."""
    allowed: set[str] = set()
    for s in sources:
        allowed |= number_values(s)
    return [str(q) for q in quantities(message) if q.value not in allowed]
