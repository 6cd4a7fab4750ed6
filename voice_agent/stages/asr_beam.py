"""Decoding a short turn with whisper over a window just longer than the audio, keeping the beam's
best few hearings, not only the first.

One greedy hearing is what the call answers from. When that hearing is about to be refused, the
beam's other hearings of the same audio ("factory reset" beside "factor reset") are the cheapest
second opinions: one encode, one beam search, each with its own log-probability on the first
hearing's scale.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .asr_fit import SAMPLE_RATE, encode_window

if TYPE_CHECKING:  # heavy (CTranslate2): imported at run time only when a model loads
    from faster_whisper import WhisperModel


@dataclass(frozen=True)
class Heard:
    text: str
    avg_logprob: float  # mean token log-probability, as faster-whisper reports it
    no_speech_prob: float


@dataclass(frozen=True)
class ShortDecode:
    hearings: list[Heard]  # best first; at least one (its text may be empty)
    language: str
    ctx_s: float  # seconds of audio the encoder saw


def said_words(text: str) -> str:
    """A hearing's words without case or punctuation: "how do I..." is "How do I...?"."""
    return " ".join(re.findall(r"[\w']+", text.lower()))


def decode_short(model: WhisperModel, x: np.ndarray, prompt: str | None, *, language: str | None,
                 min_ctx_s: float, margin_s: float, n: int = 1) -> ShortDecode:
    """The `n` best hearings of `x` (greedy when `n` is 1), best first; one per sequence of words
    (the beam also keeps copies that differ only in case or punctuation)."""
    # heavy: CTranslate2 and faster-whisper, only once a model is decoding
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens

    duration = len(x) / SAMPLE_RATE
    enc, _, ctx_s = encode_window(model, x, min_ctx_s, margin_s)
    if language is None:
        language = model.model.detect_language(enc)[0][0][0][2:-2]  # "<|en|>" → "en"
    tok = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language)
    prompt_ids: list[int] = []
    if prompt:
        prompt_ids = [tok.sot_prev] + tok.encode(" " + prompt.strip())[: model.max_length // 2 - 1]
    prompt_ids += list(tok.sot_sequence) + [tok.no_timestamps]
    r = model.model.generate(
        enc,
        [prompt_ids],
        beam_size=max(1, n),
        num_hypotheses=max(1, n),
        max_length=min(model.max_length, len(prompt_ids) + 10 + int(duration * 12)),  # speech is ~4 tokens/s
        return_scores=True,
        return_no_speech_prob=True,
        suppress_blank=True,
        suppress_tokens=list(get_suppressed_tokens(tok, [-1])),
    )[0]
    hearings: list[Heard] = []
    said: set[str] = set()
    for ids, score in zip(r.sequences_ids, r.scores):
        tokens = [t for t in ids if t < tok.eot]
        text = tok.decode(tokens).strip()
        words = said_words(text)
        if hearings and (not words or words in said):
            continue
        said.add(words)
        avg = score * len(tokens) / (len(tokens) + 1)  # as faster-whisper recovers it
        hearings.append(Heard(text, float(avg), float(r.no_speech_prob)))
    return ShortDecode(hearings, language, ctx_s)
