"""Find the numbers, amounts, durations and dates a text asserts, in a comparable form.

Used by the pre-TTS recheck (every number spoken must stand in a cited section) and by conflict
detection (two current documents giving different figures for the same kind of quantity)."""
from __future__ import annotations

import re
from dataclasses import dataclass

_WORD_NUMS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fourteen": 14, "fifteen": 15, "twenty": 20,
    "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "ninety": 90, "hundred": 100,
}

_UNIT_KIND = {
    "second": "time", "minute": "time", "hour": "time", "day": "time", "week": "time", "month": "time",
    "year": "time", "business day": "time", "working day": "time",
    "$": "money", "usd": "money", "dollar": "money", "cent": "money", "€": "money", "eur": "money",
    "£": "money", "%": "percent", "percent": "percent", "gb": "data", "mb": "data", "tb": "data",
    "mbps": "speed", "gbps": "speed",
}

_NUM = r"\d+(?:[.,]\d+)*"
_QUANTITY = re.compile(
    r"(?P<cur>[$€£])\s?(?P<amt>" + _NUM + r")"
    r"|(?P<num>" + _NUM + r")\s?(?P<unit>%|percent|gb|mb|tb|mbps|gbps|usd|eur|dollars?|cents?|"
    r"(?:business |working |calendar )?(?:seconds?|minutes?|hours?|days?|weeks?|months?|years?))\b",
    re.IGNORECASE,
)
_DATE = re.compile(r"\b(19|20)\d\d-\d\d(?:-\d\d)?\b")
_BARE = re.compile(r"(?<![\w.])" + _NUM + r"(?![\w])")


@dataclass(frozen=True)
class Quantity:
    value: str  # canonical number text ("10", "7.50")
    kind: str  # time | money | percent | data | speed | number | date

    def __str__(self) -> str:
        return f"{self.value} ({self.kind})"


def _canon(num: str) -> str:
    n = num.replace(",", "")
    if "." in n:
        n = n.rstrip("0").rstrip(".")
    return n


def _unit_kind(unit: str) -> str:
    u = unit.lower().strip()
    u = re.sub(r"^(business|working|calendar) ", "", u)
    u = u[:-1] if u.endswith("s") and u not in ("gbps", "mbps") else u
    return _UNIT_KIND.get(u, "number")


def words_to_digits(text: str) -> str:
    """'five business days' -> '5 business days' (simple cardinals only; enough for KB prose)."""
    def repl(m: re.Match[str]) -> str:
        return str(_WORD_NUMS[m.group(0).lower()])
    return re.sub(r"\b(" + "|".join(_WORD_NUMS) + r")\b", repl, text, flags=re.IGNORECASE)


def quantities(text: str) -> list[Quantity]:
    """Numbers with their kind; dates as whole tokens; bare numbers as kind 'number'."""
    t = words_to_digits(text)
    found: list[Quantity] = []
    spans: list[tuple[int, int]] = []
    for m in _DATE.finditer(t):
        found.append(Quantity(m.group(0), "date"))
        spans.append(m.span())
    for m in _QUANTITY.finditer(t):
        if any(s <= m.start() < e for s, e in spans):
            continue
        if m.group("cur"):
            found.append(Quantity(_canon(m.group("amt")), "money"))
        else:
            found.append(Quantity(_canon(m.group("num")), _unit_kind(m.group("unit"))))
        spans.append(m.span())
    for m in _BARE.finditer(t):
        if any(s <= m.start() < e for s, e in spans):
            continue
        found.append(Quantity(_canon(m.group(0)), "number"))
    return found


def number_values(text: str) -> set[str]:
    """Every number the text contains, as canonical strings (dates split into their parts too)."""
    values: set[str] = set()
    for q in quantities(text):
        values.add(q.value)
        if q.kind == "date":
            values.update(p.lstrip("0") or "0" for p in q.value.split("-"))
    return values


def unsupported_numbers(message: str, sources: list[str]) -> list[str]:
    """Numbers the message states that none of the source texts contains."""
    allowed: set[str] = set()
    for s in sources:
        allowed |= number_values(s)
    missing = []
    for q in quantities(message):
        parts = [q.value] if q.kind != "date" else [q.value]
        if not any(p in allowed for p in parts):
            missing.append(str(q))
    return missing
