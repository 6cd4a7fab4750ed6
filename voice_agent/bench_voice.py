"""`run.py bench voice`: latency from the end of caller speech to the first reply audio byte.

Replays recorded calls at real-time pace (20 ms chunks with real sleeps, then the caller's
silence), through the same `CallSession` the server uses, and reports p50/p95 per stage and
in total, the ASR real-time factor, peak memory and the cores used.

"End of caller speech" is measured on the recording itself (the last 10 ms block of a turn
louder than both the turn's peak − 30 dB and the noise floor + 6 dB), so the endpointing wait
(`end_silence_ms`) counts against the total, as a caller experiences it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

import numpy as np

from kb.loader import kb_dir_error
from kb.measure import percentile, usable_cores
from policy.cli import fail

from .audio import AudioError, float_to_pcm16, mulaw_decode, mulaw_encode, resample
from .audio_files import read_audio
from .call import CallConfig, VoiceRuntime
from .call.runtime import REHEAR_MODEL
from .stages.vad import StreamingVad

SR = 16000
STAGES = ["endpoint", "asr_wait", "asr", "retrieve", "policy", "tts_first_audio", "total"]


class BenchResult(TypedDict):
    """The report (`--json` prints it): milliseconds per stage, rates, sizes, the settings used."""

    p50_ms: float
    p95_ms: float
    stages: dict[str, dict[str, float]]  # stage -> {"p50": ms, "p95": ms}
    rtf: float
    rss_mb: float
    cores: int
    turns: int
    recordings: int
    asr_model: str
    line: str  # wideband (16 kHz) or phone (8 kHz μ-law)
    speculative_hit_rate: float
    speculative_reply_hit_rate: float
    pause_ms: int
    early_end_rate: float
    early_end_ms: int | None
    load_s: float
    goal: dict[str, int]
    # "answer": turns heard once; "refusal": turns about to be refused for lack of evidence, heard
    # again (sound-alikes, a second decode): n, p50/p95 of the total and of the extra hearing
    paths: dict[str, dict[str, float]]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run.py bench voice", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", default="fixtures/kb", help="knowledge base (default: fixtures/kb)")
    p.add_argument("--calls", default=None,
                   help="folder of call recordings (default: fixtures/audio/calls, else fixtures/audio)")
    p.add_argument("--limit", type=int, default=12, help="at most this many recordings (default 12; 0 = all)")
    p.add_argument("--asr-model", default="tiny.en")
    p.add_argument("--rehear-model", default=REHEAR_MODEL,
                   help="the second hearing's model on the refusal path: moonshine (default), base, or the "
                        "call's own (tiny.en) for none; the first model when not installed")
    p.add_argument("--line", choices=("wideband", "phone"), default="wideband",
                   help="phone: the recordings go in as a phone line's 8 kHz μ-law audio (default: wideband, 16 kHz)")
    p.add_argument("--end-silence-ms", type=int, default=500)
    p.add_argument("--no-speculative", action="store_true", help="transcribe only after the turn has ended")
    p.add_argument("--no-asr-repair", action="store_true",
                   help="skip the second, KB-biased transcription of turns about to be refused")
    p.add_argument("--no-speculative-reply", action="store_true",
                   help="transcribe at the pause, but decide and render the reply only after the turn has ended")
    p.add_argument("--no-early-end", action="store_true",
                   help="always wait the full end-of-turn silence, even after a finished question")
    p.add_argument("--pause-ms", type=int, default=None, help="VAD pause that starts the speculation "
                   "(default: CallConfig's)")
    p.add_argument("--state-dir", default=None, help="audit/handoff folder (default: a temporary one)")
    p.add_argument("--json", action="store_true", help="end with one JSON line of the results")
    p.add_argument("--out", default=None, help="folder for voice_latency.png (a histogram per stage) and "
                   "voice_latency.json (the report and every turn's milliseconds)")
    return p


def speech_ends(pcm: np.ndarray, end_silence_ms: int) -> list[float]:
    """Seconds where each caller turn's speech ends in a 16 kHz recording."""
    vad = StreamingVad(end_silence_ms=end_silence_ms, pause_ms=None)
    ends: list[float] = []
    evs = vad.feed(pcm) + vad.feed(np.zeros(SR, np.float32)) + vad.flush()
    for e in evs:
        if e.type != "turn_end" or e.audio is None:
            continue
        start = e.time_s - len(e.audio) / SR
        a = e.audio
        blocks = np.sqrt(np.mean(a[: len(a) // 160 * 160].reshape(-1, 160).astype(np.float64) ** 2, axis=1) + 1e-12)
        db = 20 * np.log10(blocks)
        # The noise floor is what the endpointer waited through: the turn's trailing silence.
        # Speech must stand clear of its loudest blocks, or noise would count as speech (and
        # make the reply look faster than the caller hears it).
        tail = db[-max(5, int(end_silence_ms * 0.8) // 10):]
        floor = np.percentile(tail, 95)
        loud = np.flatnonzero(db > max(db.max() - 30, floor + 3))
        ends.append(start + (loud[-1] + 1) * 0.01 if len(loud) else e.time_s)
    return ends


def _pct(xs: list[float], q: float) -> float:
    v = percentile(xs, q)
    return float("nan") if v is None else v


async def _one(runtime: VoiceRuntime, pcm: np.ndarray, ends: list[float], config: CallConfig) -> list[dict[str, float]]:
    call = runtime.new_call(config=config)
    first_audio: list[float] = []  # wall time of each reply's first audio byte
    done = asyncio.Event()
    replies_open: set[str] = set()
    seen_ids: set[str] = set()

    async def consume() -> None:
        async for ev in call.events():
            if ev.type == "audio_chunk" and ev.id not in seen_ids:
                seen_ids.add(ev.id)
                first_audio.append(time.perf_counter())
            if ev.type == "audio_start":
                replies_open.add(ev.id)
            elif ev.type in ("audio_end",):
                replies_open.discard(ev.id)
            done.set()

    task = asyncio.create_task(consume())
    rate = config.input_rate
    chunk = rate // 50  # 20 ms
    tail = np.zeros(int(1.5 * SR), np.float32)  # the caller waits for the answer
    data = float_to_pcm16(_as_line(np.concatenate([pcm, tail]), rate))
    t0 = time.perf_counter()
    n = len(data) // 2
    for i in range(0, n, chunk):
        await call.feed_audio(data[2 * i : 2 * (i + chunk)])
        # Real-time pace, against the clock (not cumulative sleeps) so drift does not build up.
        delay = t0 + (i + chunk) / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    await call.end_of_input()
    deadline = time.perf_counter() + 30
    while replies_open and time.perf_counter() < deadline:
        done.clear()
        try:
            await asyncio.wait_for(done.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
    await call.close()
    await task
    rows = []
    for k, t in enumerate(call.timings):
        if k >= len(ends) or k >= len(first_audio):
            break
        spoken_end_wall = t0 + ends[k]
        total = (first_audio[k] - spoken_end_wall) * 1000
        row = {"total": total, "endpoint": total - t.get("turn_end_to_first_audio", float("nan"))}
        for s in ("asr_wait", "asr", "retrieve", "policy", "tts_first_audio", "asr_rtf", "asr_speculative",
                  "speculative_reply", "speculative_reply_lead", "early_end", "rehear", "rehear_decode",
                  "rehear_fit", "rehear_model"):
            if s in t:
                row[s] = t[s]
        rows.append(row)
    return rows


def _as_line(pcm: np.ndarray, rate: int) -> np.ndarray:
    """16 kHz audio as the call receives it: unchanged, or at a phone line's 8 kHz through μ-law."""
    return pcm if rate == SR else mulaw_decode(mulaw_encode(resample(pcm, SR, rate)))


def _turn_summary(row: dict[str, float]) -> str:
    """One turn for the per-recording line: total, and why it was slow when it was."""
    marks = []
    if not row.get("asr_speculative"):
        marks.append(f"asr {row.get('asr', 0):.0f} ms after the turn")
    elif not row.get("speculative_reply"):
        marks.append("reply rendered after the turn")
    return f"{row['total']:.0f} ms" + (f" ({'; '.join(marks)})" if marks else "")


def _peak_rss_mb(runtime: VoiceRuntime) -> float:
    mine = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    pid = getattr(runtime.tts, "pid", None) if runtime.tts is not None else None
    if pid:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    mine += int(line.split()[1]) / 1024
        except OSError:
            pass
    return mine


def _load_recordings(args: argparse.Namespace) -> list[tuple[Path, np.ndarray, list[float]]] | None:
    """The recordings to replay (16 kHz) with their speech ends; None (after saying why) when
    there are none or one cannot be read."""
    folder = Path(args.calls) if args.calls else (
        Path("fixtures/audio/calls") if Path("fixtures/audio/calls").is_dir() else Path("fixtures/audio"))
    files = sorted(folder.glob("*.wav")) if folder.is_dir() else []
    if not files:
        print(f"error: {folder}: no .wav recordings found", file=sys.stderr)
        return None
    if args.limit and len(files) > args.limit:
        idx = np.linspace(0, len(files) - 1, args.limit).round().astype(int)  # spread over the buckets
        files = [files[i] for i in sorted(set(idx))]
    recordings = []
    for f in files:
        try:
            x, sr = read_audio(f)
        except AudioError as e:
            print(f"error: {e}", file=sys.stderr)
            return None
        x = resample(x, sr, SR)
        recordings.append((f, x, speech_ends(x, args.end_silence_ms)))
    return recordings


def _call_config(args: argparse.Namespace) -> CallConfig:
    # Barge-in is off here (the recordings' turns do not wait for the reply to finish), so replies
    # render straight through as in replay: paced rendering would hold the TTS worker for the next turn.
    return CallConfig(asr_model=args.asr_model, end_silence_ms=args.end_silence_ms, barge_in=False,
                      input_rate=8000 if args.line == "phone" else SR,
                      reply_lead_s=None,
                      speculative_asr=not args.no_speculative,
                      speculative_reply=not (args.no_speculative or args.no_speculative_reply),
                      asr_repair=not args.no_asr_repair,
                      early_end_ms=None if args.no_early_end else CallConfig().early_end_ms,
                      pause_ms=args.pause_ms or CallConfig().pause_ms)


def _share(rows: list[dict[str, float]], key: str) -> float:
    """Fraction of turns where a 0/1 timing flag was set."""
    return float(np.mean([r.get(key, 0.0) for r in rows]))


def _print_text(result: BenchResult, raw: dict[str, float]) -> None:
    """The human-readable report; `raw` holds the unrounded rates and sizes."""
    stages = result["stages"]
    print(f"\n{result['turns']} turns from {result['recordings']} recordings, {result['line']} line, "
          f"ASR {result['asr_model']}, {result['cores']} cores")
    print(f"{'stage':<16}{'p50 ms':>10}{'p95 ms':>10}")
    for s in STAGES:
        print(f"{s:<16}{stages[s]['p50']:>10.0f}{stages[s]['p95']:>10.0f}")
    print(f"ASR real-time factor {raw['rtf']:.3f}; speculative ASR used on {raw['spec']:.0%} of turns, "
          f"speculative reply audio on {raw['spec_reply']:.0%} (pause {result['pause_ms']} ms); turn ended early "
          f"(after {result['early_end_ms']} ms of silence) on {raw['early']:.0%}; "
          f"peak RSS {raw['rss']:.0f} MB (incl. TTS worker); load {raw['load_s']:.1f} s")
    print("end of speech -> first reply audio: p50 {p50_ms:.0f} ms, p95 {p95_ms:.0f} ms (goal 600 / 900)"
          .format(**result))
    for name, goal in (("answer", "600 / 900"), ("refusal", "p95 1300")):
        p = result["paths"][name]
        extra = (f"; hearing it again p50 {p['rehear_p50']:.0f} ms, p95 {p['rehear_p95']:.0f} ms, of which a second "
                 f"decode on {p['decoded']:.0f} turns, p50 {p['decode_p50']:.0f} ms, and a fit of the spoken requests "
                 f"for a person on {p['fitted']:.0f}, p50 {p['fit_p50']:.0f} ms") if name == "refusal" else ""
        print(f"  {name} path, {p['n']:.0f} turns: p50 {p['p50']:.0f} ms, p95 {p['p95']:.0f} ms (goal {goal}){extra}")


def _summarize(rows: list[dict[str, float]], n_recordings: int, asr_model: str, config: CallConfig,
               rss: float, load_s: float) -> tuple[BenchResult, dict[str, float]]:
    """The report, and the unrounded rates and sizes the text output prints."""
    stages = {s: {"p50": round(_pct([r[s] for r in rows if s in r], 50), 1),
                  "p95": round(_pct([r[s] for r in rows if s in r], 95), 1)} for s in STAGES}
    rtf = float(np.mean([r["asr_rtf"] for r in rows if "asr_rtf" in r]))
    raw = {"rtf": rtf, "spec": _share(rows, "asr_speculative"), "spec_reply": _share(rows, "speculative_reply"),
           "early": _share(rows, "early_end"), "rss": rss, "load_s": load_s}
    result: BenchResult = {
        "p50_ms": stages["total"]["p50"], "p95_ms": stages["total"]["p95"], "stages": stages,
        "rtf": round(rtf, 3), "rss_mb": round(rss, 1), "cores": usable_cores(), "turns": len(rows),
        "recordings": n_recordings, "asr_model": asr_model, "line": "phone" if config.narrowband else "wideband",
        "speculative_hit_rate": round(raw["spec"], 2),
        "speculative_reply_hit_rate": round(raw["spec_reply"], 2), "pause_ms": config.pause_ms,
        "early_end_rate": round(raw["early"], 2), "early_end_ms": config.early_end_ms,
        "load_s": round(load_s, 2), "goal": {"p50_ms": 600, "p95_ms": 900}, "paths": _paths(rows)}
    return result, raw


def _paths(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Totals of the turns heard once (answer path) and of those heard again before a refusal."""
    out: dict[str, dict[str, float]] = {}
    for name, group in (("answer", [r for r in rows if "rehear" not in r]), ("refusal", [r for r in rows if "rehear" in r])):
        totals = [r["total"] for r in group]
        out[name] = {"n": len(group), "p50": round(_pct(totals, 50), 1), "p95": round(_pct(totals, 95), 1)}
        if name == "refusal":
            extra, decode = [r["rehear"] for r in group], [r["rehear_decode"] for r in group if "rehear_decode" in r]
            fits = [r["rehear_fit"] for r in group if "rehear_fit" in r]
            out[name] |= {"rehear_p50": round(_pct(extra, 50), 1), "rehear_p95": round(_pct(extra, 95), 1),
                          "decoded": len(decode), "decode_p50": round(_pct(decode, 50), 1),
                          "fitted": len(fits), "fit_p50": round(_pct(fits, 50), 1) if fits else 0.0}
    return out


def _out_dir(out: str | None) -> Path | None:
    """The `--out` folder, made before any model loads; ValueError (one line) when it cannot be."""
    if out is None:
        return None
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path}: not a folder (a file of that name exists)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--out {path}: cannot make the folder ({e.strerror or e})") from e
    return path


def _write_out(out: Path, result: BenchResult, rows: list[dict[str, float]]) -> Path:
    """voice_latency.json (report + per-turn rows) and voice_latency.png; returns the chart's path."""
    from .bench_charts import save_latency_histograms  # pulls in matplotlib: only for --out

    (out / "voice_latency.json").write_text(json.dumps({"result": result, "turns": rows}, indent=1), encoding="utf-8")
    samples = {s: [r[s] for r in rows if s in r] for s in ["total", *STAGES[:-1]]}  # the caller's wait first
    title = (f"end of speech -> first reply audio, {result['turns']} turns from {result['recordings']} recordings "
             f"(ASR {result['asr_model']})")
    return save_latency_histograms(samples, out / "voice_latency.png", title)


def cli(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    kb = Path(args.kb)
    if err := kb_dir_error(kb):
        return fail(err)
    try:
        out = _out_dir(args.out)
    except ValueError as e:
        return fail(str(e))
    recordings = _load_recordings(args)
    if recordings is None:
        return 2

    state = args.state_dir or tempfile.mkdtemp(prefix="bench-voice-")
    t = time.perf_counter()
    try:
        runtime = VoiceRuntime.load(kb, asr_model=args.asr_model, state_dir=state, rehear_model=args.rehear_model)
    except Exception as e:  # noqa: BLE001
        print(f"error: cannot start the voice path: {e}", file=sys.stderr)
        return 2
    load_s = time.perf_counter() - t
    config = _call_config(args)
    rows: list[dict[str, float]] = []
    try:
        for f, x, ends in recordings:
            r = asyncio.run(_one(runtime, x, ends, config))
            rows.extend(r)
            if not args.json:
                print(f"{f.name}: " + ", ".join(_turn_summary(row) for row in r), flush=True)
        rss = _peak_rss_mb(runtime)
    finally:
        runtime.close()
    if not rows:
        print("error: no turn produced reply audio", file=sys.stderr)
        return 1
    result, raw = _summarize(rows, len(recordings), args.asr_model, config, rss, load_s)
    chart = _write_out(out, result, rows) if out is not None else None
    if not args.json:
        _print_text(result, raw)
        if chart is not None:
            print(f"wrote {chart} and {chart.with_suffix('.json')}")
    else:
        print(json.dumps(result))
    return 0
