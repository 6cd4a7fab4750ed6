"""Any common recording as float32 mono: WAV through the project's own strict reader, everything
else (FLAC, MP3, OGG/Opus, M4A...) through PyAV, the decoder faster-whisper already ships."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .audio import AudioError, read_wav

MAX_SECONDS = 3600.0  # a recording longer than this is refused, not decoded into memory (--max-audio-s)


def read_audio(path: str | Path, max_seconds: float = MAX_SECONDS) -> tuple[np.ndarray, int]:
    """The file's samples (float32 mono in [-1, 1]) and sample rate; `AudioError` naming the file
    and the reason for anything unreadable."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(12)
    except FileNotFoundError:
        raise AudioError(f"{p}: no such file") from None
    except OSError as e:
        raise AudioError(f"{p}: cannot read ({e.strerror or e})") from None
    if head[:4] in (b"RIFF", b"RIFX") and head[8:12] == b"WAVE":
        _check_wav_length(p, max_seconds)
        x, sr = read_wav(p)
        if len(x) > max_seconds * sr:
            raise AudioError(f"{p}: {len(x) / sr:.0f} s of audio; the limit is {max_seconds:g} s (--max-audio-s)")
        return x, sr
    return _decode(p, max_seconds)


def _check_wav_length(p: Path, max_seconds: float) -> None:
    """Refuse a long WAV from its header before reading it: the byte rate of a leading `fmt `
    chunk against the file's size (other layouts are checked after reading)."""
    with open(p, "rb") as f:
        head = f.read(36)
    if len(head) == 36 and head[12:16] == b"fmt ":
        byte_rate = int.from_bytes(head[28:32], "little")
        size = p.stat().st_size
        if byte_rate > 0 and size / byte_rate > max_seconds * 1.01:
            raise AudioError(f"{p}: about {size / byte_rate:.0f} s of audio; the limit is {max_seconds:g} s "
                             "(--max-audio-s)")


def _decode(p: Path, max_seconds: float) -> tuple[np.ndarray, int]:
    import av  # heavy: FFmpeg's libraries, only for recordings that are not WAV

    try:
        with av.open(str(p)) as container:
            streams = container.streams.audio
            if not streams:
                raise AudioError(f"{p}: no audio stream")
            rate = int(streams[0].rate or 16000)
            to_mono = av.AudioResampler(format="flt", layout="mono", rate=rate)
            chunks, total = [], 0
            for frame in container.decode(streams[0]):
                for out in to_mono.resample(frame):
                    x = out.to_ndarray().reshape(-1).astype(np.float32)
                    chunks.append(x)
                    total += len(x)
                if total > max_seconds * rate:
                    raise AudioError(f"{p}: longer than {max_seconds:g} s")
    except AudioError:
        raise
    except Exception as e:  # noqa: BLE001 - FFmpeg's many errors all mean "not a recording we can read"
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise AudioError(f"{p}: not a WAV file, nor a recording PyAV can decode ({detail})") from None
    if not chunks:
        raise AudioError(f"{p}: no audio in the file")
    return np.clip(np.concatenate(chunks), -1.0, 1.0), rate
