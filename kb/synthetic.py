"""A deterministic synthetic KB for benchmarks: real .md files with front matter.

Vocabulary mixes customer-service words (drawn often) with a long Zipf tail of made-up
product and feature names, so BM25 posting lists have realistic skew: a few very long
lists for common words, many short ones for rare terms.
"""
from __future__ import annotations

import random
from pathlib import Path

__all__ = ["write_synthetic_kb", "synthetic_queries"]

_DOMAIN = """
account plan annual monthly refund charge bill invoice payment card cancel cancellation fee
credit balance router modem reset factory wifi password network signal outage coverage roaming
data allowance gigabyte speed fibre broadband sim esim phone device upgrade contract renewal
discount promotion voucher store appointment engineer installation delivery return warranty repair
insurance claim porting number transfer business personal family student senior line voicemail
international calls texts minutes abroad europe travel pass daily weekly limit cap overage
autopay direct debit statement dispute fraud security verification identity login app portal
technician visit schedule reschedule missed complaint escalation compensation credit note
""".split()
_COMMON = """
customer customers service please must can within days business working hours team support
request requests apply applies eligible eligibility available option options using change
changes new existing current previous first next before after each per only also note
""".split()
_SYL = ["ka", "lo", "mi", "ne", "ra", "to", "vi", "sel", "dor", "fen", "gra", "lux", "pro",
        "tek", "zen", "max", "net", "fi", "ber", "on", "ix", "al", "ur", "em"]
_HEADINGS = ["Overview", "Eligibility", "How it works", "Fees", "Timing", "Exceptions",
             "Steps", "Troubleshooting", "Limits", "Contact", "Requirements", "Examples"]


def _tail_words(rng: random.Random, n: int) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(_SYL) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _zipf_cum(n: int, s: float = 1.1) -> list[float]:
    """Cumulative Zipf weights: `choices(cum_weights=...)` bisects instead of summing n weights."""
    out, acc = [], 0.0
    for i in range(n):
        acc += 1.0 / (i + 1) ** s
        out.append(acc)
    return out


def _sentence(rng: random.Random, topic: list[str], tail: list[str], tail_w: list[float]) -> str:
    words: list[str] = []
    for _ in range(rng.randint(8, 18)):
        r = rng.random()
        if r < 0.35:
            words.append(rng.choice(topic))
        elif r < 0.65:
            words.append(rng.choice(_COMMON))
        elif r < 0.8:
            words.append(rng.choice(_DOMAIN))
        elif r < 0.9:
            words.append(rng.choices(tail, cum_weights=tail_w)[0])
        else:
            words.append(str(rng.choice([5, 10, 14, 25, 30, 48, 60, 99])) + rng.choice(["", " days", " GB", " hours", ""]))
    s = " ".join(words)
    return s[0].upper() + s[1:] + "."


def write_synthetic_kb(root: Path, sections: int, seed: int = 7, per_doc: int = 5) -> Path:
    """Write about `sections` sections (`per_doc` per file, spread over topic folders)."""
    rng = random.Random(seed)
    tail = _tail_words(rng, 20000)
    tail_w = _zipf_cum(len(tail))
    root = Path(root)
    n_docs = max(1, (sections + per_doc - 1) // per_doc)
    left = sections
    for i in range(n_docs):
        k = min(per_doc, left)
        left -= k
        topic = rng.sample(_DOMAIN, 4) + rng.choices(tail, cum_weights=tail_w, k=2)
        title = f"{topic[0].capitalize()} {topic[1]} for {topic[4].capitalize()} {topic[2]}"
        acl = "[agent]" if rng.random() < 0.1 else "[public]"
        status = rng.choices(["active", "deprecated", "draft"], weights=[90, 7, 3])[0]
        facet = rng.choice(["", "applies_to: {customer_type: personal}\n", "applies_to: {customer_type: business}\n"])
        lines = [
            "---", f"id: syn-{i:06d}", f"title: {title}", f"status: {status}", 'version: "2026-01"',
            f"acl: {acl}", f"risk: {rng.choice(['low', 'low', 'medium', 'high'])}", facet.rstrip("\n"), "---", "",
        ]
        for j in range(k):
            lines.append(f"## {_HEADINGS[(i + j) % len(_HEADINGS)]} {topic[j % 4]}")
            lines.append(" ".join(_sentence(rng, topic, tail, tail_w) for _ in range(rng.randint(2, 6))))
            lines.append("")
        d = root / topic[0] / f"syn-{i:06d}.md"
        d.parent.mkdir(parents=True, exist_ok=True)
        d.write_text("\n".join(line for line in lines if line is not None) + "\n", encoding="utf-8")
    return root


def synthetic_queries(n: int, seed: int = 11) -> list[str]:
    """Caller-like questions over the same vocabulary (most have matching sections)."""
    rng = random.Random(seed)
    tail = _tail_words(random.Random(7), 20000)
    tail_w = _zipf_cum(len(tail))
    frames = ["How do I {} my {} {}?", "Can I get a {} for the {} {}?", "What is the {} {} {} policy?",
              "Why was I charged a {} {} on my {}?", "Is there a {} limit for {} {}?"]
    out = []
    for _ in range(n):
        words = rng.sample(_DOMAIN, 2) + [rng.choices(tail, cum_weights=tail_w)[0] if rng.random() < 0.4 else rng.choice(_DOMAIN)]
        out.append(rng.choice(frames).format(*words))
    return out
