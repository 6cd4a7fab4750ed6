"""Speech text rules: `speakable(text)` rewrites written text (amounts, dates, times, codes, units,
abbreviations) into words a TTS voice reads naturally; `split_sentences(text)` cuts it into
sentences so the first one can play while the rest renders."""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable


_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]
_MONTH_ABBR = {m[:3].lower(): m for m in _MONTHS} | {"sept": "September"}
_DAYS = {"mon": "Monday", "tue": "Tuesday", "tues": "Tuesday", "wed": "Wednesday",
         "thu": "Thursday", "thur": "Thursday", "thurs": "Thursday", "fri": "Friday",
         "sat": "Saturday", "sun": "Sunday"}
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"),
             "€": ("euro", "euros", "cent", "cents"),
             "£": ("pound", "pounds", "penny", "pence")}
_SIZE_UNITS = {"kb": "kilobyte", "mb": "megabyte", "gb": "gigabyte", "tb": "terabyte"}
_RATE_UNITS = {"kbps": "kilobits per second", "mbps": "megabits per second",
               "gbps": "gigabits per second"}
# Acronyms the voice would otherwise read as a word ("APN" -> "apen"); hyphens make it
# say the letters. Acronyms it already reads well (SMS, PIN, PUK, VPN, ID) are left alone.
_SPELLED = ["APN", "APNs", "IMEI", "FAQ", "FAQs", "OTP", "ACH", "ETA", "2FA", "MFA", "ICCID", "IMSI"]
_WORDS = [  # (pattern, replacement); patterns are case-sensitive unless they say (?i)
    (r"\beSIMs\b", "e-sims"), (r"\beSIM\b", "e-sim"), (r"(?i)\be-sim(s?)\b", r"e-sim\1"),
    (r"\bSIMs\b", "sims"), (r"\bSIM\b", "sim"),
    (r"(?i)\bwi-?fi\b", "Wi-Fi"),
    (r"(?i)\be\.g\.(?=\s|,|$)", "for example"), (r"(?i)\bi\.e\.(?=\s|,|$)", "that is"),
    (r"(?i)\betc\.(?=\s*$)", "et cetera."), (r"(?i)\betc\.", "et cetera"),
    (r"(?i)\bapprox\.(?=\s)", "approximately"), (r"\bvs\.?(?=\s)", "versus"),
    (r"(?i)\bT&Cs?\b", "terms and conditions"), (r"\bQ&A\b", "Q and A"),
    (r"\bw/o\b", "without"), (r"\bw/(?=\s)", "with"), (r"(?i)\bn/a\b", "not applicable"),
    (r"\b24/7\b", "24 7"), (r"\bNo\.\s*(?=\d)", "number "),
    (r"(?<=\d)\s*hrs?\b", " hours"), (r"(?<=\d)\s*mins?\b", " minutes"),
    (r"(?<=\d)\s*secs?\b", " seconds"), (r"(?<=\d)\s*(?:GHz|ghz)\b", " gigahertz"),
    (r"(?<=\d)\s*MHz\b", " megahertz"),
    (r"\bUSD\s*(?=\d)", "$"), (r"(?<=\d)\s*USD\b", " dollars"), (r"\bEUR\s*(?=\d)", "€"),
]


def _ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def _digits(s: str) -> str:
    """'0199' -> '0 1 9 9': codes and phone numbers are read digit by digit."""
    return " ".join(ch for ch in s if ch.isdigit())


def _strip_markdown(text: str) -> str:
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)  # [label](url) -> label
    text = re.sub(r"`+([^`]*)`+", r"\1", text)
    text = re.sub(r"(\*\*|__)(.+?)\1", r"\2", text)
    text = re.sub(r"(?m)^\s{0,3}#{1,6}\s+", "", text)       # headings
    text = re.sub(r"(?m)^\s*(?:[-*+•]|\d+[.)])\s+", "", text)  # list bullets
    # A line break ends a spoken phrase: give lines without end punctuation a full stop.
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " ".join(ln if ln[-1] in ".!?:;," else ln + "." for ln in lines)


def _say_url(m: re.Match) -> str:
    s = re.sub(r"^https?://", "", m.group(0))
    s = re.sub(r"^www\.", "", s).rstrip("/")
    return s.replace(".", " dot ").replace("/", " slash ").replace("-", " dash ")


def _say_email(m: re.Match) -> str:
    user, domain = m.group(1), m.group(2)
    return f"{user.replace('.', ' dot ')} at {domain.replace('.', ' dot ')}"


