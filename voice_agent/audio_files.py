"""Any common recording as float32 mono: WAV through the project's own strict reader, everything
else (FLAC, MP3, OGG/Opus, M4A...) through PyAV, the decoder faster-whisper already ships."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .audio import AudioError, read_wav

MAX_SECONDS = 3 * 3600  # a recording longer than this is refused, not decoded into memory


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
        return read_wav(p)
    return _decode(p, max_seconds)


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
