"""`run.py bench load`: concurrent replayed calls against local servers this command starts.

Loopback only, bounded in count (`--calls` ≤ 64) and time (`--timeout`). Each call streams the
same recorded question in real time (20 ms frames) over the native protocol; we measure, per
call, end of caller speech → first reply audio byte, and count errors and `busy` rejections.
The server's resident memory (peak) comes from /proc. With `--json` the last line is one JSON
object: p50_ms, p95_ms, errors, busy, rss_mb, cores, calls (+ details).

`--servers N` starts N servers sharing one PostgreSQL store (`--store URL`, else $VOICE_AGENT_STORE;
a schema of its own, dropped afterwards) and spreads the calls over them round robin; `--compare`
first runs the same calls on one server. Each is reported per server and overall, with the
checkpoint write each turn adds (from the servers' decision log lines).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import numpy as np

from kb.jsontypes import JsonObject
from kb.loader import kb_dir_error
from kb.measure import percentile
from policy.cli import fail
from policy.store_api import StoreError
from policy.store_pg_schema import connect, url_with_schema
from policy.store_select import ENV
from voice_agent.audio import AudioError
from voice_agent.audio_files import read_audio
from voice_agent.client import CallResult, stream_call

from .bench_servers import ROOT, default_wav, rss_mb, start_server, stop_server, tree_rss_mb

__all__ = ["cli", "run_load", "start_server", "stop_server"]  # the tests start servers through here

MAX_CALLS_LIMIT = 64
MAX_SERVERS = 8
GOAL_P95_MS = 1500.0
_PG = ("postgresql://", "postgres://")


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run.py bench load", description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=4, help=f"concurrent calls (1..{MAX_CALLS_LIMIT})")
    ap.add_argument("--max-calls", type=int, default=None,
                    help="each server's concurrent-call limit (default: its own, 4; with --servers > 1 or "
                         "--compare: --calls, so that no server refuses its share)")
    ap.add_argument("--servers", type=int, default=1, help=f"servers sharing one store (1..{MAX_SERVERS})")
    ap.add_argument("--store", metavar="URL", default=None,
                    help=f"postgresql://... the servers share (needed for --servers > 1; default: ${ENV})")
    ap.add_argument("--compare", action="store_true", help="also run the same calls on one server first")
    ap.add_argument("--kb", default=str(ROOT / "fixtures" / "kb"))
    ap.add_argument("--wav", help="caller audio to replay (default: a fixture question, or espeak-ng speech)")
    ap.add_argument("--asr-model", default="tiny.en")
    ap.add_argument("--stagger-ms", type=float, default=0.0, help="delay between call starts")
    ap.add_argument("--timeout", type=float, default=300.0, help="give up on the whole run after this many seconds")
    ap.add_argument("--state-dir", default=None,
                    help="keep the servers' audit logs, handoffs and logs here (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="last line: one JSON object")
    return ap.parse_args(argv)


def _percentile(xs: list[float], q: float) -> float | None:
    v = percentile(xs, q)
    return None if v is None else round(v, 1)


async def run_load(urls: list[str], audio: np.ndarray, rate: int, calls: int, stagger_ms: float,
                   timeout: float) -> list[CallResult | Exception]:
    """`calls` concurrent calls, call i on `urls[i % len(urls)]`."""
    async def one(i: int) -> CallResult | Exception:
        await asyncio.sleep(i * stagger_ms / 1000.0)
        try:
            return await stream_call(urls[i % len(urls)], audio, rate, realtime=True, tail_silence_s=1.5,
                                     timeout_s=timeout)
        except Exception as e:  # a refused or broken connection counts as an error, not a crash
            return e

    return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(calls))), timeout + 10)


def _args_error(args: argparse.Namespace) -> str | None:
    """What is out of range or missing in --calls / --max-calls / --servers / --store, if anything."""
    if not 1 <= args.calls <= MAX_CALLS_LIMIT:
        return f"--calls {args.calls}: must be 1..{MAX_CALLS_LIMIT}"
    if args.max_calls is not None and not 1 <= args.max_calls <= 256:
        return f"--max-calls {args.max_calls}: must be 1..256"
    if not 1 <= args.servers <= MAX_SERVERS:
        return f"--servers {args.servers}: must be 1..{MAX_SERVERS}"
    store = args.store if args.store is not None else os.environ.get(ENV, "")
    if store not in ("", "jsonl") and not store.startswith(_PG):
        return f"--store {store!r}: not a store URL; use postgresql://USER@HOST:PORT/DB, or jsonl"
    if args.servers > 1 and not store.startswith(_PG):
        return (f"--servers {args.servers}: servers share calls through PostgreSQL; "
                f"give --store postgresql://USER@HOST:PORT/DB (or ${ENV})")
    args.store = store
    return None


@contextmanager
def _scratch_store(url: str) -> Iterator[str]:
    """PostgreSQL: a schema of the run's own, dropped afterwards; the JSONL files: as they are."""
    if not url.startswith(_PG):
        yield url
        return
    schema = f"bench_load_{uuid.uuid4().hex[:10]}"
    with connect(url) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield url_with_schema(url, schema)
    finally:
        with connect(url) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


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