def _say_code(m: re.Match) -> str:
    """USSD/star codes: '*#100#' -> 'star hash 1 0 0 hash'."""
    words = {"*": "star", "#": "hash"}
    out = [words.get(ch, ch) for ch in m.group(0)]
    return " ".join(out)


def _say_phone(m: re.Match) -> str:
    groups = [g for g in re.split(r"[^\d+]+", m.group(0)) if g]
    spoken = []
    for g in groups:
        prefix = "plus " if g.startswith("+") else ""
        spoken.append(prefix + _digits(g))
    return ", ".join(spoken)


def _say_date(year: int, month: int, day: int | None) -> str | None:
    try:
        dt.date(year, month, day or 1)
    except ValueError:
        return None
    if day is None:
        return f"{_MONTHS[month - 1]} {year}"
    return f"{_MONTHS[month - 1]} {_ordinal(day)}, {year}"


def _say_time(hour: int, minute: int, suffix: str | None) -> str | None:
    if hour > 23 or minute > 59:
        return None
    if suffix:
        half = "AM" if suffix[0].lower() == "a" else "PM"
        h12 = hour
    elif hour == 0 and minute == 0:
        return "midnight"
    elif hour == 12 and minute == 0:
        return "noon"
    else:
        half = "AM" if hour < 12 else "PM"
        h12 = hour % 12 or 12
    if minute == 0:
        mins = ""
    elif minute < 10:
        mins = f" oh {minute}"
    else:
        mins = f" {minute}"
    return f"{h12}{mins} {half}"


def _time_sub(m: re.Match) -> str:
    hour, minute = int(m.group("h")), int(m.group("m") or 0)
    suffix = m.group("ap") or ""
    if m.group("m") is None and not suffix:
        return m.group(0)
    said = _say_time(hour, minute, suffix)
    if said is None:
        return m.group(0)
    if not suffix and hour < 13 and not m.group("h").startswith("0") and hour != 0:
        # "9:30" with no am/pm and no 24-hour hint: do not guess the half of the day.
        said = f"{hour} o'clock" if minute == 0 else said.rsplit(" ", 1)[0]
        if hour == 12 and minute == 0:
            said = "noon"
    if suffix.endswith(".") and re.match(r"\s*$|\s+[A-Z]", m.string[m.end():]):
        said += "."  # "a.m." also ended the sentence
    return said


def _money_sub(m: re.Match) -> str:
    sym, whole, frac = m.group("sym"), m.group("whole").replace(",", ""), m.group("frac")
    one, many, c_one, c_many = _CURRENCY[sym]
    scale = m.group("scale")
    if scale:  # "$1.5 million" -> "1.5 million dollars"
        return f"{whole}{'.' + frac if frac else ''} {scale} {many}"
    n = int(whole)
    cents = int((frac or "0").ljust(2, "0")[:2])
    parts = []
    if n or not cents:
        parts.append(f"{n} {one if n == 1 else many}")
    if cents:
        parts.append(f"{cents} {c_one if cents == 1 else c_many}")
    return " and ".join(parts)


_CODE_WORDS = (r"(?i:code|codes|PIN|PUK|pin|puk|account|reference|ref|order|ticket|case|extension|"
               r"ext\.?|dial|call|number|ID|confirmation|voucher|serial)")

