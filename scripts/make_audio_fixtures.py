#!/usr/bin/env python3
"""Regenerate fixtures/audio/ from the gold cases: spoken caller questions and multi-turn calls.

    .venv/bin/python scripts/make_audio_fixtures.py [--cases fixtures/cases.yaml] [--out fixtures/audio]

Deterministic: case selection, voices, speeds, noise and padding follow from the case ids and
a fixed seed; piper runs with zero noise scales and espeak-ng is deterministic, so a rerun
writes the same files. Nothing is downloaded: voices are piper joe (through the TTS worker)
and espeak-ng; background noise is generated (pink / brown) or taken from the Debian
alsa-utils recording /usr/share/sounds/alsa/Noise.wav. The pieces live in audio_synth.py,
shared with make_domain_audio.py (every development domain, more varied speech).

Per selected single-question case: `<id>.wav`, 16 kHz mono PCM16 (about 1 in 6 as an 8 kHz
telephone copy: band-limited 300-3400 Hz and passed through G.711 mu-law). Per multi-turn
case: `<id>.wav` with the turns spoken by one voice, 1.5 s of silence between them.
`manifest.yaml` lists every file with its voice, speed, noise, rate and texts.
Needs `sox` and `espeak-ng` on PATH.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from audio_synth import (RATE, ROOT, SEED, TURN_GAP_S, FixtureError, TtsClient, Voice, add_noise,
                         case_rng, check_programs, clear_wavs, load_cases, pad, relative, round_robin,
                         speak, speak_turns, speakable, telephone, write_manifest, write_wav)

# Voice rotation: espeak speed is words per minute; piper speed is its length_scale (>1 slower).
VOICES: list[Voice] = [Voice(engine, name, speed) for engine, name, speed in [
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
]]
NOISES = [("pink", 20.0), ("brown", 15.0), ("alsa", 12.0), ("pink", 10.0), ("brown", 8.0), ("alsa", 18.0)]


def select(cases: list[dict], n_single: int, n_calls: int) -> tuple[list[dict], list[dict]]:
    """Round-robin over buckets (in file order within a bucket) so every bucket is covered."""
    usable = [c for c in cases if not c.get("faults")]
    singles = [c for c in usable if isinstance(c.get("question"), str) and c["question"].strip()]
    calls = [c for c in usable if isinstance(c.get("turns"), list) and len(c["turns"]) > 1]
    return round_robin(singles, n_single), round_robin(calls, n_calls)


def _single(tts: TtsClient, i: int, case: dict, out_dir: Path, tmp: Path) -> dict:
    rng = case_rng(case["id"])
    voice = VOICES[i % len(VOICES)]
    x = speak(tts, voice, case["question"], tmp)
    noisy = i % 3 == 1  # about a third get background noise
    kind, snr = NOISES[(i // 3) % len(NOISES)]
    noise = {"type": kind, "snr_db": snr} if noisy else None
    x, lead, trail = pad(x, rng)
    if noisy:
        x = add_noise(x, kind, snr, rng)  # noise fills the pads too
    tel = i % 6 == 5
    rate = RATE
    if tel:
        x, rate = telephone(x, tmp), 8000
    path = out_dir / f"{case['id']}.wav"
    write_wav(path, x, rate)
    print(f"{path.name:<14} {voice.label:<21} speed={voice.speed:<5} noise={noise} "
          f"rate={rate} {len(x) / rate:.1f}s", file=sys.stderr)
    return _entry(case, "question", [case["question"]], voice, noise, tel, rate, len(x) / rate, lead, trail)


def _call(tts: TtsClient, j: int, case: dict, out_dir: Path, tmp: Path) -> dict:
    rng = case_rng(case["id"])
    voice = VOICES[(j * 3 + 1) % len(VOICES)]
    turns = [str(t) for t in case["turns"]]
    x, lead, trail = pad(speak_turns(tts, voice, turns, tmp), rng)
    path = out_dir / f"{case['id']}.wav"
    write_wav(path, x, RATE)
    print(f"{path.name:<14} call of {len(turns)} turns, {len(x) / RATE:.1f}s", file=sys.stderr)
    return _entry(case, "call", turns, voice, None, False, RATE, len(x) / RATE, lead, trail)


def build(cases_path: Path, out_dir: Path, n_single: int, n_calls: int) -> list[dict]:
    check_programs({"espeak"})
    singles, calls = select(load_cases(cases_path), n_single, n_calls)
    if not singles:
        raise FixtureError(f"{cases_path}: no single-question cases without faults")
    clear_wavs(out_dir)
    with TtsClient() as tts, tempfile.TemporaryDirectory() as d:
        entries = [_single(tts, i, case, out_dir, Path(d)) for i, case in enumerate(singles)]
        entries += [_call(tts, j, case, out_dir, Path(d)) for j, case in enumerate(calls)]
    manifest = {"generator": "scripts/make_audio_fixtures.py", "cases_file": relative(cases_path),
                "seed": SEED, "turn_gap_s": TURN_GAP_S, "files": entries}
    write_manifest(out_dir, manifest, "scripts/make_audio_fixtures.py")
    return entries


def _entry(case: dict, kind: str, texts: list[str], voice: Voice, noise: dict | None, tel: bool,
           rate: int, duration: float, lead: float, trail: float) -> dict:
    return {
        "id": case["id"], "file": f"{case['id']}.wav", "bucket": case.get("bucket", ""),
        "kind": kind, "voice": voice.label, "speed": voice.manifest_speed(),
        "noise": noise, "telephone": tel, "sample_rate": rate, "duration_s": round(duration, 2),
        "lead_silence_s": lead, "trail_silence_s": trail,
        "texts": texts, "spoken": [speakable(t) for t in texts],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
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