def _start_servers(args: argparse.Namespace, base: Path, n: int, store: str,
                   max_calls: int | None) -> list[tuple[subprocess.Popen, int]]:
    """`n` servers on the store, started together (each in its folder: config, log, JSONL files)."""
    started: list[tuple[subprocess.Popen, int] | Exception | None] = [None] * n
    extra = ["--store", store] if store else []

    def start(i: int) -> None:
        folder = base / f"server{i + 1}" if n > 1 else base
        folder.mkdir(parents=True, exist_ok=True)
        try:
            started[i] = start_server(args.kb, folder, max_calls=max_calls, asr_model=args.asr_model, extra=extra)
        except RuntimeError as e:
            started[i] = e

    threads = [threading.Thread(target=start, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [s for s in started if isinstance(s, tuple)]
    if len(ok) < n:
        for proc, _ in ok:
            stop_server(proc)
        raise RuntimeError(str(next(s for s in started if not isinstance(s, tuple))))
    return ok


def _checkpoint_ms(log: Path) -> list[float]:
    """The checkpoint write of every decided turn, from a server's decision log lines."""
    out = []
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if '"event": "decision"' in line:
            try:
                ms = json.loads(line).get("timings_ms", {}).get("checkpoint")
            except (ValueError, AttributeError):
                continue
            if isinstance(ms, (int, float)):
                out.append(float(ms))
    return out


def _outcome(results: list[CallResult | Exception], checkpoints: list[float]) -> JsonObject:
    lat, errors, busy, answered, error_codes = _tally(results)
    return {"calls": len(results), "answered": answered, "p50_ms": _percentile(lat, 50),
            "p95_ms": _percentile(lat, 95), "max_ms": max(lat) if lat else None, "errors": errors,
            "error_codes": error_codes, "busy": busy, "checkpoint_p50_ms": _percentile(checkpoints, 50),
            "checkpoint_p95_ms": _percentile(checkpoints, 95), "turns_checkpointed": len(checkpoints)}


def _measure(args: argparse.Namespace, audio: np.ndarray, rate: int, base: Path, n: int, store: str) -> JsonObject:
    """One configuration: start `n` servers, run the calls over them, stop them, summarize."""
    max_calls = args.max_calls if args.max_calls or (n == 1 and not args.compare) else args.calls
    servers = _start_servers(args, base, n, store, max_calls)
    try:
        idle = [rss_mb(p.pid)[0] for p, _ in servers]
        t0 = time.monotonic()
        results = asyncio.run(run_load([f"ws://127.0.0.1:{port}/v1/call" for _, port in servers], audio, rate,
                                       args.calls, args.stagger_ms, args.timeout))
        wall = time.monotonic() - t0
        rss = [rss_mb(p.pid) for p, _ in servers]
        tree = [tree_rss_mb(p.pid) for p, _ in servers]
    finally:
        exits = [stop_server(p) for p, _ in servers]
    logs = [(base / f"server{i + 1}" if n > 1 else base) / "server.log" for i in range(n)]
    per = [{"server": i + 1, **_outcome(results[i::n], _checkpoint_ms(logs[i])), "rss_mb": rss[i][1],
            "rss_idle_mb": idle[i], "rss_with_tts_mb": tree[i], "exit": exits[i]} for i in range(n)]
    summary = _outcome(results, [ms for log in logs for ms in _checkpoint_ms(log)])
    p95 = summary["p95_ms"]
    return {**summary, "servers": n, "store": "postgresql" if store.startswith(_PG) else "jsonl",
            "max_calls": max_calls or 4, "per_server": per, "rss_mb": max((r[1] or 0.0) for r in rss),
            "rss_now_mb": rss[0][0], "rss_idle_mb": idle[0], "rss_with_tts_mb": tree[0],
            "cores": os.cpu_count(), "wall_s": round(wall, 1), "server_exit": max(exits, key=abs),
            "goal_p95_ms": GOAL_P95_MS,
            "goal_met": isinstance(p95, float) and p95 <= GOAL_P95_MS and summary["errors"] == 0}


def _print_summary(summary: JsonObject) -> None:
    print(f"bench load: {summary['calls']} concurrent calls on {summary['servers']} server(s) "
          f"(each max {summary['max_calls']}, store {summary['store']}), {summary['cores']} cores")
    print(f"  end of speech -> first audio: p50 {summary['p50_ms']} ms, p95 {summary['p95_ms']} ms, "
          f"max {summary['max_ms']} ms over {summary['answered']} answered calls")
    print(f"  errors {summary['errors']} {summary['error_codes'] or ''}  busy rejections {summary['busy']}  "
          f"checkpoint write p50 {summary['checkpoint_p50_ms']} ms, p95 {summary['checkpoint_p95_ms']} ms "
          f"over {summary['turns_checkpointed']} turns")
    per = cast(list[JsonObject], summary["per_server"])
    if len(per) > 1:
        print(f"  {'server':<8}{'calls':>6}{'errors':>8}{'busy':>6}{'p50 ms':>9}{'p95 ms':>9}{'ckpt p50':>10}"
              f"{'RSS MiB':>9}")
        for s in [*per, {**summary, "server": "all", "rss_mb": summary["rss_mb"]}]:
            print(f"  {s['server']!s:<8}{s['calls']!s:>6}{s['errors']!s:>8}{s['busy']!s:>6}{s['p50_ms']!s:>9}"
                  f"{s['p95_ms']!s:>9}{s['checkpoint_p50_ms']!s:>10}{s['rss_mb']!s:>9}")
    print(f"  server RSS peak {summary['rss_mb']} MiB (idle {summary['rss_idle_mb']}, "
          f"now incl. TTS worker {summary['rss_with_tts_mb']}); server exit {summary['server_exit']}")


def _print_compare(one: JsonObject, many: JsonObject) -> None:
    print(f"side by side, {many['calls']} calls: {'':<14}{'p50 ms':>9}{'p95 ms':>9}{'errors':>8}{'busy':>6}")
    for s in (one, many):
        print(f"{'':<22}{str(s['servers']) + ' server(s)':<14}{s['p50_ms']!s:>9}{s['p95_ms']!s:>9}"
              f"{s['errors']!s:>8}{s['busy']!s:>6}")


def cli(argv: list[str]) -> int:
    args = _parse(argv)
    if problem := _args_error(args):
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
        configs = [1, args.servers] if args.compare and args.servers > 1 else [args.servers]
        runs: list[JsonObject] = []
        try:
            with _scratch_store(args.store) as store:
                for n in configs:
                    runs.append(_measure(args, audio, rate, tmp / f"{n}-servers" if args.compare else tmp, n, store))
                    _print_summary(runs[-1])
        except (RuntimeError, StoreError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except asyncio.TimeoutError:
            print(f"error: the load run did not finish within {args.timeout:.0f}s", file=sys.stderr)
            return 1
    if len(runs) > 1:
        _print_compare(runs[0], runs[1])
    summary = {**runs[-1], "wav": str(wav.name), **({"baseline": runs[0]} if len(runs) > 1 else {})}
    if args.json:
        print(json.dumps(summary))
    return 0 if all(r["errors"] == 0 and r["server_exit"] == 0 for r in runs) else 1
