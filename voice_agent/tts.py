"""Text to speech, MIT side: speech text formatting and a client for the piper worker process.

piper-tts is GPL-3.0, so it never runs in this process: `TtsClient` starts
`python -m voice_agent.tts_worker` and speaks the frame protocol documented in that module.
This module imports no piper code.

- `speakable(text)` rewrites written text (amounts, dates, codes, units, abbreviations) into
  words a TTS voice reads naturally; `split_sentences(text)` cuts it into sentences so the
  first sentence can play while the rest renders.
- `TtsClient.synthesize(text)` yields one `TtsChunk` per rendered sentence, lazily. A dead or
  stuck worker is restarted once and the current request raises `TtsUnavailable`, so the
  caller can degrade (e.g. to a transfer); the next request uses the restarted worker.
- `TtsPool(size)` spreads concurrent requests over several workers.
"""
from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import os
import queue
import re
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Iterator, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

LOG = logging.getLogger(__name__)
_ROOT = Path(__file__).resolve().parent.parent
# The worker runs at a lower CPU priority than the agent: when calls contend for the cores, a
# caller's transcription (everything else waits on it) goes first, and rendering takes the rest.
TTS_NICE = 10


class TtsUnavailable(RuntimeError):
    """The TTS worker could not render this request (dead, stuck or failing)."""


