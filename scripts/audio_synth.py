"""Speech and channel pieces shared by the audio generators (make_audio_fixtures.py for
fixtures/audio, make_domain_audio.py for every development domain).

Everything here is deterministic: piper runs with zero noise scales, espeak-ng and flite are
deterministic, and every random draw comes from a generator seeded by `case_rng`. Nothing is
downloaded: voices are piper joe (through the project's TTS worker), espeak-ng and flite;
background noise is generated (pink / brown) or taken from the Debian alsa-utils recording
/usr/share/sounds/alsa/Noise.wav. Needs `sox` on PATH, and the engines' programs for their voices.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages sit beside scripts/
    sys.path.insert(0, str(ROOT))

from voice_agent.stages.tts import TtsClient, speakable  # noqa: E402  (path set up above)

SEED = 20260201
RATE = 16000
TELEPHONE_RATE = 8000
TURN_GAP_S = 1.5
ALSA_NOISE = Path("/usr/share/sounds/alsa/Noise.wav")
PROGRAMS = {"espeak": "espeak-ng", "flite": "flite"}  # engine -> the Debian program it needs


class FixtureError(RuntimeError):
    pass


@dataclass(frozen=True)
class Voice:
    """One way of speaking. `speed` is the engine's own knob: piper's length_scale (>1 slower),
    espeak-ng's words per minute, flite's duration_stretch (>1 slower). `pitch`: espeak-ng's
    `-p` (0-99, 50 its default); None leaves the engine's default."""

    engine: str  # piper | espeak | flite
    name: str
    speed: float
    pitch: int | None = None

    @property
    def label(self) -> str:
        return f"{self.engine}:{self.name}"

    def manifest_speed(self) -> float | int | dict[str, float]:
        if self.engine == "espeak":
            return self.speed
        return {"length_scale" if self.engine == "piper" else "duration_stretch": self.speed}


