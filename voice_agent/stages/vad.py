"""Voice activity detection and endpointing with the silero VAD that faster-whisper ships.

The ONNX model (`faster_whisper/assets/silero_vad_v6.onnx`) takes frames of 64 context +
512 new samples at 16 kHz and an LSTM state (h, c), each (1, 1, 128). One inference
session serves the whole process (onnxruntime's `run` is thread-safe); every stream keeps
its own state and context.
"""
from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from ..audio import resample

SAMPLE_RATE = 16000
FRAME = 512  # new samples per model call (32 ms)
CONTEXT = 64  # samples of the previous frame the model sees again
FRAME_MS = FRAME * 1000 / SAMPLE_RATE

_session = None
_session_lock = threading.Lock()


def model_path() -> Path:
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.origin:
        raise RuntimeError("faster-whisper is not installed; it carries the silero VAD model")
    p = Path(spec.origin).parent / "assets" / "silero_vad_v6.onnx"
    if not p.is_file():
        raise RuntimeError(f"{p}: silero VAD model missing from the faster-whisper install")
    return p


def _get_session():
    """The process-wide ONNX session, created on first use."""
    global _session
    if _session is None:
        with _session_lock:
            if _session is None:
                import onnxruntime as ort  # heavy: the ONNX runtime, only when the VAD first runs

                opts = ort.SessionOptions()
                # One frame is ~0.1 ms of work: extra threads only add contention.
                opts.intra_op_num_threads = 1
                opts.inter_op_num_threads = 1
                opts.log_severity_level = 4
                s = ort.InferenceSession(str(model_path()), sess_options=opts, providers=["CPUExecutionProvider"])
                names = {i.name for i in s.get_inputs()}
                if not {"input", "h", "c"} <= names:
                    raise RuntimeError(f"unexpected silero VAD inputs {sorted(names)}")
                _session = s
    return _session


class SileroStream:
    """Speech probability per 32 ms frame for one audio stream (16 kHz float32)."""

    def __init__(self) -> None:
        self._session = _get_session()
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    def frames(self, chunk: np.ndarray) -> list[tuple[np.ndarray, float]]:
        """Buffer `chunk`; return (frame, speech probability) for every whole frame now available."""
        x = np.asarray(chunk, dtype=np.float32).reshape(-1)
        buf = np.concatenate([self._pending, x]) if len(self._pending) else x
        n = len(buf) // FRAME
        out = []
        for i in range(n):
            frame = buf[i * FRAME : (i + 1) * FRAME]
            out.append((frame, self.prob(frame)))
        self._pending = buf[n * FRAME :].copy()
        return out

    def prob(self, frame: np.ndarray) -> float:
        """Run the model on exactly one 512-sample frame, advancing the state."""
        inp = np.concatenate([self._context, frame]).reshape(1, CONTEXT + FRAME).astype(np.float32)
        p, self._h, self._c = self._session.run(None, {"input": inp, "h": self._h, "c": self._c})
        self._context = frame[-CONTEXT:].astype(np.float32)
        return float(np.asarray(p).reshape(-1)[0])


@dataclass
class VadEvent:
    """What the endpointer reports.

    - `speech_start`: speech confirmed (after `min_speech_ms`); `time_s` is where it began.
    - `pause`: the caller has been silent for `pause_ms` inside a turn; `audio` is the turn so
      far, so a caller can start a speculative transcription before the turn really ends.
    - `turn_end`: the turn is over; `audio` holds it (with pre-roll), `reason` says why.
    `time_s` is stream time in seconds (from the first sample fed).
    """

    type: Literal["speech_start", "pause", "turn_end"]
    time_s: float
    audio: np.ndarray | None = None
    reason: Literal["silence", "max_length", "flush", "early"] | None = None
    speech_s: float = 0.0  # for turn_end: seconds from speech start to the last speech frame
    trailing_silence_s: float = 0.0  # for turn_end: silence at the end of `audio`


@dataclass
class _Utterance:
    start_frame: int
    frames: list[np.ndarray] = field(default_factory=list)
    last_speech_frame: int = 0
    silence_frames: int = 0
    paused: bool = False


