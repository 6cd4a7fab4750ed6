"""`run.py bench load`: N concurrent replayed calls against a local server this command starts.

Loopback only, bounded in count (`--calls` ≤ 64) and time (`--timeout`). Each call streams the
same recorded question in real time (20 ms frames) over the native protocol; we measure, per
call, end of caller speech → first reply audio byte, and count errors and `busy` rejections.
The server's resident memory (peak) comes from /proc. With `--json` the last line is one JSON
object: p50_ms, p95_ms, errors, busy, rss_mb, cores, calls (+ details).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import numpy as np
import yaml

from kb.jsontypes import JsonObject
from kb.loader import kb_dir_error
from kb.measure import percentile
from policy.cli import fail
from voice_agent.audio import AudioError
from voice_agent.audio_files import read_audio
from voice_agent.client import CallResult, stream_call

ROOT = Path(__file__).resolve().parent.parent
MAX_CALLS_LIMIT = 64
GOAL_P95_MS = 1500.0
DEFAULT_TEXT = "What number do I call to pay my bill over the phone?"


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run.py bench load", description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=4, help=f"concurrent calls (1..{MAX_CALLS_LIMIT})")
    ap.add_argument("--max-calls", type=int, default=None, help="server's concurrent-call limit (default: its own, 4)")
    ap.add_argument("--kb", default=str(ROOT / "fixtures" / "kb"))
    ap.add_argument("--wav", help="caller audio to replay (default: a fixture question, or espeak-ng speech)")
    ap.add_argument("--asr-model", default="tiny.en")
    ap.add_argument("--stagger-ms", type=float, default=0.0, help="delay between call starts")
    ap.add_argument("--timeout", type=float, default=300.0, help="give up on the whole run after this many seconds")
    ap.add_argument("--state-dir", default=None,
                    help="keep the server's audit log, handoffs and log here (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="last line: one JSON object")
    return ap.parse_args(argv)


def _percentile(xs: list[float], q: float) -> float | None:
    v = percentile(xs, q)
    return None if v is None else round(v, 1)


def _rss_mb(pid: int) -> tuple[float | None, float | None]:
    """(current, peak) resident set size of a process in MiB, from /proc (Linux)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None, None
    vals = {k: int(v) / 1024.0 for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", text, re.M)}
    return (round(vals["VmRSS"], 1) if "VmRSS" in vals else None, round(vals["VmHWM"], 1) if "VmHWM" in vals else None)


def _tree_rss_mb(pid: int) -> float | None:
    """RSS of the server plus its children (the TTS worker process)."""
    total, seen = 0.0, False
    pids = [pid]
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(k) for k in kids]
    except OSError:
        pass
    for p in pids:
        now, _ = _rss_mb(p)
        if now is not None:
            total += now
            seen = True
    return round(total, 1) if seen else None


def default_wav(tmp: Path) -> Path:
    """A recorded question: a fixture whose case expects an answer, else espeak-ng speech."""
    audio = ROOT / "fixtures" / "audio"
    manifest = audio / "manifest.yaml"
    if manifest.exists():
        try:
            files = (yaml.safe_load(manifest.read_text()) or {}).get("files") or []
            clean = [f for f in files if isinstance(f, dict) and f.get("bucket") == "direct_evidence"
                     and f.get("kind") == "question" and not f.get("noise") and not f.get("telephone")]
            for f in clean:
                p = audio / str(f.get("file") or f"{f.get('id')}.wav")
                if p.exists():
                    return p
        except Exception:
            pass  # a manifest we cannot read: fall back to any fixture WAV
    for p in sorted(audio.glob("*.wav")) if audio.is_dir() else []:
        return p
    if not shutil.which("espeak-ng"):
        raise RuntimeError("no fixture audio under fixtures/audio and no espeak-ng to make some; pass --wav FILE")
    out = tmp / "question.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(out), DEFAULT_TEXT], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def start_server(kb: str, state_dir: Path, *, max_calls: int | None, asr_model: str, timeout: float = 180.0,
                 extra: list[str] | None = None) -> tuple[subprocess.Popen, int]:
    """Start `run.py serve --port 0` on loopback; returns (process, port) once it listens."""
    cfg = state_dir / "server.yaml"
    if not cfg.exists():
        cfg.write_text("{}\n")  # no tokens; ignore any ./server.yaml of the working directory
    cmd = [sys.executable, str(ROOT / "run.py"), "serve", "--kb", kb, "--host", "127.0.0.1", "--port", "0",
           "--config", str(cfg), "--state-dir", str(state_dir), "--asr-model", asr_model, *(extra or [])]
    if max_calls is not None:
        cmd += ["--max-calls", str(max_calls)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    log = open(state_dir / "server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env, cwd=str(ROOT))
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    buf = b""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (state_dir / "server.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"server exited with {proc.returncode}: {' | '.join(tail)}")
        chunk = proc.stdout.read() or b""
        buf += chunk
        m = re.search(rb"listening on ws://[^:]+:(\d+)", buf)
        if m:
            os.set_blocking(proc.stdout.fileno(), True)
            return proc, int(m.group(1))
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"server did not start listening within {timeout:.0f}s")


def stop_server(proc: subprocess.Popen, timeout: float = 30.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return int(proc.returncode)


async def run_load(url: str, audio: np.ndarray, rate: int, calls: int, stagger_ms: float,
                   timeout: float) -> list[CallResult | Exception]:
    async def one(i: int) -> CallResult | Exception:
        await asyncio.sleep(i * stagger_ms / 1000.0)
        try:
            return await stream_call(url, audio, rate, realtime=True, tail_silence_s=1.5, timeout_s=timeout)
        except Exception as e:  # a refused or broken connection counts as an error, not a crash
            return e

    return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(calls))), timeout + 10)