_RULES: list[tuple[re.Pattern, "str | Callable[[re.Match], str]"]] = [
    # emails and web addresses
    (re.compile(r"\b([\w.+-]+)@([\w-]+(?:\.[\w-]+)+)\b"), _say_email),
    (re.compile(r"\b(?:https?://|www\.)[^\s,;]+[^\s,;.!?)]", re.I), _say_url),
    (re.compile(r"\b[a-z0-9-]+\.(?:com|org|net|io|co\.uk)(?:/[^\s,;]*[^\s,;.!?)])?\b"), _say_url),
    # USSD / star codes: contain '*' or end with '#'
    (re.compile(r"(?<![\w*#])(?=[*#\d]*\*|[*#][\d*#]*#)[*#][\d*#]*[\d#]"), _say_code),
    # "#5" on its own is "number 5"
    (re.compile(r"(?<![\w#])#(\d+)\b"), lambda m: f"number {m.group(1)}"),
    # phone numbers: +1 (555) 123-4567, 1-800-555-0199, 555-123-4567, +44 20 7946 0958
    (re.compile(r"(?<![\w$])(?:\+\d{1,3}[\s.-]?)?(?:\b1[\s.-])?\(?\b\d{3}\)?[\s.-]\d{3}[\s.-]\d{4}\b"),
     _say_phone),
    (re.compile(r"(?<![\w$])\+\d{1,3}(?:[\s.-]\d{2,5}){2,4}\b"), _say_phone),
    (re.compile(r"(?<![\w$.,-])\b\d{3}-\d{4}\b(?![\w-])"), _say_phone),
    # ISO dates and year-months: 2026-02-01, version 2026-02
    (re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)\b"),
     lambda m: _say_date(int(m.group(1)), int(m.group(2)), int(m.group(3))) or m.group(0)),
    (re.compile(r"\b((?:19|20)\d\d)-(\d\d)\b(?!-)"),
     lambda m: _say_date(int(m.group(1)), int(m.group(2)), None) or m.group(0)),
    # US dates 02/01/2026
    (re.compile(r"\b(\d{1,2})/(\d{1,2})/((?:19|20)\d\d)\b"),
     lambda m: _say_date(int(m.group(3)), int(m.group(1)), int(m.group(2))) or m.group(0)),
    # "Feb 1" / "February 1" / "1 February" -> "February 1st"
    (re.compile(r"\b(" + "|".join(_MONTHS) + r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\.?\s+"
                r"(\d{1,2})(?:st|nd|rd|th)?\b(?!:|\d)"),
     lambda m: f"{_MONTH_ABBR[m.group(1)[:4].lower() if m.group(1).lower().startswith('sept') else m.group(1)[:3].lower()]} "
               f"{_ordinal(int(m.group(2)))}" if 1 <= int(m.group(2)) <= 31 else m.group(0)),
    (re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(" + "|".join(_MONTHS) + r")\b"),
     lambda m: f"{m.group(2)} {_ordinal(int(m.group(1)))}" if 1 <= int(m.group(1)) <= 31 else m.group(0)),
    # weekday ranges: Mon-Fri
    (re.compile(r"\b(" + "|".join(_DAYS) + r")\.?\s*[-–—]\s*(" + "|".join(_DAYS) + r")\b", re.I),
     lambda m: f"{_DAYS[m.group(1).lower()]} to {_DAYS[m.group(2).lower()]}"),
    # times: 9am, 9:30 pm, 14:30, 08:00
    (re.compile(r"\b(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ap>[ap]\.?m\.?)(?![a-z])", re.I), _time_sub),
    (re.compile(r"\b(?P<h>\d{1,2}):(?P<m>\d{2})(?P<ap>)(?![\d:])"), _time_sub),
    # alphanumeric references: ORD-12345, AB123456
    (re.compile(r"\b([A-Z]{2,4})-?(\d{3,})\b"),
     lambda m: f"{'-'.join(m.group(1))} {_digits(m.group(2))}"),
    # ranges: 5-10 days, $10-$20, 10–20%, 2020-2025 (dates and phones are already words)
    (re.compile(r"(?<![\w.-])([$€£]?\d+(?:[.,]\d+)*\s*(?:%|AM|PM)?)\s*(?:-|–|—|to)\s*(?=[$€£]?\d)(?![$€£]?\d+[-–]\d)"),
     lambda m: f"{m.group(1).strip()} to "),
    # money
    (re.compile(r"(?P<sym>[$€£])\s?(?P<whole>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d{1,2}))?"
                r"(?:\s*(?P<scale>million|billion|thousand|k)\b)?(?!\d)"),
     lambda m: _money_sub(m) if m.group("scale") != "k" else f"{m.group('whole')} thousand "
                                                                f"{_CURRENCY[m.group('sym')][1]}"),
    # "per" for units after amounts: "10 dollars/month" -> "10 dollars per month"
    (re.compile(r"(?<=[a-z\d])\s*/\s*(month|mo|year|yr|day|week|hour|minute|GB|MB|line|user)\b"),
     lambda m: " per " + {"mo": "month", "yr": "year"}.get(m.group(1), m.group(1))),
    (re.compile(r"(\d)\s*%"), r"\1 percent"),
    # data sizes and rates: 10GB, 1 GB, 100 Mbps, "per GB"
    (re.compile(r"\b(\d+(?:\.\d+)?)\s*(kbps|Mbps|mbps|Gbps|gbps)\b"),
     lambda m: f"{m.group(1)} {_RATE_UNITS[m.group(2).lower()]}"),
    (re.compile(r"\b(\d+(?:\.\d+)?)\s*(KB|kB|MB|GB|TB)\b"),
     lambda m: f"{m.group(1)} {_SIZE_UNITS[m.group(2).lower()]}{'' if m.group(1) == '1' else 's'}"),
    (re.compile(r"\b(KB|MB|GB|TB)\b"), lambda m: _SIZE_UNITS[m.group(1).lower()]),
    (re.compile(r"\b(Mbps|Gbps|kbps)\b"), lambda m: _RATE_UNITS[m.group(1).lower()]),
    # codes after a keyword ("PIN 0000", "call 611", "order number 123456") digit by digit
    (re.compile(r"\b(" + _CODE_WORDS + r"(?:\s+(?:number|code|is|was|:))*\s*:?\s+)(\d{3,})\b(?![.,]\d)"
                r"(?!\s*(?:dollars?|euros?|pounds?|cents?|percent|[a-z]*bytes?|minutes?|hours?|days?|"
                r"months?|years?|messages?|texts?|calls?|points?|times?))"),
     lambda m: m.group(1) + _digits(m.group(2))),
    # long bare digit strings and numbers with leading zeros are identifiers, not amounts
    (re.compile(r"(?<![\d.,$€£])\b(0\d+|\d{6,})\b(?![.,]\d)"), lambda m: _digits(m.group(1))),
]


