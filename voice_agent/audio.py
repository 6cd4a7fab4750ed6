"""Audio plumbing: WAV read/write, PCM16 and G.711 μ-law codecs, resampling.

numpy only (no audioop: it left the standard library in Python 3.13). All internal audio is
float32 mono in [-1, 1]; bytes on the wire are PCM16 little-endian or μ-law.
"""
from __future__ import annotations

import io
import math
import struct
import wave
from fractions import Fraction
from pathlib import Path

import numpy as np

__all__ = [
    "AudioError",
    "read_wav",
    "read_wav_bytes",
    "load_audio",
    "write_wav",
    "wav_bytes",
    "resample",
    "Resampler",
    "float_to_pcm16",
    "pcm16_to_float",
    "mulaw_encode",
    "mulaw_decode",
]


MIN_RATE, MAX_RATE = 4000, 192000  # what a real recording uses; anything else is corrupt or hostile


class AudioError(ValueError):
    """Audio that cannot be used: unreadable file, unsupported format, bad byte count."""


# WAVE format tags we understand.
_PCM, _FLOAT, _ALAW, _MULAW, _EXTENSIBLE = 0x0001, 0x0003, 0x0006, 0x0007, 0xFFFE


# ---------------------------------------------------------------------------------- WAV in


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a WAV file as float32 mono in [-1, 1] and its sample rate.

    Accepts PCM 8/16/24/32-bit, IEEE float 32/64, μ-law and A-law, plain or
    WAVE_FORMAT_EXTENSIBLE; several channels are averaged. Anything else raises
    `AudioError` naming the path and the reason.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise AudioError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise AudioError(f"{p}: is a directory, not a WAV file") from None
    except OSError as e:
        raise AudioError(f"{p}: cannot read ({e.strerror or e})") from None
    return read_wav_bytes(data, name=str(p))