def _count_error(args: argparse.Namespace) -> str | None:
    """What is out of range in --calls / --max-calls, if anything."""
    if not 1 <= args.calls <= MAX_CALLS_LIMIT:
        return f"--calls {args.calls}: must be 1..{MAX_CALLS_LIMIT}"
    if args.max_calls is not None and not 1 <= args.max_calls <= 256:
        return f"--max-calls {args.max_calls}: must be 1..256"
    return None


def _tally(results: list[CallResult | Exception]) -> tuple[list[float], int, int, int, dict[str, int]]:
    """(first-turn latencies, calls with errors, busy rejections, answered calls, error counts by code)."""
    lat: list[float] = []
    errors, busy, answered = 0, 0, 0
    error_codes: dict[str, int] = {}
    for r in results:
        if isinstance(r, Exception):
            errors += 1
            error_codes[type(r).__name__] = error_codes.get(type(r).__name__, 0) + 1
            continue
        if r.busy:
            busy += 1
            continue
        bad = [cast(str, e.get("code", "?")) for e in r.errors] + ([f"close_{r.close_code}"] if r.close_code not in (1000, 1001) else [])
        if not r.decisions:
            bad.append("no_decision")
        for code in bad:
            error_codes[code] = error_codes.get(code, 0) + 1
        if bad:
            errors += 1
        if r.latencies_ms:
            answered += 1
            lat.append(r.latencies_ms[0])
    return lat, errors, busy, answered, error_codes


def _print_summary(summary: JsonObject) -> None:
    print(f"bench load: {summary['calls']} concurrent calls (server max {summary['max_calls']}), {summary['cores']} cores")
    print(f"  end of speech -> first audio: p50 {summary['p50_ms']} ms, p95 {summary['p95_ms']} ms, "
          f"max {summary['max_ms']} ms over {summary['answered']} answered calls")
    print(f"  errors {summary['errors']} {summary['error_codes'] or ''}  busy rejections {summary['busy']}")
    print(f"  server RSS peak {summary['rss_mb']} MiB (idle {summary['rss_idle_mb']}, "
          f"now incl. TTS worker {summary['rss_with_tts_mb']}); server exit {summary['server_exit']}")


def cli(argv: list[str]) -> int:
    args = _parse(argv)
    if problem := _count_error(args):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if err := kb_dir_error(args.kb):
        return fail(err)
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp_s:
        tmp = Path(args.state_dir or tmp_s)
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            wav = Path(args.wav) if args.wav else default_wav(tmp)
            audio, rate = read_audio(wav)
        except (AudioError, RuntimeError, subprocess.CalledProcessError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        try:
            proc, port = start_server(args.kb, tmp, max_calls=args.max_calls, asr_model=args.asr_model)
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        try:
            idle_rss, _ = _rss_mb(proc.pid)
            t0 = time.monotonic()
            results = asyncio.run(run_load(f"ws://127.0.0.1:{port}/v1/call", audio, rate, args.calls,
                                           args.stagger_ms, args.timeout))
            wall = time.monotonic() - t0
            rss_now, rss_peak = _rss_mb(proc.pid)
            tree = _tree_rss_mb(proc.pid)
        except asyncio.TimeoutError:
            print(f"error: the load run did not finish within {args.timeout:.0f}s", file=sys.stderr)
            stop_server(proc)
            return 1
        finally:
            rc = stop_server(proc)

    lat, errors, busy, answered, error_codes = _tally(results)
    summary = {
        "calls": args.calls, "max_calls": args.max_calls or 4, "answered": answered,
        "p50_ms": _percentile(lat, 50), "p95_ms": _percentile(lat, 95), "max_ms": max(lat) if lat else None,
        "errors": errors, "error_codes": error_codes, "busy": busy,
        "rss_mb": rss_peak, "rss_now_mb": rss_now, "rss_idle_mb": idle_rss, "rss_with_tts_mb": tree,
        "cores": os.cpu_count(), "wall_s": round(wall, 1), "server_exit": rc, "wav": str(wav.name),
        "goal_p95_ms": GOAL_P95_MS,
        "goal_met": bool(lat) and (_percentile(lat, 95) or 0.0) <= GOAL_P95_MS and errors == 0,
    }
    _print_summary(summary)
    if args.json:
        print(json.dumps(summary))
    return 0 if errors == 0 and rc == 0 else 1
