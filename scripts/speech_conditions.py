"""The speech variation table of make_domain_audio.py: who speaks (VOICES), over what line
(CHANNELS) and how (STYLES), and how the conditions are dealt to a domain's cases.

Extend a table by adding a row; `deal` spreads every row over each domain. Dealing is by
shuffled cycles (seeded by the domain's name), not by independent draws, so a domain with at
least as many cases as VOICES has rows hears every voice, every channel in equal shares and a
fixed share of hesitant and fast speakers, and no two tables move in step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from audio_synth import Voice, case_rng

# piper joe at several length_scales (>1 slower); espeak-ng accents with words per minute and
# pitch (-p, 0-99); flite's own voices (duration_stretch >1 slower).
VOICES: list[Voice] = [
    Voice("piper", "joe", 1.0),
    Voice("piper", "joe", 0.9),
    Voice("piper", "joe", 1.2),
    Voice("espeak", "en-us", 150, pitch=50),
    Voice("espeak", "en-gb", 165, pitch=35),
    Voice("espeak", "en-us+f3", 145, pitch=70),
    Voice("espeak", "en-us-nyc", 175, pitch=40),
    Voice("espeak", "en-gb-scotland", 155, pitch=60),
    Voice("espeak", "en-029", 150, pitch=45),
    Voice("espeak", "en-us+m3", 180, pitch=25),
    Voice("flite", "slt", 1.0),
    Voice("flite", "rms", 1.1),
    Voice("flite", "awb", 1.0),
]


@dataclass(frozen=True)
class Channel:
    """How the caller reaches us: `snr_db` picks one level per case (None: no added noise);
    `telephone` is the 8 kHz G.711 mu-law line, band 300-3400 Hz."""

    name: str
    snr_db: tuple[float, ...] | None = None
    telephone: bool = False


# In dealing order: a domain of 3 cases still gets wideband, telephone and loud noise.
CHANNELS: list[Channel] = [
    Channel("wideband"),
    Channel("telephone", telephone=True),
    Channel("noise-heavy", snr_db=(8.0, 9.0, 10.0)),
    Channel("noise-light", snr_db=(20.0,)),
]
NOISE_KINDS = ("pink", "brown", "alsa")

# style -> one case in how many speaks that way (rounded up for hesitant, down for fast)
STYLES: dict[str, int] = {"hesitant": 6, "fast": 8}
# A fast speaker's speed knob, multiplied: piper and flite stretch time (<1 faster), espeak words/min.
FAST_FACTOR = {"piper": 0.75, "flite": 0.75, "espeak": 1.35}
ESPEAK_MAX_WPM = 230  # faster than this espeak-ng slurs words a person would not
OPENERS = ["um, so,", "uh,", "so, um,", "okay, um,", "yeah, hi, uh,", "um,"]
MID_FILLERS = ["um,", "uh,", "you know,"]


@dataclass(frozen=True)
class Condition:
    voice: Voice  # after the style's speed change
    channel: Channel
    style: str  # plain | hesitant | fast


def _styles(n: int) -> list[str]:
    hesitant = math.ceil(n / STYLES["hesitant"])
    fast = min(n - hesitant, n // STYLES["fast"])
    return ["hesitant"] * hesitant + ["fast"] * fast + ["plain"] * (n - hesitant - fast)


def styled(voice: Voice, style: str) -> Voice:
    if style != "fast":
        return voice
    speed = voice.speed * FAST_FACTOR[voice.engine]
    if voice.engine == "espeak":
        return replace(voice, speed=min(ESPEAK_MAX_WPM, int(round(speed))))
    return replace(voice, speed=round(speed, 2))


def deal(n: int, key: str, seed: int) -> list[Condition]:
    """Conditions for `n` cases of one domain (`key`), in the cases' order."""
    rng = case_rng(f"deal:{key}", seed)
    order = rng.permutation(len(VOICES))
    voices = [int(order[i % len(VOICES)]) for i in range(n)]
    channels = [i % len(CHANNELS) for i in range(n)]
    styles = _styles(n)
    for column in (voices, channels, styles):
        rng.shuffle(column)
    return [Condition(styled(VOICES[v], s), CHANNELS[c], s) for v, c, s in zip(voices, channels, styles)]


def hesitant(text: str, rng: np.random.Generator) -> str:
    """`text` as a hesitant caller says it: an opening filler, a restart of one or two early
    words ("I, I want ..."), and sometimes a filler further on."""
    words = text.split()
    first = words[0] if words else ""
    if first[:1].isupper() and first.strip(",.?!") != "I" and not first.startswith("I'") and not first[1:2].isupper():
        words[0] = first[0].lower() + first[1:]  # the sentence now starts with the filler
    if len(words) >= 3:
        k = int(rng.integers(0, min(3, len(words) - 1)))
        span = 1 + int(rng.integers(0, 2))
        restart = " ".join(w.strip(",.?!;:") for w in words[k:k + span])
        words = words[:k] + [restart + ","] + words[k:]
        if len(words) > 6 and rng.random() < 0.5:
            at = int(rng.integers(k + span + 2, len(words)))
            words.insert(at, MID_FILLERS[int(rng.integers(len(MID_FILLERS)))])
    return " ".join([OPENERS[int(rng.integers(len(OPENERS)))], *words])
