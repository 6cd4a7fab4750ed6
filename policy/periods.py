"""The time ahead a caller asks about ("next April", "from January", "next month", "next year", "in 2027").

A question about a time when a page not yet in force will apply cannot be answered from today's
page: the figure may change by then. Only what calendars fix is read here (month names from the
standard library, a year, "next month", "next year"); the KB's own effective dates say what applies
when."""
from __future__ import annotations

import calendar
import datetime as dt

from .language import normalize_text

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}

Period = tuple[dt.date, dt.date]  # first and last day


def _month(year: int, month: int) -> Period:
    return dt.date(year, month, 1), dt.date(year, month, calendar.monthrange(year, month)[1])


def _year(year: int) -> Period:
    return dt.date(year, 1, 1), dt.date(year, 12, 31)


def _words(text: str) -> list[str]:
    return [w.strip(".,;:!?'\"()") for w in normalize_text(text).split()]


def _named_year(words: list[str], i: int, today: dt.date) -> int | None:
    """The year said right after position i ("April 2027", "January next year"), if any."""
    nxt = words[i + 1:i + 3]
    if nxt[:1] and nxt[0].isdigit() and len(nxt[0]) == 4:
        return int(nxt[0])
    if nxt == ["next", "year"]:
        return today.year + 1
    return None


def asked_periods(text: str, today: dt.date) -> list[Period]:
    """The periods after today that the caller names, each as its first and last day. A month
    without a year is its next coming ("April" said in December is next April), but "this" month
    is this year's and "last" month is past. "May" is a month only "in May" or "next May"."""
    words = _words(text)
    out: list[Period] = []
    for i, w in enumerate(words):
        before = words[i - 1] if i else ""
        if w in _MONTHS and (w != "may" or before in ("in", "next")) and before != "last":
            month = _MONTHS[w]
            coming = today.year if month > today.month or before == "this" else today.year + 1
            out.append(_month(_named_year(words, i, today) or coming, month))
        elif w == "year" and before == "next" and not (i > 1 and words[i - 2] in _MONTHS):
            out.append(_year(today.year + 1))
        elif w == "month" and before == "next":
            out.append(_month(today.year + today.month // 12, today.month % 12 + 1))
        elif len(w) == 4 and w.isdigit() and today.year < int(w) <= today.year + 10 \
                and not (i and words[i - 1] in _MONTHS):
            out.append(_year(int(w)))
    return [p for p in out if p[1] > today]


def in_force_during(start: dt.date | None, until: dt.date | None, period: Period) -> bool:
    """Whether a page in force from `start` (and `until`, if set) applies during `period`."""
    return start is not None and start <= period[1] and (until is None or until >= period[0])
