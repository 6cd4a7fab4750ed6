"""`run.py bench wer`: word error rate of the agent's speech recognition on generated recordings.

    python3 run.py bench wer --audio-dir .cache/audio_domains [--audio-dir DIR ...] [--json]

An audio dir holds a `manifest.yaml` (scripts/make_audio_fixtures.py, scripts/make_domain_audio.py)
or is a parent with one such sub-folder per domain. Every listed file is heard as a call hears it:
read, resampled to 16 kHz when it is not (an 8 kHz telephone file as `eval --audio-dir` does),
cut into turns by the call's own VAD settings (`--segment whole`: the file as one turn), and
transcribed by `--asr-model` with the call path's settings. The transcript is compared with the
manifest's `spoken` text (see wer.py for the normalisation). Reported per voice, engine,
channel (wideband / noise-light / noise-heavy / telephone), speaking style and domain, and overall,
with the machine's load average and cores, since a busy machine slows but does not change it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from kb.measure import usable_cores
from policy.cli import fail

from .audio import AudioError, resample
from .audio_files import read_audio
from .call.config import CallConfig
from .interfaces import Transcriber
from .stages.asr import SAMPLE_RATE, AsrError
from .stages.asr_moonshine import open_transcriber
from .stages.vad import split_turns
from .wer import WerCount, WerUnavailable, count

GROUPS = ["voice", "engine", "channel", "style", "domain"]
NOISE_LIGHT_DB = 15.0  # at or above: light noise (the generators use ~20 dB); below: heavy (8-12 dB)


class BenchError(RuntimeError):
    """Bad input: a missing folder, no manifest, a manifest without the files it lists."""


@dataclass
class Recording:
    path: Path
    entry: dict
    domain: str


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run.py bench wer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--audio-dir", action="append", required=True, type=Path,
                   help="folder with a manifest.yaml, or with one such sub-folder per domain (repeatable)")
    p.add_argument("--asr-model", default=CallConfig().asr_model, help="tiny.en (the call's), base, moonshine, or a whisper model dir")
    p.add_argument("--segment", choices=["vad", "whole"], default="vad",
                   help="vad: turns as the call's VAD cuts them (default); whole: the file as one turn")
    p.add_argument("--limit", type=int, default=0, help="at most this many files (0 = all)")
    p.add_argument("--out", type=Path, default=None, help="write every file's reference and transcript (JSON lines)")
    p.add_argument("--json", action="store_true", help="end with one JSON line of the results")
    return p


def manifest_dirs(folder: Path) -> list[Path]:
    """`folder` itself when it has a manifest, else its sub-folders that have one."""
    if not folder.is_dir():
        raise BenchError(f"{folder}: no such folder")
    if (folder / "manifest.yaml").is_file():
        return [folder]
    subs = sorted(d for d in folder.iterdir() if (d / "manifest.yaml").is_file())
    if not subs:
        raise BenchError(f"{folder}: no manifest.yaml in it or in its sub-folders "
                         "(make one with scripts/make_domain_audio.py)")
    return subs


def load_recordings(folders: list[Path]) -> list[Recording]:
    out: list[Recording] = []
    for folder in dict.fromkeys(d for f in folders for d in manifest_dirs(f)):
        path = folder / "manifest.yaml"
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as e:
            raise BenchError(f"{path}: cannot read it ({' '.join(str(e).split())[:200]})") from None
        files = data.get("files") if isinstance(data, dict) else None
        if not isinstance(files, list) or not files:
            raise BenchError(f"{path}: expected `files:`, a list of recordings")
        for i, entry in enumerate(files):
            if not isinstance(entry, dict) or not entry.get("file") or not isinstance(entry.get("spoken"), list):
                raise BenchError(f"{path}: entry {i + 1} needs `file` and `spoken` (a list of turns)")
            wav = folder / str(entry["file"])
            if not wav.is_file():
                raise BenchError(f"{wav}: listed in {path} but missing")
            out.append(Recording(wav, entry, str(entry.get("domain") or data.get("domain") or folder.name)))
    return out


def channel_of(entry: dict) -> str:
    if entry.get("channel"):
        return str(entry["channel"])
    if entry.get("telephone"):
        return "telephone"
    noise = entry.get("noise")
    if isinstance(noise, dict):
        return "noise-light" if float(noise.get("snr_db", 0.0)) >= NOISE_LIGHT_DB else "noise-heavy"
    return "wideband"


def group_keys(rec: Recording) -> dict[str, str]:
    voice = str(rec.entry.get("voice", "unknown"))
    return {"voice": voice, "engine": voice.split(":")[0], "channel": channel_of(rec.entry),
            "style": str(rec.entry.get("style") or "plain"), "domain": rec.domain}


def hear(transcriber: Transcriber, rec: Recording, segment: str, config: CallConfig) -> tuple[str, float, int]:
    """(transcript, seconds of audio, turns heard) as the call path would hear the file: an 8 kHz
    telephone file with the telephone line's VAD threshold and pre-roll."""
    pcm, sr = read_audio(rec.path)
    config = config.model_copy(update={"input_rate": sr})
    x = resample(pcm, sr, SAMPLE_RATE) if sr != SAMPLE_RATE else pcm
    if segment == "whole":
        turns = [x]
    else:
        turns = split_turns(x, SAMPLE_RATE, end_silence_ms=config.end_silence_ms, max_turn_s=config.max_turn_s,
                            threshold=config.speech_threshold(), min_speech_ms=config.min_speech_ms,
                            pre_roll_ms=config.speech_pre_roll_ms())
    texts = [transcriber.transcribe(np.asarray(t, dtype=np.float32)).text for t in turns]
    return " ".join(t for t in texts if t), len(x) / SAMPLE_RATE, len(turns)