class TtsChunk(BaseModel):
    """Rendered audio of one sentence (or of one piper chunk of a long sentence)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pcm: np.ndarray  # int16 mono
    sample_rate: int
    sentence_index: int
    text: str

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / float(self.sample_rate)


# --------------------------------------------------------------------------------------------
# Speech text formatting
# --------------------------------------------------------------------------------------------

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

_RULES: list[tuple[re.Pattern, Any]] = [
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
    for pattern, repl in _WORDS:
        text = re.sub(pattern, repl, text)
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


def _quick_start(sentences: list[str]) -> list[str]:
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


# --------------------------------------------------------------------------------------------
# Worker client
# --------------------------------------------------------------------------------------------

_EOF = object()


def _lower_priority(n: int) -> None:  # runs in the child, before exec
    try:
        os.nice(n)
    except OSError:
        pass


class _Worker:
    """One running worker process and the thread that reads its frames into a queue."""

    def __init__(self, voice: str, python: str, nice: int = 0, threads: int = 0) -> None:
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [python, "-m", "voice_agent.tts_worker", "--voice", voice, "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env, cwd=str(_ROOT),
            preexec_fn=(lambda: _lower_priority(nice)) if nice else None,
        )
        self.frames: queue.Queue = queue.Queue()
        self.ready: dict | None = None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True,
                                        name=f"tts-reader-{self.proc.pid}")
        self._reader.start()

    def _read(self, out: IO[bytes]) -> None:
        try:
            while True:
                head = out.read(4)
                if len(head) < 4:
                    break
                (n,) = struct.unpack(">I", head)
                header = json.loads(out.read(n))
                size = int(header.get("bytes", 0))
                payload = out.read(size) if size else b""
                if len(payload) < size:
                    break
                self.frames.put((header, payload))
        except (OSError, ValueError) as exc:
            LOG.warning("tts worker %s: bad frame stream: %s", self.proc.pid, exc)
        self.frames.put((_EOF, b""))

    def send(self, obj: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj) + "\n").encode("utf-8"))
        self.proc.stdin.flush()

    def next_frame(self, timeout: float) -> tuple[dict, bytes]:
        try:
            header, payload = self.frames.get(timeout=timeout)
        except queue.Empty:
            raise TtsUnavailable(f"TTS worker {self.proc.pid} sent nothing for {timeout:.0f} s") from None
        if header is _EOF:
            self.frames.put((_EOF, b""))  # stay at EOF for later readers
            raise TtsUnavailable(f"TTS worker {self.proc.pid} exited (code {self.proc.poll()})")
        return header, payload

    def wait_ready(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while self.ready is None:
            header, _ = self.next_frame(max(0.01, deadline - time.monotonic()))
            if header.get("kind") == "ready":
                self.ready = header
        return self.ready

    def stop(self, grace_s: float = 2.0) -> None:
        try:
            self.send({"op": "quit"})
            self.proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


class TtsClient:
    """Talks to one piper worker process. Thread-safe: one request at a time per worker.

    Finish or close a `synthesize()` iterator before starting the next request on the same
    thread: the worker's lock is held while the iterator is open.
    """

    def __init__(self, voice: str = "joe", start_timeout_s: float = 20.0,
                 frame_timeout_s: float = 15.0, python: str | None = None, nice: bool = True,
                 threads: int = 0) -> None:
        self.voice = voice
        self.nice = nice
        self.threads = threads  # onnxruntime threads in the worker (0: one per core)
        self.start_timeout_s = start_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.python = python or sys.executable
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._ids = itertools.count(1)
        self.restarts = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "TtsClient":
        """Start the worker (if not running) and wait until its voice is loaded."""
        with self._lock:
            self._ensure_ready()
        return self

    def _spawn(self) -> None:
        try:
            self._worker = _Worker(self.voice, self.python, TTS_NICE if self.nice else 0, self.threads)
        except OSError as exc:
            self._worker = None
            raise TtsUnavailable(f"cannot start TTS worker ({self.python}): {exc}") from exc

    def _ensure_ready(self) -> _Worker:
        if self._worker is not None and self._worker.proc.poll() is not None:
            LOG.warning("TTS worker %s had exited (code %s); starting a new one",
                        self._worker.proc.pid, self._worker.proc.returncode)
            self._discard()
            self.restarts += 1
        if self._worker is None:
            self._spawn()
        worker = self._worker
        assert worker is not None
        try:
            worker.wait_ready(self.start_timeout_s)
        except TtsUnavailable as exc:
            self._discard()
            raise TtsUnavailable(f"TTS worker did not start: {exc}") from None
        return worker

    def _discard(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None and worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(timeout=5)

    def _fail(self, reason: str) -> TtsUnavailable:
        """Kill the broken worker, launch its replacement now (it loads while the caller
        degrades), and return the error for the current request."""
        LOG.warning("TTS worker failed (%s); restarting it", reason)
        self._discard()
        self.restarts += 1
        try:
            self._spawn()
        except TtsUnavailable as exc:
            return TtsUnavailable(f"{reason}; restart failed: {exc}")
        return TtsUnavailable(reason)

    def close(self) -> None:
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    def __enter__(self) -> "TtsClient":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None when no worker runs)."""
        return self._worker.proc.pid if self._worker else None

    @property
    def sample_rate(self) -> int:
        with self._lock:
            return int(self._ensure_ready().ready["sample_rate"])  # type: ignore[index]

    # -- requests ----------------------------------------------------------------------------
    def ping(self, timeout_s: float = 5.0) -> float:
        """Round trip to the worker in seconds; raises TtsUnavailable if it does not answer."""
        with self._lock:
            worker = self._ensure_ready()
            rid = f"ping-{next(self._ids)}"
            started = time.perf_counter()
            try:
                worker.send({"op": "ping", "id": rid})
                deadline = started + timeout_s
                while True:
                    header, _ = worker.next_frame(max(0.01, deadline - time.perf_counter()))
                    if header.get("kind") == "pong" and header.get("id") == rid:
                        return time.perf_counter() - started
            except (OSError, TtsUnavailable) as exc:
                raise self._fail(f"ping failed: {exc}") from None

    def synthesize(self, text: str, *, normalize: bool = True, length_scale: float | None = None,
                   noise_scale: float | None = None,
                   noise_w_scale: float | None = None) -> Iterator[TtsChunk]:
        """Yield the speech of `text` sentence by sentence, each as soon as it is rendered.

        `normalize` runs `speakable()` first. `length_scale` > 1 speaks slower; noise scales
        of 0 make the audio reproducible (piper samples noise otherwise). Raises
        TtsUnavailable if the worker dies, stalls or reports an error (the worker is
        restarted for the next request).
        """
        spoken = speakable(text) if normalize else text
        sentences = _quick_start(split_sentences(spoken))
        if not sentences:
            return
        with self._lock:
            worker = self._ensure_ready()
            rid = next(self._ids)
            request: dict[str, Any] = {"id": rid, "sentences": sentences}
            for key, value in (("length_scale", length_scale), ("noise_scale", noise_scale),
                               ("noise_w_scale", noise_w_scale)):
                if value is not None:
                    request[key] = value
            done = False
            try:
                worker.send(request)
                while True:
                    header, payload = worker.next_frame(self.frame_timeout_s)
                    if header.get("id") != rid:
                        continue  # leftovers of an abandoned earlier request
                    kind = header.get("kind")
                    if kind == "audio":
                        yield TtsChunk(pcm=np.frombuffer(payload, dtype="<i2").copy(),
                                       sample_rate=int(header["sample_rate"]),
                                       sentence_index=int(header["sentence"]),
                                       text=str(header.get("text", "")))
                    elif kind == "end":
                        done = True
                        return
                    elif kind == "error":
                        done = True
                        raise TtsUnavailable(f"TTS worker error: {header.get('message')}")
            except (OSError, TtsUnavailable) as exc:
                if done:
                    raise
                raise self._fail(str(exc) if isinstance(exc, TtsUnavailable)
                                 else f"TTS worker pipe broken: {exc}") from None
            finally:
                if not done and self._worker is worker and worker.proc.poll() is None:
                    # The caller stopped listening (barge-in): stop rendering the rest.
                    try:
                        worker.send({"op": "cancel", "id": rid})
                    except OSError:
                        pass

    def synthesize_all(self, text: str, **kw: Any) -> tuple[np.ndarray, int]:
        """The whole utterance as one int16 array plus its sample rate."""
        chunks = list(self.synthesize(text, **kw))
        if not chunks:
            return np.zeros(0, dtype=np.int16), self.sample_rate
        return np.concatenate([c.pcm for c in chunks]), chunks[0].sample_rate

    def synthesize_to(self, text: str, sample_rate: int = 16000,
                      encoding: Literal["pcm16", "mulaw"] = "pcm16", **kw: Any) -> Iterator[bytes]:
        """Like synthesize(), but each sentence resampled for the sink: PCM16 little-endian
        bytes or G.711 μ-law bytes at `sample_rate` (e.g. 8000 for a phone line)."""
        from voice_agent.audio import float_to_pcm16, mulaw_encode, resample

        if encoding not in ("pcm16", "mulaw"):
            raise ValueError(f"unknown encoding {encoding!r}; use 'pcm16' or 'mulaw'")
        for chunk in self.synthesize(text, **kw):
            x = chunk.pcm.astype(np.float32) / 32768.0
            if chunk.sample_rate != sample_rate:
                x = resample(x, chunk.sample_rate, sample_rate)
            yield float_to_pcm16(x) if encoding == "pcm16" else mulaw_encode(x)