def read_wav_bytes(data: bytes, name: str = "<bytes>") -> tuple[np.ndarray, int]:
    """`read_wav` for WAV content already in memory; `name` is used in error messages."""
    if len(data) < 12:
        raise AudioError(f"{name}: not a WAV file (only {len(data)} bytes)")
    if data[:4] not in (b"RIFF", b"RIFX") or data[8:12] != b"WAVE":
        raise AudioError(f"{name}: not a WAV file (no RIFF/WAVE header)")
    if data[:4] == b"RIFX":
        raise AudioError(f"{name}: big-endian RIFX WAV files are not supported")

    fmt: tuple[int, int, int, int, int] | None = None  # tag, channels, rate, block_align, bits
    pcm: bytes | None = None
    pos = 12
    while pos + 8 <= len(data):
        cid = data[pos : pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        body_start = pos + 8
        available = len(data) - body_start
        if cid == b"data":
            if size in (0, 0xFFFFFFFF) and available > 0:
                size = available  # streamed WAV whose writer never patched the size: read to EOF
            elif size > available:
                raise AudioError(
                    f"{name}: truncated WAV (data chunk declares {size} bytes, only {available} present)"
                )
            pcm = data[body_start : body_start + size]
            if fmt is not None:
                break
        elif cid == b"fmt ":
            if size < 16 or size > available:
                raise AudioError(f"{name}: corrupt WAV (fmt chunk of {size} bytes)")
            tag, channels, rate, _byte_rate, block_align, bits = struct.unpack_from("<HHIIHH", data, body_start)
            if tag == _EXTENSIBLE:
                if size < 40:
                    raise AudioError(f"{name}: corrupt WAV (extensible fmt chunk of {size} bytes)")
                # The real format tag is the first two bytes of the SubFormat GUID.
                (tag,) = struct.unpack_from("<H", data, body_start + 24)
            fmt = (tag, channels, rate, block_align, bits)
            if pcm is not None:
                break
        pos = body_start + size + (size & 1)  # chunks are word-aligned
    if fmt is None:
        raise AudioError(f"{name}: corrupt WAV (no fmt chunk)")
    if pcm is None:
        raise AudioError(f"{name}: corrupt WAV (no data chunk)")
    tag, channels, rate, block_align, bits = fmt
    if channels < 1 or rate < 1:
        raise AudioError(f"{name}: corrupt WAV ({channels} channels at {rate} Hz)")
    if not MIN_RATE <= rate <= MAX_RATE:  # 1 Hz or 4 GHz would make resampling allocate gigabytes
        raise AudioError(f"{name}: unsupported sample rate {rate} Hz (expected {MIN_RATE} to {MAX_RATE} Hz)")
    x = _decode_frames(pcm, tag, bits, channels, block_align, name)
    if channels > 1:
        x = x.reshape(-1, channels).mean(axis=1)
    return np.ascontiguousarray(x, dtype=np.float32), int(rate)


def _decode_frames(pcm: bytes, tag: int, bits: int, channels: int, block_align: int, name: str) -> np.ndarray:
    width = {(_MULAW, 8): 1, (_ALAW, 8): 1, (_PCM, 8): 1, (_PCM, 16): 2, (_PCM, 24): 3, (_PCM, 32): 4,
             (_FLOAT, 32): 4, (_FLOAT, 64): 8}.get((tag, bits))
    if width is None:
        kinds = {_PCM: "PCM", _FLOAT: "float", _MULAW: "mu-law", _ALAW: "A-law"}
        kind = kinds.get(tag, f"format tag 0x{tag:04x}")
        raise AudioError(f"{name}: unsupported WAV encoding ({kind}, {bits} bits per sample)")
    if block_align and block_align != width * channels:
        raise AudioError(f"{name}: corrupt WAV (block align {block_align} for {channels}x{bits}-bit)")
    frame = width * channels
    if len(pcm) % frame:
        raise AudioError(f"{name}: truncated WAV ({len(pcm)} data bytes is not a whole number of {frame}-byte frames)")
    if tag == _MULAW:
        return mulaw_decode(pcm)
    if tag == _ALAW:
        return _alaw_decode(pcm)
    if tag == _FLOAT:
        x = np.frombuffer(pcm, dtype="<f4" if bits == 32 else "<f8").astype(np.float32)
        if not np.all(np.isfinite(x)):
            raise AudioError(f"{name}: corrupt WAV (float samples contain NaN or infinity)")
        return np.clip(x, -1.0, 1.0)
    if bits == 8:  # 8-bit WAV is unsigned with a 128 offset
        return (np.frombuffer(pcm, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    if bits == 16:
        return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    if bits == 24:
        b = np.frombuffer(pcm, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        return v.astype(np.float32) / float(1 << 23)
    return (np.frombuffer(pcm, dtype="<i4").astype(np.float64) / 2147483648.0).astype(np.float32)


def load_audio(path: str | Path, sample_rate: int = 16000) -> np.ndarray:
    """Read a WAV file and resample it to `sample_rate` (float32 mono)."""
    x, sr = read_wav(path)
    return resample(x, sr, sample_rate)


# --------------------------------------------------------------------------------- WAV out


def _as_int16(pcm: np.ndarray) -> np.ndarray:
    a = np.asarray(pcm)
    if a.dtype == np.int16:
        return a
    if np.issubdtype(a.dtype, np.integer):
        raise AudioError(f"integer audio must be int16, got {a.dtype}")
    return np.frombuffer(float_to_pcm16(a.reshape(-1)), dtype="<i2").reshape(a.shape)


def wav_bytes(pcm: np.ndarray, sample_rate: int) -> bytes:
    """A complete PCM16 WAV file in memory. `pcm`: float in [-1, 1] or int16; 1-D mono or
    (frames, channels)."""
    buf = io.BytesIO()
    _write(buf, pcm, sample_rate)
    return buf.getvalue()


def write_wav(path: str | Path, pcm: np.ndarray, sample_rate: int) -> Path:
    """Write PCM16 WAV (float input is clipped to [-1, 1]); creates parent folders."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "wb") as f:
            _write(f, pcm, sample_rate)
    except OSError as e:
        raise AudioError(f"{p}: cannot write ({e.strerror or e})") from None
    return p


def _write(f, pcm: np.ndarray, sample_rate: int) -> None:
    if int(sample_rate) <= 0:
        raise AudioError(f"sample rate must be positive, got {sample_rate}")
    a = _as_int16(pcm)
    channels = 1 if a.ndim == 1 else a.shape[1]
    with wave.open(f, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(np.ascontiguousarray(a, dtype="<i2").tobytes())


# ------------------------------------------------------------------------------- PCM codecs


def float_to_pcm16(x: np.ndarray) -> bytes:
    """float audio in [-1, 1] (clipped) → PCM16 little-endian bytes."""
    a = np.asarray(x, dtype=np.float32)
    a = np.nan_to_num(a, nan=0.0, posinf=1.0, neginf=-1.0)
    return np.round(np.clip(a, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def pcm16_to_float(b: bytes | bytearray | memoryview) -> np.ndarray:
    """PCM16 little-endian bytes → float32 in [-1, 1)."""
    if len(b) % 2:
        raise AudioError(f"PCM16 audio needs an even number of bytes, got {len(b)}")
    return np.frombuffer(b, dtype="<i2").astype(np.float32) / 32768.0


# G.711 μ-law as in the ITU/Sun reference g711.c (bit-exact with audioop.lin2ulaw/ulaw2lin).
_ULAW_BIAS = 0x84


def mulaw_encode(x: np.ndarray) -> bytes:
    """float audio in [-1, 1] (or int16) → G.711 μ-law bytes, one per sample."""
    a = np.asarray(x)
    s = a.astype(np.int32) if a.dtype == np.int16 else np.frombuffer(float_to_pcm16(a.reshape(-1)), "<i2").astype(np.int32)
    v = s.reshape(-1) >> 2  # 14-bit, arithmetic shift as the reference does
    mask = np.where(v < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(v), 8159) + (_ULAW_BIAS >> 2)  # 33 .. 8192
    _, e = np.frexp(mag.astype(np.float64))  # mag = m * 2**e, m in [0.5, 1): e - 1 = floor(log2)
    seg = e - 6  # first segment ends at 0x3F
    big = seg >= 8
    seg = np.clip(seg, 0, 7)
    u = (seg << 4) | ((mag >> (seg + 1)) & 0x0F)
    u = np.where(big, 0x7F, u)
    return ((u ^ mask) & 0xFF).astype(np.uint8).tobytes()


def _mulaw_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.float32) / 32768.0


def _alaw_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    seg = (a & 0x70) >> 4
    t = (a & 0x0F) << 4
    t = np.where(seg == 0, t + 8, np.where(seg == 1, t + 0x108, (t + 0x108) << np.maximum(seg - 1, 0)))
    return np.where(a & 0x80, t, -t).astype(np.float32) / 32768.0


_MULAW_TO_FLOAT = _mulaw_table()
_ALAW_TO_FLOAT = _alaw_table()


def mulaw_decode(b: bytes | bytearray | memoryview) -> np.ndarray:
    """G.711 μ-law bytes → float32 in [-1, 1]."""
    return _MULAW_TO_FLOAT[np.frombuffer(b, dtype=np.uint8)]


def _alaw_decode(b: bytes) -> np.ndarray:
    return _ALAW_TO_FLOAT[np.frombuffer(b, dtype=np.uint8)]


# ------------------------------------------------------------------------------ resampling


class Resampler:
    """Streaming windowed-sinc polyphase resampler (Kaiser window, ~80 dB stopband).

    Feed chunks with `process()`; call `flush()` once at the end. Chunked output equals
    one-shot output sample for sample, so a live stream has no seams at chunk edges.
    The group delay is compensated: output sample n lines up with input time n / sr_to.
    """

    ZERO_CROSSINGS = 12  # filter half-length, in zero crossings of the narrower sinc
    ROLLOFF = 0.94  # cutoff as a fraction of the lower Nyquist frequency
    BETA = 8.6  # Kaiser beta: ~80 dB stopband attenuation

    def __init__(self, sr_from: int, sr_to: int):
        if int(sr_from) <= 0 or int(sr_to) <= 0:
            raise AudioError(f"sample rates must be positive, got {sr_from} -> {sr_to}")
        ratio = Fraction(int(sr_to), int(sr_from))
        self.up, self.down = ratio.numerator, ratio.denominator
        self.passthrough = self.up == self.down
        self._n_in = 0  # input samples seen
        self._n_out = 0  # output samples produced
        self._flushed = False
        if self.passthrough:
            return
        L, M = self.up, self.down
        spacing = max(L, M) / self.ROLLOFF  # upsampled samples between sinc zero crossings
        half = int(math.ceil(self.ZERO_CROSSINGS * spacing))
        K = 2 * half + 1
        j = np.arange(K, dtype=np.float64) - half
        h = np.sinc(j / spacing) / spacing * np.kaiser(K, self.BETA) * L  # ×L: zero-stuffing gain
        self._delay = half
        self._taps = -(-K // L)  # taps per output sample
        hp = np.zeros(self._taps * L + L, dtype=np.float64)
        hp[:K] = h
        self._h = hp
        # Input history, with zeros before the stream starts; _buf[0] is input index _buf_off.
        self._buf = np.zeros(self._taps, dtype=np.float64)
        self._buf_off = -self._taps

    def process(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        if self._flushed:
            raise AudioError("Resampler.process() after flush()")
        if self.passthrough:
            self._n_in += len(x)
            return x.copy()
        self._buf = np.concatenate([self._buf, x.astype(np.float64)])
        self._n_in += len(x)
        # Output n needs input up to index (n*M + delay) // L.
        n_end = (self._n_in * self.up - 1 - self._delay) // self.down + 1
        return self._emit(max(n_end, self._n_out))

    def flush(self) -> np.ndarray:
        """The tail: the outputs that needed input past the end (treated as silence)."""
        if self._flushed:
            return np.zeros(0, dtype=np.float32)
        self._flushed = True
        if self.passthrough:
            return np.zeros(0, dtype=np.float32)
        total = -(-self._n_in * self.up // self.down)  # ceil(n_in * L / M)
        pad = self._delay // self.up + self._taps + 2
        self._buf = np.concatenate([self._buf, np.zeros(pad)])
        return self._emit(total)

    def _emit(self, n_end: int) -> np.ndarray:
        L, M, T = self.up, self.down, self._taps
        out = np.empty(max(0, n_end - self._n_out), dtype=np.float32)
        m = np.arange(T)
        block = 8192
        for b0 in range(self._n_out, n_end, block):
            n = np.arange(b0, min(n_end, b0 + block), dtype=np.int64)
            t = n * M + self._delay
            kmax = t // L
            phase = t - kmax * L
            idx = (kmax - self._buf_off)[:, None] - m[None, :]
            coef = self._h[phase[:, None] + m[None, :] * L]
            out[b0 - self._n_out : b0 - self._n_out + len(n)] = np.einsum("ij,ij->i", coef, self._buf[idx])
        self._n_out = max(self._n_out, n_end)
        # Keep only the history the next output needs.
        keep_from = (self._n_out * M + self._delay) // L - T + 1 - self._buf_off
        if keep_from > 0:
            self._buf = self._buf[keep_from:]
            self._buf_off += keep_from
        return out


def resample(x: np.ndarray, sr_from: int, sr_to: int) -> np.ndarray:
    """Resample float audio (windowed-sinc polyphase). Output length is ceil(len * sr_to / sr_from)."""
    r = Resampler(sr_from, sr_to)
    y = r.process(x)
    return np.concatenate([y, r.flush()]).astype(np.float32, copy=False)