def run(recs: list[Recording], transcriber: Transcriber, segment: str, out: Path | None,
        progress: bool) -> tuple[dict[str, dict[str, WerCount]], WerCount, float]:
    """Tallies per group and key, the overall tally, and the seconds of audio heard."""
    config = CallConfig()
    groups: dict[str, dict[str, WerCount]] = {g: defaultdict(WerCount) for g in GROUPS}
    total, audio_s = WerCount(), 0.0
    sink = open(out, "w", encoding="utf-8") if out else None
    try:
        for i, rec in enumerate(recs, 1):
            heard, seconds, turns = hear(transcriber, rec, segment, config)
            said = " ".join(str(t) for t in rec.entry["spoken"])
            c = count(said, heard)
            audio_s += seconds
            total.add(c)
            keys = group_keys(rec)
            for g in GROUPS:
                groups[g][keys[g]].add(c)
            if sink:
                sink.write(json.dumps({"file": str(rec.path), **keys, "turns": turns, "spoken": said,
                                       "heard": heard, **c.as_dict()}) + "\n")
            if progress and (i % 25 == 0 or i == len(recs)):
                print(f"  {i}/{len(recs)} files, WER so far {total.rate or 0.0:.3f}", file=sys.stderr, flush=True)
    finally:
        if sink:
            sink.close()
    return groups, total, audio_s


def format_table(groups: dict[str, dict[str, WerCount]], total: WerCount) -> str:
    head = f"{'':<24}{'files':>6}{'words':>7}{'sub':>6}{'del':>6}{'ins':>6}{'WER':>8}"
    lines = [head]

    def row(name: str, c: WerCount) -> str:
        rate = "-" if c.rate is None else f"{c.rate * 100:.1f}%"
        return (f"  {name[:22]:<22}{c.files:>6}{c.words:>7}{c.substitutions:>6}{c.deletions:>6}"
                f"{c.insertions:>6}{rate:>8}")

    for g in GROUPS:
        lines.append(f"by {g}")
        lines += [row(k, groups[g][k]) for k in sorted(groups[g])]
    lines += ["-" * len(head), row("overall", total)]
    return "\n".join(lines)


def cli(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.limit < 0:
        return fail(f"--limit must be 0 (all) or more, got {args.limit}")
    try:
        recs = load_recordings(args.audio_dir)
        recs = recs[: args.limit] if args.limit else recs
        t0 = time.perf_counter()
        transcriber = open_transcriber(args.asr_model)
        transcriber.warmup()
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        groups, total, audio_s = run(recs, transcriber, args.segment, args.out, progress=not args.json)
        took = time.perf_counter() - t0
    except (BenchError, AudioError, AsrError, WerUnavailable) as e:
        return fail(str(e))
    except OSError as e:  # --out not writable
        return fail(f"{e.filename or args.out}: {e.strerror or e}")
    load_avg = [round(v, 2) for v in os.getloadavg()]
    result = {"overall": total.as_dict(), "groups": {g: {k: c.as_dict() for k, c in sorted(groups[g].items())}
                                                     for g in GROUPS},
              "asr_model": args.asr_model, "segment": args.segment, "audio_s": round(audio_s, 1),
              "seconds": round(took, 1), "rtf": round(took / max(audio_s, 1e-9), 3), "load_s": round(load_s, 1),
              "load_avg": load_avg, "cores": usable_cores(), "cpu_count": os.cpu_count()}
    if args.json:
        print(json.dumps(result))
        return 0
    print(format_table(groups, total))
    print(f"{total.files} files, {audio_s:.0f} s of audio heard in {took:.0f} s (RTF {result['rtf']}, "
          f"model load {load_s:.1f} s); ASR {args.asr_model}, segment {args.segment}; "
          f"load average {' '.join(str(v) for v in load_avg)} on {usable_cores()} usable cores "
          f"({os.cpu_count()} in the machine)")
    return 0