class TtsPool:
    """Several workers for concurrent calls; each request takes whichever worker is free."""

    def __init__(self, size: int = 2, voice: str = "joe", **client_kw: Any) -> None:
        if size < 1:
            raise ValueError("TtsPool size must be at least 1")
        # Several workers on few cores render faster together on one onnxruntime thread each
        # (4 first sentences at once on 2 cores: 116-400 ms vs 380-570 ms with a thread per core).
        client_kw.setdefault("threads", 1 if size > 1 else 0)
        self.clients = [TtsClient(voice, **client_kw) for _ in range(size)]
        self._idle: queue.Queue[TtsClient] = queue.Queue()
        for c in self.clients:
            self._idle.put(c)

    def start(self) -> "TtsPool":
        with self._lock_all():
            for c in self.clients:  # spawn all first so they load in parallel
                if c._worker is None:
                    c._spawn()
            for c in self.clients:
                c._ensure_ready()
        return self

    def _lock_all(self) -> Any:
        from contextlib import ExitStack

        stack = ExitStack()
        for c in self.clients:
            stack.enter_context(c._lock)
        return stack

    def synthesize(self, text: str, *, wait_s: float = 30.0, **kw: Any) -> Iterator[TtsChunk]:
        try:
            client = self._idle.get(timeout=wait_s)
        except queue.Empty:
            raise TtsUnavailable(f"all {len(self.clients)} TTS workers busy for {wait_s:.0f} s") from None
        try:
            yield from client.synthesize(text, **kw)
        finally:
            self._idle.put(client)

    def close(self) -> None:
        for c in self.clients:
            c.close()

    def __enter__(self) -> "TtsPool":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
