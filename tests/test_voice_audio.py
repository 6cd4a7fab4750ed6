"""voice_agent.audio: WAV formats, codecs, resampling."""
from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import pytest

from voice_agent.audio import (
    AudioError,
    Resampler,
    float_to_pcm16,
    load_audio,
    mulaw_decode,
    mulaw_encode,
    pcm16_to_float,
    read_wav,
    read_wav_bytes,
    resample,
    wav_bytes,
    write_wav,
)

pytestmark = pytest.mark.unit


def _tone(sr: int, f: float = 440.0, secs: float = 0.5, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(sr * secs)) / sr
    return (amp * np.sin(2 * np.pi * f * t)).astype(np.float32)


def _riff(fmt_tag: int, channels: int, sr: int, bits: int, payload: bytes, extensible: bool = False) -> bytes:
    block = channels * bits // 8
    if extensible:
        guid_tail = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt = struct.pack("<HHIIHH", 0xFFFE, channels, sr, sr * block, block, bits)
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", fmt_tag) + guid_tail
    else:
        fmt = struct.pack("<HHIIHH", fmt_tag, channels, sr, sr * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"LIST" + struct.pack("<I", 3) + b"abc\x00"  # odd-sized chunk: tests pad byte handling
    body += b"data" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_roundtrip_pcm16(tmp_path):
    x = _tone(16000)
    p = write_wav(tmp_path / "sub" / "a.wav", x, 16000)
    y, sr = read_wav(p)
    assert sr == 16000 and y.dtype == np.float32 and len(y) == len(x)
    assert np.max(np.abs(y - x)) < 1e-4


def test_int16_input_and_stereo_mixdown(tmp_path):
    left = (np.ones(100) * 16384).astype(np.int16)
    right = np.zeros(100, dtype=np.int16)
    p = write_wav(tmp_path / "st.wav", np.stack([left, right], axis=1), 8000)
    y, sr = read_wav(p)
    assert sr == 8000 and len(y) == 100
    assert np.allclose(y, 0.25, atol=1e-4)


@pytest.mark.parametrize(
    "tag,bits,encode",
    [
        (1, 8, lambda x: (np.round(x * 127) + 128).astype(np.uint8).tobytes()),
        (1, 16, lambda x: np.round(x * 32767).astype("<i2").tobytes()),
        (1, 32, lambda x: np.round(x * 2147483647).astype("<i4").tobytes()),
        (3, 32, lambda x: x.astype("<f4").tobytes()),
        (3, 64, lambda x: x.astype("<f8").tobytes()),
        (7, 8, lambda x: mulaw_encode(x)),
    ],
)
@pytest.mark.parametrize("extensible", [False, True])
def test_formats(tag, bits, encode, extensible):
    x = _tone(8000)
    y, sr = read_wav_bytes(_riff(tag, 1, 8000, bits, encode(x), extensible))
    assert sr == 8000 and len(y) == len(x)
    tol = {8: 0.03, 16: 1e-4, 32: 1e-6, 64: 1e-6}[bits]
    assert np.max(np.abs(y - x)) < tol


def test_24bit():
    x = _tone(16000)
    v = np.round(x * (2**23 - 1)).astype(np.int32)
    b = np.stack([v & 0xFF, (v >> 8) & 0xFF, (v >> 16) & 0xFF], axis=1).astype(np.uint8).tobytes()
    y, _ = read_wav_bytes(_riff(1, 1, 16000, 24, b))
    assert np.max(np.abs(y - x)) < 1e-6


@pytest.mark.skipif(shutil.which("sox") is None, reason="sox not installed")
def test_sox_written_files(tmp_path):
    src = write_wav(tmp_path / "src.wav", _tone(16000), 16000)
    for name, args in [("ulaw.wav", ["-e", "mu-law", "-r", "8000"]), ("alaw.wav", ["-e", "a-law"]),
                       ("st.wav", ["-c", "2"]), ("f.wav", ["-e", "floating-point", "-b", "32"])]:
        out = tmp_path / name
        subprocess.run(["sox", str(src), *args, str(out)], check=True)
        y, sr = read_wav(out)
        ref = resample(_tone(16000), 16000, sr)
        n = min(len(y), len(ref))
        assert np.sqrt(np.mean((y[:n] - ref[:n]) ** 2)) < 0.02, name


@pytest.mark.parametrize(
    "data,reason",
    [
        (b"", "not a WAV file"),
        (b"hello world, this is text", "not a WAV file"),
        (b"RIFF\x00\x00\x00\x00WAVEdata\x00\x00\x00\x00", "no fmt chunk"),
        (_riff(1, 1, 8000, 16, b"\x00\x00" * 10)[:-7], "truncated"),
        (_riff(1, 1, 8000, 16, b"\x00" * 11), "truncated"),
        (_riff(2, 1, 8000, 4, b"\x00" * 10), "unsupported WAV encoding"),
    ],
)
def test_bad_files_name_path_and_reason(tmp_path, data, reason):
    p = tmp_path / "bad.wav"
    p.write_bytes(data)
    with pytest.raises(AudioError) as e:
        read_wav(p)
    assert str(p) in str(e.value) and reason in str(e.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(AudioError, match="no such file"):
        read_wav(tmp_path / "nope.wav")
    with pytest.raises(AudioError, match="directory"):
        read_wav(tmp_path)


def test_streamed_wav_with_unpatched_size():
    payload = np.round(_tone(8000) * 32767).astype("<i2").tobytes()
    data = bytearray(_riff(1, 1, 8000, 16, payload))
    i = data.index(b"data")
    data[i + 4 : i + 8] = b"\xff\xff\xff\xff"
    y, _ = read_wav_bytes(bytes(data))
    assert len(y) == 4000


def test_pcm16_codec():
    x = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, np.nan], dtype=np.float32)
    b = float_to_pcm16(x)
    assert len(b) == 16
    v = np.frombuffer(b, "<i2")
    assert list(v) == [0, 16384, -16384, 32767, -32767, 32767, -32767, 0]
    assert np.allclose(pcm16_to_float(b)[:5], x[:5], atol=1e-4)
    with pytest.raises(AudioError, match="even number"):
        pcm16_to_float(b"\x00\x01\x02")


