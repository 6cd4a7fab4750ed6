#!/usr/bin/env python3
"""Speak the gold cases of every development domain, in many voices and over many lines.

    .venv/bin/python scripts/make_domain_audio.py [--domain NAME ...] [--per-domain 24]
        [--out .cache/audio_domains] [--corpus fixtures/domains] [--seed N]

Per domain, `--per-domain` cases without injected faults, round-robin over buckets (multi-turn
calls included: their turns spoken by one voice, 1.5 s apart), each as `<out>/<domain>/<id>.wav`
with a `manifest.yaml` in fixtures/audio's format plus `domain`, `pitch`, `style` and `channel`.
The voices, channels (wideband, light and heavy noise, 8 kHz G.711 telephone) and speaking styles
(hesitant, fast) come from the table in speech_conditions.py, dealt so that every domain gets
every condition; a hesitant speaker's fillers and restarts are in the manifest's `spoken` text,
the case's own text in `texts`. Deterministic from the seed and the case ids: a rerun writes the
same bytes. Measure the ASR on the result with `run.py bench wer --audio-dir <out>`.
Needs sox, espeak-ng and flite on PATH (scripts/setup.sh installs them); nothing is downloaded.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from audio_synth import (RATE, ROOT, SEED, TELEPHONE_RATE, TURN_GAP_S, FixtureError, TtsClient,
                         add_noise, case_rng, check_programs, clear_wavs, load_cases, pad, relative,
                         round_robin, speak_turns, speakable, telephone, write_manifest, write_wav)
from evaluation.cases import CasesError
from evaluation.corpus import Domain, discover
from speech_conditions import CHANNELS, NOISE_KINDS, VOICES, Channel, Condition, deal, hesitant

GENERATOR = "scripts/make_domain_audio.py"
DEFAULT_OUT = ROOT / ".cache" / "audio_domains"
DEFAULT_CORPUS = ROOT / "fixtures" / "domains"


def caller_texts(case: dict) -> list[str]:
    """What the caller says, turn by turn ([] when the case has neither question nor turns)."""
    if isinstance(case.get("turns"), list):
        return [str(t) for t in case["turns"] if str(t).strip()]
    question = case.get("question")
    return [question] if isinstance(question, str) and question.strip() else []


def pick(cases: list[dict], n: int) -> list[dict]:
    """`n` speakable cases without injected faults, one bucket after another."""
    return round_robin([c for c in cases if not c.get("faults") and caller_texts(c)], n)


def render(tts: TtsClient, domain: str, case: dict, cond: Condition, seed: int,
           tmp: Path) -> tuple[np.ndarray, dict]:
    """One case's recording and its manifest entry (without file name and duration)."""
    rng = case_rng(case["id"], seed)
    texts = caller_texts(case)
    said = [hesitant(t, rng) for t in texts] if cond.style == "hesitant" else texts
    x, lead, trail = pad(speak_turns(tts, cond.voice, said, tmp), rng)
    noise = None
    if cond.channel.snr_db:
        kind = NOISE_KINDS[int(rng.integers(len(NOISE_KINDS)))]
        snr = cond.channel.snr_db[int(rng.integers(len(cond.channel.snr_db)))]
        noise = {"type": kind, "snr_db": snr}
        x = add_noise(x, kind, snr, rng)  # noise fills the pads too
    rate = RATE
    if cond.channel.telephone:
        x, rate = telephone(x, tmp), TELEPHONE_RATE
    entry = {
        "id": case["id"], "file": f"{case['id']}.wav", "bucket": case.get("bucket", ""), "domain": domain,
        "kind": "call" if "turns" in case else "question", "voice": cond.voice.label,
        "speed": cond.voice.manifest_speed(), "pitch": cond.voice.pitch, "style": cond.style,
        "channel": cond.channel.name, "noise": noise, "telephone": cond.channel.telephone,
        "sample_rate": rate, "duration_s": round(len(x) / rate, 2), "lead_silence_s": lead,
        "trail_silence_s": trail, "texts": texts, "spoken": [speakable(t) for t in said],
    }
    return x, entry


def build_domain(tts: TtsClient, domain: Domain, out_dir: Path, n: int, seed: int,
                 channel: Channel | None = None) -> list[dict]:
    cases = pick(load_cases(domain.cases_path), n)
    if not cases:
        raise FixtureError(f"{domain.cases_path}: no cases without faults to speak")
    clear_wavs(out_dir)
    entries = []
    with tempfile.TemporaryDirectory() as d:
        for case, cond in zip(cases, deal(len(cases), domain.name, seed)):
            if channel is not None:  # every case over this one line (e.g. all telephone)
                cond = dataclasses.replace(cond, channel=channel)
            x, entry = render(tts, domain.name, case, cond, seed, Path(d))
            write_wav(out_dir / entry["file"], x, entry["sample_rate"])
            entries.append(entry)
            print(f"{domain.name}/{entry['file']:<16} {entry['voice']:<22} {cond.style:<8} "
                  f"{cond.channel.name:<11} {entry['duration_s']:.1f}s", file=sys.stderr)
    manifest = {"generator": GENERATOR, "domain": domain.name, "cases_file": relative(domain.cases_path),
                "seed": seed, "turn_gap_s": TURN_GAP_S, "files": entries}
    write_manifest(out_dir, manifest, GENERATOR)
    return entries


def domains(corpus: Path, names: list[str] | None) -> list[Domain]:
    try:
        found = {d.name: d for d in discover(corpus)}
    except CasesError as exc:
        raise FixtureError(str(exc)) from None
    unknown = [n for n in names or [] if n not in found]
    if unknown:
        raise FixtureError(f"unknown domain {unknown[0]!r}; {corpus} has: {', '.join(found)}")
    return [found[n] for n in dict.fromkeys(names)] if names else list(found.values())


def build(corpus: Path, names: list[str] | None, out: Path, n: int, seed: int,
          channel: Channel | None = None) -> dict[str, list[dict]]:
    chosen = domains(corpus, names)
    check_programs({v.engine for v in VOICES})
    with TtsClient() as tts:
        return {d.name: build_domain(tts, d, out / d.name, n, seed, channel) for d in chosen}


def _channel(name: str) -> Channel:
    found = {c.name: c for c in CHANNELS}
    if name not in found:
        raise argparse.ArgumentTypeError(f"unknown channel {name!r}; choose one of {', '.join(found)}")
    return found[name]


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="folder of domains (fixtures/domains)")
    ap.add_argument("--domain", action="append", help="speak only this domain (repeatable; default: all)")
    ap.add_argument("--per-domain", type=_positive, default=24, help="cases per domain (default 24)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="one sub-folder per domain (.cache/audio_domains)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--channel", type=_channel, help="speak every case over this channel (default: deal them all)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        made = build(args.corpus, args.domain, args.out, args.per_domain, args.seed, args.channel)
    except FixtureError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    files = sum(len(e) for e in made.values())
    size = sum((args.out / d / e["file"]).stat().st_size for d, es in made.items() for e in es)
    print(f"wrote {files} files ({size / 1e6:.1f} MB) for {len(made)} domains to {args.out} "
          f"in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