class StreamingVad:
    """Endpointing over a live 16 kHz stream: feed chunks of any size, get events."""

    def __init__(
        self,
        end_silence_ms: int = 500,
        max_turn_s: float = 30.0,
        threshold: float = 0.5,
        min_speech_ms: int = 200,
        pre_roll_ms: int = 200,
        pause_ms: int | None = 300,
    ) -> None:
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"VAD threshold must be in (0, 1), got {threshold}")
        self.threshold = threshold
        self.neg_threshold = max(threshold - 0.15, 0.01)  # hysteresis, as silero's own endpointer
        self.end_silence_frames = max(1, round(end_silence_ms / FRAME_MS))
        self.min_speech_frames = max(1, round(min_speech_ms / FRAME_MS))
        self.pre_roll_frames = max(0, round(pre_roll_ms / FRAME_MS))
        self.pause_frames = None if pause_ms is None else max(1, round(pause_ms / FRAME_MS))
        self.max_turn_frames = max(1, int(max_turn_s * 1000 / FRAME_MS))
        self._stream = SileroStream()
        self._frame_no = 0
        self._history: list[np.ndarray] = []  # recent frames while idle: pre-roll + candidate
        self._candidate: int | None = None  # frame where unconfirmed speech began
        self._candidate_speech = 0
        self._turn: _Utterance | None = None
        self.last_prob = 0.0

    @property
    def in_speech(self) -> bool:
        return self._turn is not None

    @property
    def time_s(self) -> float:
        return self._frame_no * FRAME / SAMPLE_RATE

    def feed(self, chunk: np.ndarray) -> list[VadEvent]:
        events: list[VadEvent] = []
        for frame, p in self._stream.frames(chunk):
            self.last_prob = p
            events.extend(self._step(frame, p))
            self._frame_no += 1
        return events

    def flush(self) -> list[VadEvent]:
        """End of input: finish a turn in progress (reason `flush`)."""
        events: list[VadEvent] = []
        if self._turn is None and self._candidate is not None and self._candidate_speech >= max(
            2, self.min_speech_frames // 2
        ):
            # Short speech right at the end of the input: still worth a transcription.
            self._start_turn(events)
        if self._turn is not None:
            events.append(self._end_turn("flush"))
        self._history.clear()
        self._candidate = None
        return events

    def _t(self, frame_no: int) -> float:
        return frame_no * FRAME / SAMPLE_RATE

    def _step(self, frame: np.ndarray, p: float) -> list[VadEvent]:
        i = self._frame_no
        turn = self._turn
        if turn is None:
            self._history.append(frame)
            if self._candidate is None:
                if p >= self.threshold:
                    self._candidate, self._candidate_speech = i, 1
            elif p >= self.neg_threshold:
                self._candidate_speech += 1
            else:
                self._candidate = None  # a blip, not speech
            if self._candidate is None:
                del self._history[: max(0, len(self._history) - self.pre_roll_frames)]
                return []
            if self._candidate_speech >= self.min_speech_frames:
                events: list[VadEvent] = []
                self._start_turn(events)
                return events
            return []
        turn.frames.append(frame)
        events = []
        if p >= self.threshold or (p >= self.neg_threshold and turn.silence_frames == 0):
            turn.last_speech_frame = i
            turn.silence_frames = 0
            turn.paused = False
        else:
            turn.silence_frames += 1
            if self.pause_frames and not turn.paused and turn.silence_frames == self.pause_frames:
                turn.paused = True
                events.append(VadEvent("pause", self._t(i + 1), audio=np.concatenate(turn.frames)))
        if turn.silence_frames >= self.end_silence_frames:
            events.append(self._end_turn("silence"))
        elif len(turn.frames) >= self.max_turn_frames:
            events.append(self._end_turn("max_length"))
        return events

    def _start_turn(self, events: list[VadEvent]) -> None:
        assert self._candidate is not None
        start = self._candidate
        first = self._frame_no - len(self._history) + 1  # frame number of _history[0]
        keep_from = max(0, start - self.pre_roll_frames - first)
        turn = _Utterance(start_frame=start, frames=self._history[keep_from:], last_speech_frame=self._frame_no)
        self._turn = turn
        self._history = []
        self._candidate = None
        events.append(VadEvent("speech_start", self._t(start)))

    @property
    def silence_ms(self) -> float:
        """How long the caller has been quiet inside the current turn (0 outside a turn)."""
        return self._turn.silence_frames * FRAME_MS if self._turn is not None else 0.0

    def end_now(self) -> VadEvent | None:
        """End the current turn before `end_silence_ms` (reason `early`): the caller of the
        endpointer has other evidence that the turn is over. None when no turn is in progress."""
        return self._end_turn("early") if self._turn is not None else None

    def _end_turn(self, reason: Literal["silence", "max_length", "flush", "early"]) -> VadEvent:
        turn = self._turn
        assert turn is not None
        self._turn = None
        audio = np.concatenate(turn.frames) if turn.frames else np.zeros(0, np.float32)
        return VadEvent(
            "turn_end",
            self._t(self._frame_no + 1),
            audio=audio,
            reason=reason,
            speech_s=self._t(turn.last_speech_frame + 1 - turn.start_frame),
            trailing_silence_s=self._t(turn.silence_frames),
        )


def speech_probabilities(pcm_16k: np.ndarray) -> np.ndarray:
    """Speech probability of every whole 32 ms frame of a 16 kHz recording."""
    s = SileroStream()
    return np.array([p for _, p in s.frames(pcm_16k)], dtype=np.float32)


def split_turns(pcm: np.ndarray, sr: int, *, end_silence_ms: int = 500, **vad_options) -> list[np.ndarray]:
    """Split a recording with several caller turns separated by silence.

    Returns each turn's audio **at 16 kHz** (resampled when `sr` differs), with pre-roll.
    """
    x = resample(pcm, sr, SAMPLE_RATE) if sr != SAMPLE_RATE else np.asarray(pcm, dtype=np.float32)
    vad = StreamingVad(end_silence_ms=end_silence_ms, pause_ms=None, **vad_options)
    turns = [e.audio for e in vad.feed(x) if e.type == "turn_end" and e.audio is not None]
    # Trailing silence so a recording that stops mid-word still closes its last turn.
    turns += [e.audio for e in vad.flush() if e.type == "turn_end" and e.audio is not None]
    return turns