def speakable(text: str) -> str:
    """Rewrite written text into what a TTS voice should say.

    "$25.50" -> "25 dollars and 50 cents"; "5-10 business days" -> "5 to 10 business days";
    "2026-02-01" -> "February 1st, 2026"; "*#100#" -> "star hash 1 0 0 hash"; "10GB" ->
    "10 gigabytes"; "APN" -> "A-P-N". Digits stay digits: the voice reads numbers itself.
    """
    text = _strip_markdown(text)
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    for word_pattern, word in _WORDS:
        text = re.sub(word_pattern, word, text)
    for word in _SPELLED:
        letters = word.rstrip("s") if word.endswith("s") and word[:-1] in _SPELLED else word
        plural = "s" if letters != word else ""
        text = re.sub(rf"\b{re.escape(word)}\b", "-".join(letters) + plural, text)
    text = text.replace("&", " and ").replace("~", "about ").replace("→", ", then ")
    text = re.sub(r"\s*[()\[\]]\s*", ", ", text)  # parentheses read as a short pause
    text = re.sub(r"\s+([,.;:!?])", r"\1", text)
    text = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", text)
    text = re.sub(r"^[,;:\s]+|(?<=[.!?])\s*,", "", text)
    text = re.sub(r"[,;:]\s*(?=[.!?])", "", text)
    return re.sub(r"\s{2,}", " ", text).strip()


# Words ending in "." that do not end a sentence.
_NO_BREAK = {"mr", "mrs", "ms", "dr", "st", "no", "vs", "etc", "e.g", "i.e", "approx", "inc",
             "ltd", "jr", "sr", "a.m", "p.m", "u.s", "fig"}
_MAX_SENTENCE = 220  # characters; longer sentences are cut at ';' or ', ' for faster first audio


def split_sentences(text: str) -> list[str]:
    """Cut text into sentences at . ! ? (and line breaks), keeping abbreviations and decimals whole."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n|\n(?=\s*(?:[-*•]|\d+[.)])\s)", text):
        buf = ""
        for piece in re.split(r"(?<=[.!?])[\"')\]]*\s+", para.strip()):
            if not piece:
                continue
            buf = f"{buf} {piece}".strip() if buf else piece
            last = buf.rsplit(None, 1)[-1].rstrip(".").lower() if buf.endswith(".") else ""
            if last in _NO_BREAK or re.fullmatch(r"[a-z]", last or "-"):
                continue  # "e.g." or an initial: not a sentence end
            out.extend(_cut_long(" ".join(buf.split())))
            buf = ""
        if buf:
            out.extend(_cut_long(" ".join(buf.split())))
    out = [re.sub(r"^(?:[-*•]|\d+[.)])\s+", "", s) for s in out]  # list bullets are not spoken
    return [s for s in out if re.search(r"\w", s)]


def _cut_long(sentence: str) -> list[str]:
    if len(sentence) <= _MAX_SENTENCE:
        return [sentence]
    for sep in ("; ", ", "):
        parts = sentence.split(sep)
        if len(parts) > 1:
            mid = len(parts) // 2
            head = sep.join(parts[:mid]) + ("." if sep == "; " else ",")
            return _cut_long(head) + _cut_long(sep.join(parts[mid:]))
    return [sentence]


def quick_start(sentences: list[str]) -> list[str]:
    """Render a long first sentence in two pieces, cut at its first comma: piper renders a
    sentence whole, so a shorter first piece means the caller hears audio sooner."""
    if not sentences:
        return sentences
    first = sentences[0]
    m = re.search(r",\s", first)
    if m and len(first.split()) > 6 and len(first[: m.start()].split()) >= 2 \
            and len(first[m.end():].split()) >= 2:
        return [first[: m.start() + 1], first[m.end():], *sentences[1:]]
    return sentences