def test_mulaw_matches_g711_reference_points():
    # Known G.711 values: silence encodes as 0xFF, full scale as 0x80 / 0x00.
    assert mulaw_encode(np.array([0], dtype=np.int16)) == b"\xff"
    assert mulaw_encode(np.array([32767], dtype=np.int16)) == b"\x80"
    assert mulaw_encode(np.array([-32768], dtype=np.int16)) == b"\x00"
    assert mulaw_decode(b"\xff")[0] == 0.0
    assert abs(mulaw_decode(b"\x80")[0] * 32768 - 32124) < 1e-3
    # All 256 codes survive decode → encode.
    codes = bytes(range(256))
    back = mulaw_encode(np.round(mulaw_decode(codes) * 32768).astype(np.int16))
    assert all(a == b or {a, b} == {0x7F, 0xFF} for a, b in zip(back, codes))  # ±0 share a value


def test_mulaw_roundtrip_snr():
    x = _tone(8000, amp=0.3)
    y = mulaw_decode(mulaw_encode(x))
    snr = 10 * np.log10(np.sum(x**2) / np.sum((x - y) ** 2))
    assert snr > 30  # G.711 gives ~38 dB on a mid-level tone


@pytest.mark.parametrize("a,b", [(8000, 16000), (16000, 8000), (22050, 16000), (16000, 22050),
                                 (48000, 16000), (16000, 48000), (16000, 16000)])
def test_resample_accuracy_and_length(a, b):
    x = _tone(a, f=1000.0, secs=1.0)
    y = resample(x, a, b)
    assert len(y) == int(np.ceil(len(x) * b / a))
    ref = _tone(b, f=1000.0, secs=1.0)
    mid = slice(len(y) // 4, 3 * len(y) // 4)
    assert np.sqrt(np.mean((y[mid] - ref[mid]) ** 2)) < 1e-4  # in phase: delay compensated


def test_resample_rejects_aliases():
    x = _tone(48000, f=10000.0, secs=1.0)  # above 16 kHz's Nyquist
    y = resample(x, 48000, 16000)
    assert np.sqrt(np.mean(y[4000:12000] ** 2)) < 0.5 * 10 ** (-60 / 20)


def test_streaming_resampler_equals_one_shot():
    x = np.random.default_rng(1).standard_normal(22050).astype(np.float32) * 0.1
    whole = resample(x, 22050, 16000)
    r = Resampler(22050, 16000)
    parts, i = [], 0
    for n in [1, 7, 441, 1000, 3, 30000]:
        parts.append(r.process(x[i : i + n]))
        i += n
    parts.append(r.flush())
    assert np.array_equal(np.concatenate(parts), whole)


def test_load_audio_and_wav_bytes(tmp_path):
    b = wav_bytes(_tone(8000), 8000)
    p = tmp_path / "x.wav"
    p.write_bytes(b)
    assert len(load_audio(p, 16000)) == 8000


def test_bad_rates():
    with pytest.raises(AudioError):
        resample(np.zeros(10), 0, 16000)


def _encode(path, x, rate, codec):
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray((x * 32767).astype(np.int16).reshape(1, -1), format="s16", layout="mono")
        frame.rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


@pytest.mark.unit
@pytest.mark.parametrize("suffix, codec", [(".flac", "flac"), (".mp3", "libmp3lame"), (".ogg", "libopus")])
def test_common_recordings_read_like_wavs(tmp_path, suffix, codec):
    """FLAC, MP3 and Ogg/Opus come through PyAV as float32 mono at their own rate."""
    from voice_agent.audio_files import read_audio

    rate = 48000 if codec == "libopus" else 16000
    x = (0.4 * np.sin(2 * np.pi * 440 * np.arange(rate) / rate)).astype(np.float32)  # one second of A4
    path = tmp_path / f"tone{suffix}"
    _encode(path, x, rate, codec)
    y, sr = read_audio(path)
    assert sr == rate and y.dtype == np.float32 and y.ndim == 1
    assert abs(len(y) / sr - 1.0) < 0.1  # encoders pad a little
    spectrum = np.abs(np.fft.rfft(y[: sr // 2]))
    assert abs(np.argmax(spectrum) * 2 - 440) <= 4  # the same tone came back


@pytest.mark.unit
def test_garbage_and_missing_recordings_are_one_line_errors(tmp_path):
    from voice_agent.audio_files import read_audio

    junk = tmp_path / "junk.mp3"
    junk.write_bytes(b"\x00\x01garbage" * 100)
    for path in (junk, tmp_path / "missing.flac"):
        with pytest.raises(AudioError) as e:
            read_audio(path)
        assert str(path) in str(e.value) and "\n" not in str(e.value)