def load_cases(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FixtureError(f"{path}: cannot read cases file: {exc}") from None
    cases: object
    if path.suffix == ".jsonl":
        cases = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        cases = yaml.safe_load(text)
        if isinstance(cases, dict):  # tolerate {today: ..., cases: [...]}
            cases = cases.get("cases")
    if not isinstance(cases, list):
        raise FixtureError(f"{path}: expected a list of cases")
    return [c for c in cases if isinstance(c, dict) and c.get("id")]


def round_robin(pool: list[dict], n: int) -> list[dict]:
    """Up to `n` cases, one per bucket in turn (buckets by name, file order within a bucket),
    so every bucket is covered before any gets a second case."""
    by_bucket: dict[str, list[dict]] = {}
    for c in pool:
        by_bucket.setdefault(str(c.get("bucket", "")), []).append(c)
    picked: list[dict] = []
    while len(picked) < n and any(by_bucket.values()):
        for bucket in sorted(by_bucket):
            if by_bucket[bucket] and len(picked) < n:
                picked.append(by_bucket[bucket].pop(0))
    return picked


def check_programs(engines: set[str]) -> None:
    for tool in ["sox", *sorted(PROGRAMS[e] for e in engines if e in PROGRAMS)]:
        if shutil.which(tool) is None:
            raise FixtureError(f"{tool} not found on PATH (apt-get install {tool})")


def run_tool(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise FixtureError(f"{' '.join(cmd[:3])} ...: {proc.stderr.strip()[:300]}")


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise FixtureError(f"{path}: expected 16-bit PCM")
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
        if w.getnchannels() > 1:
            x = x.reshape(-1, w.getnchannels()).mean(axis=1)
        return x, w.getframerate()


def write_wav(path: Path, x: np.ndarray, rate: int) -> None:
    pcm = np.clip(np.round(x * 32767.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def sox_rate(src: Path, dst: Path, rate: int, *effects: str) -> None:
    run_tool(["sox", "-R", str(src), "-r", str(rate), "-c", "1", "-b", "16", str(dst), *effects])


def _engine_wav(tts: TtsClient, voice: Voice, spoken: str, raw: Path) -> None:
    """The engine's own rendering of `spoken` into `raw` (any rate)."""
    if voice.engine == "piper":
        pcm, sr = tts.synthesize_all(spoken, normalize=False, length_scale=voice.speed,
                                     noise_scale=0.0, noise_w_scale=0.0)
        write_wav(raw, pcm.astype(np.float32) / 32768.0, sr)
    elif voice.engine == "espeak":
        pitch = [] if voice.pitch is None else ["-p", str(voice.pitch)]
        run_tool(["espeak-ng", "-v", voice.name, "-s", str(int(voice.speed)), *pitch, "-w", str(raw), spoken])
    elif voice.engine == "flite":
        run_tool(["flite", "-voice", voice.name, "--setf", f"duration_stretch={voice.speed:g}",
                  "-t", spoken, "-o", str(raw)])
    else:
        raise FixtureError(f"unknown speech engine {voice.engine!r} (piper, espeak, flite)")


def speak(tts: TtsClient, voice: Voice, text: str, tmp: Path) -> np.ndarray:
    """One utterance as float32 at 16 kHz, peak 0.7 (the same level for every voice)."""
    raw, out = tmp / "raw.wav", tmp / "16k.wav"
    _engine_wav(tts, voice, speakable(text), raw)
    sox_rate(raw, out, RATE)
    x, _ = read_wav(out)
    peak = float(np.max(np.abs(x))) or 1.0
    return (x / peak * 0.7).astype(np.float32)


def speak_turns(tts: TtsClient, voice: Voice, texts: list[str], tmp: Path) -> np.ndarray:
    """Several caller turns by one voice, TURN_GAP_S of silence between them."""
    gap = np.zeros(int(TURN_GAP_S * RATE), np.float32)
    parts: list[np.ndarray] = []
    for k, text in enumerate(texts):
        parts += ([gap] if k else []) + [speak(tts, voice, text, tmp)]
    return np.concatenate(parts)


def _noise(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "alsa":
        src = _read_alsa_noise()
        reps = int(np.ceil(n / len(src)))
        start = int(rng.integers(0, len(src)))
        return np.tile(src, reps + 1)[start:start + n]
    white = rng.standard_normal(n)
    spectrum = np.fft.rfft(white)
    f = np.fft.rfftfreq(n, 1.0 / RATE)
    f[0] = f[1] if n > 1 else 1.0
    shaped = spectrum / (np.sqrt(f) if kind == "pink" else f)  # 1/f power, or 1/f^2 (brown)
    return np.fft.irfft(shaped, n).astype(np.float32)


_ALSA_CACHE: dict[str, np.ndarray] = {}


def _read_alsa_noise() -> np.ndarray:
    if "x" not in _ALSA_CACHE:
        if not ALSA_NOISE.exists():
            raise FixtureError(f"{ALSA_NOISE}: missing (install Debian alsa-utils)")
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "n.wav"
            sox_rate(ALSA_NOISE, out, RATE)
            _ALSA_CACHE["x"] = read_wav(out)[0]
    return _ALSA_CACHE["x"]


def add_noise(x: np.ndarray, kind: str, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    """Noise at `snr_db` below the speech's power (measured where it is speech, not silence)."""
    noise = _noise(kind, len(x), rng)
    speech_power = float(np.mean(x[np.abs(x) > 0.01] ** 2)) if np.any(np.abs(x) > 0.01) else 1e-6
    noise_power = float(np.mean(noise ** 2)) or 1e-12
    noise *= np.sqrt(speech_power / (noise_power * 10 ** (snr_db / 10)))
    y = x + noise
    peak = float(np.max(np.abs(y)))
    return y / peak * 0.9 if peak > 0.95 else y


def telephone(x: np.ndarray, tmp: Path) -> np.ndarray:
    """Band-limit to 300-3400 Hz, 8 kHz, G.711 mu-law round trip; returns 8 kHz float."""
    src, mu, out = tmp / "tel_in.wav", tmp / "tel.ul.wav", tmp / "tel_out.wav"
    write_wav(src, x, RATE)
    run_tool(["sox", "-R", str(src), "-r", str(TELEPHONE_RATE), "-e", "mu-law", "-b", "8", str(mu),
              "sinc", "300-3400"])
    sox_rate(mu, out, TELEPHONE_RATE)
    return read_wav(out)[0]


def case_rng(case_id: str, seed: int = SEED) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}:{case_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def pad(x: np.ndarray, rng: np.random.Generator, rate: int = RATE) -> tuple[np.ndarray, float, float]:
    lead, trail = (round(float(v), 2) for v in rng.uniform(0.3, 0.6, size=2))
    return np.concatenate([np.zeros(int(lead * rate), np.float32), x,
                           np.zeros(int(trail * rate), np.float32)]), lead, trail


def clear_wavs(out_dir: Path) -> None:
    """A fresh output folder: old recordings of cases no longer selected must not linger."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.wav"):
        old.unlink()


def write_manifest(out_dir: Path, manifest: dict, generator: str) -> None:
    (out_dir / "manifest.yaml").write_text(
        f"# Generated by {generator}; do not edit by hand, rerun the script.\n"
        + yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True, width=100), encoding="utf-8")


def relative(path: Path) -> str:
    """`path` as the manifest names it: relative to the repository when inside it."""
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
