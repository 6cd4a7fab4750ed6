"""How well a given text fits a turn's audio: whisper's decoder, forced through the text's tokens,
gives each token's probability; their mean log is the text's fit.

A decode keeps one hearing. On a phone line a short request for a person can come out as nothing
like itself ("Repreneurative, clean."), although the words the caller said still fit the audio as
well as the hearing does. Forcing a few known phrases through the decoder weighs them against the
hearing on the same scale, with one encode of the audio.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # heavy (CTranslate2): imported at run time only when a model loads
    from faster_whisper import WhisperModel

SAMPLE_RATE = 16000  # whisper's input rate
MIN_PROB = 1e-9  # a token the model gives no chance at all counts as very unlikely, not as -inf


def encode_window(model: WhisperModel, x: np.ndarray, min_ctx_s: float, margin_s: float) -> tuple[Any, int, float]:
    """Encode the audio plus a margin of silence (not a full 30 s window): (encoder output, frames,
    seconds encoded)."""
    import ctranslate2  # heavy: only once a model is decoding

    fe = model.feature_extractor
    duration = len(x) / SAMPLE_RATE
    ctx_s = min(30.0, max(min_ctx_s, duration + margin_s))
    frames = int(round(ctx_s * SAMPLE_RATE / fe.hop_length)) // 2 * 2  # the encoder halves it
    feats = fe(x, padding=int(ctx_s * SAMPLE_RATE) - len(x) + fe.hop_length * 2)[:, :frames]
    enc = model.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(feats[None], dtype=np.float32)))
    return enc, frames, ctx_s


def fit_texts(model: WhisperModel, x: np.ndarray, texts: list[str], *, language: str = "en",
              min_ctx_s: float = 10.0, margin_s: float = 5.0) -> list[float]:
    """Per text, the mean log-probability of its tokens given the audio (higher fits better)."""
    import ctranslate2
    from faster_whisper.tokenizer import Tokenizer

    texts = [t.strip() for t in texts]
    if not texts:
        return []
    enc, frames, _ = encode_window(model, np.asarray(x, dtype=np.float32).reshape(-1), min_ctx_s, margin_s)
    tok = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language)
    tokens = [tok.encode(" " + t) or [tok.eot] for t in texts]
    batch = ctranslate2.StorageView.from_array(np.ascontiguousarray(np.repeat(np.array(enc), len(texts), axis=0)))
    results = model.model.align(batch, list(tok.sot_sequence) + [tok.no_timestamps], tokens,
                                [frames // 2] * len(texts))
    return [float(np.mean(np.log(np.maximum(r.text_token_probs, MIN_PROB)))) for r in results]
