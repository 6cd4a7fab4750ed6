"""Barge-in: notice the caller talking over the agent's reply, but not the reply's own echo.

The microphone hears the caller *and* the agent's voice leaking back from the speaker (an
attenuated, delayed, maybe filtered copy of the reply). A VAD alone fires on that echo, since
echo is speech too. So per 32 ms frame we:

1. find the echo path: the delay (0 … `max_echo_delay_ms`) at which the reply audio best
   matches the microphone, and the least-squares gain at that delay;
2. subtract the predicted echo; what remains is the caller (plus noise and echo residue);
3. fire when the silero VAD, run on that remainder, hears speech for `min_speech_ms` *and* the
   remainder is loud: above `residual_ratio_db` relative to the predicted echo and above an
   absolute floor.

Audio is 16 kHz float32. The reference must be pushed on the microphone's timeline: the
reply samples that are playing while the matching microphone samples are captured (a
constant offset up to `max_echo_delay_ms` is absorbed by the delay search).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .vad import FRAME, SAMPLE_RATE, SileroStream


@dataclass
class BargeIn:
    time_s: float  # mic time of the frame where it fired (end of that frame)
    onset_s: float  # mic time where the caller's speech began (first frame of the run)
    residual_db: float  # caller-over-echo level of the firing frame


def _db(power: float) -> float:
    return 10 * math.log10(max(power, 1e-12))


class BargeInDetector:
    def __init__(
        self,
        threshold: float = 0.5,
        min_speech_ms: int = 90,
        *,
        residual_ratio_db: float = 3.0,
        min_level_db: float = -50.0,
        max_echo_delay_ms: int = 400,
    ) -> None:
        self.threshold = threshold
        self.min_frames = max(1, math.ceil(min_speech_ms / (FRAME * 1000 / SAMPLE_RATE)))
        self.residual_ratio = 10 ** (residual_ratio_db / 10)
        self.min_power = 10 ** (min_level_db / 10)
        self.max_delay = int(max_echo_delay_ms * SAMPLE_RATE / 1000)
        self._vad = SileroStream()
        self._pending = np.zeros(0, dtype=np.float32)
        self._mic_pos = 0  # mic samples consumed (frames processed)
        # Reference samples on the mic timeline: _ref[i] plays at mic sample _ref_start + i.
        self._ref = np.zeros(0, dtype=np.float32)
        self._ref_start = 0
        self._held_delay: int | None = None  # echo path seen on frames that were clearly pure echo
        self._held_gain = 0.0
        self._run: list[int] = []  # frame starts of the current run of caller-speech frames
        self.fired: BargeIn | None = None
        self.last_prob = 0.0

    # -- reference ---------------------------------------------------------------------------
    def push_reference(self, pcm: np.ndarray) -> None:
        """Reply audio that starts playing now (or right after what is already queued)."""
        x = np.asarray(pcm, dtype=np.float32).reshape(-1)
        end = self._ref_start + len(self._ref)
        if end < self._mic_pos + len(self._pending):  # nothing queued: it starts now
            gap = self._mic_pos + len(self._pending) - end
            self._ref = np.concatenate([self._ref, np.zeros(gap, np.float32)])
        self._ref = np.concatenate([self._ref, x])

    def playing(self) -> bool:
        """Is reply audio scheduled at (or just before, within the echo delay) the mic position?"""
        return bool(np.any(self._ref_segment(self._mic_pos - self.max_delay, self.max_delay + FRAME)))

    def reset(self) -> None:
        """A new reply: forget the previous one's reference and re-arm."""
        self._ref = np.zeros(0, dtype=np.float32)
        self._ref_start = self._mic_pos + len(self._pending)
        self._run = []
        self.fired = None

    # -- microphone --------------------------------------------------------------------------
    def feed(self, mic: np.ndarray) -> BargeIn | None:
        """Process microphone audio; returns the barge-in the first time it fires (once per reply)."""
        x = np.asarray(mic, dtype=np.float32).reshape(-1)
        buf = np.concatenate([self._pending, x]) if len(self._pending) else x
        n = len(buf) // FRAME
        hit = None
        for i in range(n):
            frame = buf[i * FRAME : (i + 1) * FRAME]
            r = self._frame(frame)
            hit = hit or r
        self._pending = buf[n * FRAME :].copy()
        self._trim()
        return hit

    def _ref_segment(self, start: int, length: int) -> np.ndarray:
        """Reference samples for mic positions [start, start + length), zeros where none."""
        out = np.zeros(length, dtype=np.float32)
        a, b = max(start, self._ref_start), min(start + length, self._ref_start + len(self._ref))
        if b > a:
            out[a - start : b - start] = self._ref[a - self._ref_start : b - self._ref_start]
        return out

    def _frame(self, m: np.ndarray) -> BargeIn | None:
        pos = self._mic_pos
        self._mic_pos += FRAME
        # Reference covering every delay: sample j of `ref` is at mic position pos - max_delay + j.
        ref = self._ref_segment(pos - self.max_delay, self.max_delay + FRAME)
        residual, echo_power = m, 0.0
        if np.any(ref):
            residual, echo_power = self._cancel(m, ref)
        p = self._vad.prob(residual.astype(np.float32))
        self.last_prob = p
        res_power = float(np.mean(residual.astype(np.float64) ** 2))
        loud = res_power >= self.min_power and res_power >= self.residual_ratio * echo_power
        if p >= self.threshold and loud:
            self._run.append(pos)
        elif p < self.threshold - 0.15 or not loud:
            self._run = []
        if self.fired is None and len(self._run) >= self.min_frames and self.playing():
            self.fired = BargeIn(time_s=(pos + FRAME) / SAMPLE_RATE, onset_s=self._run[0] / SAMPLE_RATE,
                                 residual_db=_db(res_power) - _db(echo_power))
            return self.fired
        return None

    def _cancel(self, m: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, float]:
        """Subtract the best single-tap echo estimate; returns (residual, predicted echo power)."""
        L = len(ref)
        nfft = 1 << (L + FRAME - 1).bit_length()
        # corr[k] = sum_n m[n] * ref[n + k]: delay d corresponds to k = max_delay - d.
        corr = np.fft.irfft(np.fft.rfft(ref, nfft) * np.conj(np.fft.rfft(m, nfft)), nfft)[: L - FRAME + 1]
        csum = np.concatenate([[0.0], np.cumsum(ref.astype(np.float64) ** 2)])
        energy = csum[FRAME:] - csum[: L - FRAME + 1]  # ||ref[k:k+FRAME]||^2
        valid = energy > 1e-9
        if not np.any(valid):
            return m, 0.0
        score = np.where(valid, corr**2 / np.maximum(energy, 1e-9), 0.0)  # energy explained at each k
        candidates: dict[int, float] = {int(np.argmax(score)): 0.0}
        if self._held_delay is not None:
            candidates[self.max_delay - self._held_delay] = self._held_gain
        best = None
        for k, held_gain in candidates.items():
            if not valid[k]:
                continue
            seg = ref[k : k + FRAME]
            for g in {corr[k] / energy[k], held_gain} if held_gain else {corr[k] / energy[k]}:
                res = m - g * seg
                rp = float(np.mean(res.astype(np.float64) ** 2))
                if best is None or rp < best[0]:
                    best = (rp, res, k, g)
        if best is None:
            return m, 0.0
        rp, res, k, g = best
        mp = float(np.mean(m.astype(np.float64) ** 2))
        if mp > 0 and rp < 0.1 * mp:  # this frame is clearly echo: remember its path
            self._held_delay = self.max_delay - k
            self._held_gain = g if not self._held_gain else 0.7 * self._held_gain + 0.3 * g
        # The echo we expect: from the learned path when there is one (a frame where the caller
        # talks inflates the per-frame gain estimate), else from this frame's fit.
        if self._held_delay is not None:
            kh = self.max_delay - self._held_delay
            echo_power = float(self._held_gain**2 * energy[kh] / FRAME) if valid[kh] else 0.0
        else:
            echo_power = float(g * g * energy[k] / FRAME)
        return res.astype(np.float32), echo_power

    def _trim(self) -> None:
        drop = self._mic_pos - self.max_delay - FRAME - self._ref_start
        if drop > 0:
            drop = min(drop, len(self._ref))
            self._ref = self._ref[drop:]
            self._ref_start += drop
