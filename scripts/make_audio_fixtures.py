#!/usr/bin/env python3
"""Regenerate fixtures/audio/ from the gold cases: spoken caller questions and multi-turn calls.

    .venv/bin/python scripts/make_audio_fixtures.py [--cases fixtures/cases.yaml] [--out fixtures/audio]

Deterministic: case selection, voices, speeds, noise and padding follow from the case ids and
a fixed seed; piper runs with zero noise scales and espeak-ng is deterministic, so a rerun
writes the same files. Nothing is downloaded: voices are piper joe (through the TTS worker)
and espeak-ng; background noise is generated (pink / brown) or taken from the Debian
alsa-utils recording /usr/share/sounds/alsa/Noise.wav.

Per selected single-question case: `<id>.wav`, 16 kHz mono PCM16 (about 1 in 6 as an 8 kHz
telephone copy: band-limited 300-3400 Hz and passed through G.711 mu-law). Per multi-turn
case: `<id>.wav` with the turns spoken by one voice, 1.5 s of silence between them.
`manifest.yaml` lists every file with its voice, speed, noise, rate and texts.
Needs `sox` and `espeak-ng` on PATH.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from voice_agent.stages.tts import TtsClient, speakable  # noqa: E402  (path set up above)

SEED = 20260201
RATE = 16000
TURN_GAP_S = 1.5
ALSA_NOISE = Path("/usr/share/sounds/alsa/Noise.wav")
# Voice rotation: (engine, voice, speed). espeak speed is words per minute; piper speed is
# its length_scale (>1 slower).
VOICES: list[tuple[str, str, float]] = [
    ("piper", "joe", 1.0),
    ("espeak", "en-us", 150),
    ("piper", "joe", 1.1),
    ("espeak", "en-gb", 160),
    ("espeak", "en-us+m3", 170),
    ("piper", "joe", 0.95),
    ("espeak", "en-us+f3", 140),
    ("espeak", "en-us", 185),
    ("piper", "joe", 1.05),
    ("espeak", "en-us-nyc", 165),
    ("espeak", "en-gb-x-rp+f4", 150),
]
NOISES = [("pink", 20.0), ("brown", 15.0), ("alsa", 12.0), ("pink", 10.0), ("brown", 8.0), ("alsa", 18.0)]


class FixtureError(RuntimeError):
    pass


def load_cases(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FixtureError(f"{path}: cannot read cases file: {exc}") from None
    if path.suffix == ".jsonl":
        cases = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        cases = yaml.safe_load(text)
        if isinstance(cases, dict):  # tolerate {cases: [...]}
            cases = cases.get("cases")
    if not isinstance(cases, list):
        raise FixtureError(f"{path}: expected a list of cases")
    return [c for c in cases if isinstance(c, dict) and c.get("id")]


def select(cases: list[dict], n_single: int, n_calls: int) -> tuple[list[dict], list[dict]]:
    """Round-robin over buckets (in file order within a bucket) so every bucket is covered."""
    usable = [c for c in cases if not c.get("faults")]
    singles = [c for c in usable if isinstance(c.get("question"), str) and c["question"].strip()]
    calls = [c for c in usable if isinstance(c.get("turns"), list) and len(c["turns"]) > 1]

    def round_robin(pool: list[dict], n: int) -> list[dict]:
        by_bucket: dict[str, list[dict]] = {}
        for c in pool:
            by_bucket.setdefault(str(c.get("bucket", "")), []).append(c)
        picked: list[dict] = []
        while len(picked) < n and any(by_bucket.values()):
            for bucket in sorted(by_bucket):
                if by_bucket[bucket] and len(picked) < n:
                    picked.append(by_bucket[bucket].pop(0))
        return picked

    return round_robin(singles, n_single), round_robin(calls, n_calls)


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise FixtureError(f"{' '.join(cmd[:3])} ...: {proc.stderr.strip()[:300]}")


def _read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise FixtureError(f"{path}: expected 16-bit PCM")
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
        if w.getnchannels() > 1:
            x = x.reshape(-1, w.getnchannels()).mean(axis=1)
        return x, w.getframerate()


def _write_wav(path: Path, x: np.ndarray, rate: int) -> None:
    pcm = np.clip(np.round(x * 32767.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def _sox_rate(src: Path, dst: Path, rate: int, *effects: str) -> None:
    _run(["sox", "-R", str(src), "-r", str(rate), "-c", "1", "-b", "16", str(dst), *effects])


def speak(tts: TtsClient, engine: str, voice: str, speed: float, text: str, tmp: Path) -> np.ndarray:
    """One utterance as float32 at 16 kHz."""
    raw, out = tmp / "raw.wav", tmp / "16k.wav"
    spoken = speakable(text)
    if engine == "piper":
        pcm, sr = tts.synthesize_all(spoken, normalize=False, length_scale=speed,
                                     noise_scale=0.0, noise_w_scale=0.0)
        _write_wav(raw, pcm.astype(np.float32) / 32768.0, sr)
    else:
        _run(["espeak-ng", "-v", voice, "-s", str(int(speed)), "-w", str(raw), spoken])
    _sox_rate(raw, out, RATE)
    x, _ = _read_wav(out)
    peak = float(np.max(np.abs(x))) or 1.0
    return (x / peak * 0.7).astype(np.float32)  # same level for every voice


def _noise(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "alsa":
        src, _ = _read_alsa_noise()
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


def _read_alsa_noise() -> tuple[np.ndarray, int]:
    if "x" not in _ALSA_CACHE:
        if not ALSA_NOISE.exists():
            raise FixtureError(f"{ALSA_NOISE}: missing (install Debian alsa-utils)")
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "n.wav"
            _sox_rate(ALSA_NOISE, out, RATE)
            _ALSA_CACHE["x"] = _read_wav(out)[0]
    return _ALSA_CACHE["x"], RATE


def add_noise(x: np.ndarray, kind: str, snr_db: float, rng: np.random.Generator) -> np.ndarray:
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
    _write_wav(src, x, RATE)
    _run(["sox", "-R", str(src), "-r", "8000", "-e", "mu-law", "-b", "8", str(mu),
          "sinc", "300-3400"])
    _sox_rate(mu, out, 8000)
    return _read_wav(out)[0]


def _case_rng(case_id: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{SEED}:{case_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def pad(x: np.ndarray, rng: np.random.Generator, rate: int = RATE) -> tuple[np.ndarray, float, float]:
    lead, trail = (round(float(v), 2) for v in rng.uniform(0.3, 0.6, size=2))
    return np.concatenate([np.zeros(int(lead * rate), np.float32), x,
                           np.zeros(int(trail * rate), np.float32)]), lead, trail


def build(cases_path: Path, out_dir: Path, n_single: int, n_calls: int) -> list[dict]:
    for tool in ("sox", "espeak-ng"):
        if shutil.which(tool) is None:
            raise FixtureError(f"{tool} not found on PATH (apt-get install {tool})")
    singles, calls = select(load_cases(cases_path), n_single, n_calls)
    if not singles:
        raise FixtureError(f"{cases_path}: no single-question cases without faults")
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.wav"):
        old.unlink()
    entries: list[dict] = []
    with TtsClient() as tts, tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for i, case in enumerate(singles):
            rng = _case_rng(case["id"])
            engine, voice, speed = VOICES[i % len(VOICES)]
            x = speak(tts, engine, voice, speed, case["question"], tmp)
            noise = None
            if i % 3 == 1:  # about a third get background noise
                kind, snr = NOISES[(i // 3) % len(NOISES)]
                noise = {"type": kind, "snr_db": snr}
            x, lead, trail = pad(x, rng)
            if noise:
                x = add_noise(x, noise["type"], noise["snr_db"], rng)  # noise fills the pads too
            tel = i % 6 == 5
            rate = RATE
            if tel:
                x, rate = telephone(x, tmp), 8000
            path = out_dir / f"{case['id']}.wav"
            _write_wav(path, x, rate)
            entries.append(_entry(case, "question", [case["question"]], engine, voice, speed,
                                  noise, tel, rate, len(x) / rate, lead, trail))
            print(f"{path.name:<14} {engine}:{voice:<14} speed={speed:<5} noise={noise} "
                  f"rate={rate} {len(x) / rate:.1f}s", file=sys.stderr)
        for j, case in enumerate(calls):
            rng = _case_rng(case["id"])
            engine, voice, speed = VOICES[(j * 3 + 1) % len(VOICES)]
            turns = [str(t) for t in case["turns"]]
            gap = np.zeros(int(TURN_GAP_S * RATE), np.float32)
            parts: list[np.ndarray] = []
            for k, turn in enumerate(turns):
                parts += ([gap] if k else []) + [speak(tts, engine, voice, speed, turn, tmp)]
            x, lead, trail = pad(np.concatenate(parts), rng)
            path = out_dir / f"{case['id']}.wav"
            _write_wav(path, x, RATE)
            entries.append(_entry(case, "call", turns, engine, voice, speed, None, False, RATE,
                                  len(x) / RATE, lead, trail))
            print(f"{path.name:<14} call of {len(turns)} turns, {len(x) / RATE:.1f}s", file=sys.stderr)
    manifest = {
        "generator": "scripts/make_audio_fixtures.py",
        "cases_file": str(cases_path.relative_to(ROOT) if cases_path.is_relative_to(ROOT) else cases_path),
        "seed": SEED,
        "turn_gap_s": TURN_GAP_S,
        "files": entries,
    }
    (out_dir / "manifest.yaml").write_text(
        "# Generated by scripts/make_audio_fixtures.py; do not edit by hand, rerun the script.\n"
        + yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True, width=100), encoding="utf-8")
    return entries


def _entry(case: dict, kind: str, texts: list[str], engine: str, voice: str, speed: float,
           noise: dict | None, tel: bool, rate: int, duration: float, lead: float,
           trail: float) -> dict:
    return {
        "id": case["id"], "file": f"{case['id']}.wav", "bucket": case.get("bucket", ""),
        "kind": kind, "voice": f"{engine}:{voice}",
        "speed": speed if engine == "espeak" else {"length_scale": speed},
        "noise": noise, "telephone": tel, "sample_rate": rate, "duration_s": round(duration, 2),
        "lead_silence_s": lead, "trail_silence_s": trail,
        "texts": texts, "spoken": [speakable(t) for t in texts],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=Path, default=ROOT / "fixtures" / "cases.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "fixtures" / "audio")
    ap.add_argument("--singles", type=int, default=51, help="single-question cases to speak (51: 3 per bucket)")
    ap.add_argument("--calls", type=int, default=8, help="multi-turn calls to speak (8)")
    args = ap.parse_args(argv)
    try:
        entries = build(args.cases, args.out, args.singles, args.calls)
    except FixtureError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = sum((args.out / e["file"]).stat().st_size for e in entries)
    print(f"wrote {len(entries)} files ({size / 1e6:.1f} MB) and manifest.yaml to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
