"""`run.py bench store`: how long a handoff write takes, and how long from its commit until a desk
following the store (`run.py handoffs --follow`) sees it, for the embedded JSONL store and for
PostgreSQL, side by side; and how long a call's checkpoint write takes (one per turn of a call).

The desk is a separate process running the store's real `follow` iterator; it prints each handoff's
id with the time it saw it on the machine's monotonic clock, which the writer shares. Commit time is
when `append` returns (the write is durable then). Writes are spaced `--gap-ms` apart, as calls are."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from kb.jsontypes import JsonObject
from kb.measure import percentile, usable_cores
from policy.session_state import SessionState
from policy.store_api import HandoffStore, StoreError
from policy.store_embedded import EmbeddedStore
from policy.store_pg_schema import connect, url_with_schema
from policy.store_select import ENV

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
ROOT = Path(__file__).resolve().parent.parent


def _package(i: int, run: str) -> JsonObject:
    """About the size of a real package: a summary, a transcript and two evidence quotes."""
    return {"session": f"bench{run}", "id": f"{run}-{i:05d}", "team": "billing", "created_at": _now_iso(),
            "summary": 'The caller asked: "Can I talk to a person about my bill?". Transferred because the caller '
                       "asked for a person.", "question": "Can I talk to a person about my bill?",
            "transcript": ["caller: Hi, I have a question about my bill.", "agent: Sure, what would you like to know?",
                           "caller: Can I talk to a person about my bill?", "agent: I'm transferring you now."],
            "reasons": ["human_requested"], "missing_information": [], "conflicts": [],
            "evidence": [{"doc_id": "billing-faq", "section": "Late fees", "version": "2026-01",
                          "quote": "A late payment fee of 5 pounds applies after 14 days."}] * 2,
            "caller_facets": {"customer_type": "personal"}, "caller_role": "public"}


def _now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


class Desk:
    """The listener process and what it has seen: handoff id -> monotonic ns."""

    def __init__(self, kind: str, target: str):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen([sys.executable, "-m", "evaluation.bench_store", "--listen", kind, target],
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.seen: dict[str, int] = {}
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            hid, _, ns = text.strip().partition(" ")
            with self.cond:
                self.seen[hid] = int(ns)
                self.cond.notify_all()

    def wait_for(self, ids: set[str], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: ids <= self.seen.keys() or self.proc.poll() is not None, timeout) \
                and ids <= self.seen.keys()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _checkpoint(turns: int, run: str) -> JsonObject:
    """A call's checkpoint as the server writes it after a turn (voice_agent/transport/resume.py)."""
    lines = [f"caller: question {i} about my bill and the late fee?" if i % 2 == 0 else
             "agent: Are you a personal or a business customer? I can then tell you the fee." for i in range(2 * turns)]
    session = SessionState(session_id=f"ck{run}", facets={"customer_type": "personal"}, transcript=lines, turns=turns,
                           pending_question="What is the late fee?", pending_facets=["customer_type"])
    return {"call_id": f"ck{run}", "role": "public", "token_sha256": "0" * 64, "epoch": 0, "owner": "bench:1:x",
            "transferred": False, "session": session.model_dump(mode="json")}


def measure_checkpoints(store: HandoffStore, n: int) -> JsonObject:
    """The write a native call adds to each turn: the call's checkpoint, upserted (a 6-turn call)."""
    run = uuid.uuid4().hex[:8]
    times = []
    for i in range(n):
        state = _checkpoint(6, f"{run}{i % 20}")  # 20 calls at a time, each checkpointed again and again
        t0 = time.perf_counter()
        store.put_checkpoint(str(state["call_id"]), state)
        times.append((time.perf_counter() - t0) * 1000)
    return {"checkpoint_p50_ms": _r(percentile(times, 50)), "checkpoint_p95_ms": _r(percentile(times, 95))}


def measure(store: HandoffStore, kind: str, target: str, n: int, gap_s: float) -> JsonObject:
    """Write `n` handoffs through `store` while a desk process follows it, then `n` checkpoints."""
    run = uuid.uuid4().hex[:8]
    desk = Desk(kind, target)
    try:
        for warm in range(60):  # the desk is ready when it sees a handoff written after it started
            hid = f"{run}-warm{warm}"
            store.handoffs.append({**_package(0, run), "id": hid})
            if desk.wait_for({hid}, 0.5):
                break
            if desk.proc.poll() is not None:
                break
        else:
            raise StoreError(f"{kind}: the desk process did not start following the store within 30 s")
        if desk.proc.poll() is not None:
            raise StoreError(f"{kind}: the desk process ended (exit {desk.proc.returncode})")
        writes, committed = [], {}
        for i in range(n):
            pkg = _package(i, run)
            t0 = time.monotonic_ns()
            store.handoffs.append(pkg)
            t1 = time.monotonic_ns()
            writes.append((t1 - t0) / 1e6)
            committed[str(pkg["id"])] = t1
            time.sleep(gap_s)
        desk.wait_for(set(committed), 10.0)
        delays = [(desk.seen[k] - t) / 1e6 for k, t in committed.items() if k in desk.seen]
    finally:
        desk.stop()
    return {"store": kind, "n": n, "write_p50_ms": _r(percentile(writes, 50)), "write_p95_ms": _r(percentile(writes, 95)),
            "desk_p50_ms": _r(percentile(delays, 50)), "desk_p95_ms": _r(percentile(delays, 95)),
            "desk_max_ms": _r(max(delays) if delays else None), "seen": len(delays),
            **measure_checkpoints(store, n)}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _pg_url(flag: str | None) -> tuple[str, bool]:
    """(URL to measure, whether the user asked for it); the default database when it answers."""
    url = flag or os.environ.get(ENV) or ""
    if url.startswith(("postgresql://", "postgres://")):
        return url, True
    return DEFAULT_PG, False


def _bench_pg(url: str, n: int, gap_s: float) -> JsonObject:
    """In a schema of its own, dropped afterwards: the database's other tables are not touched."""
    from policy.store_pg import PgStore  # lazily: psycopg only when PostgreSQL is measured

    schema = f"bench_store_{uuid.uuid4().hex[:10]}"
    with connect(url) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        scoped = url_with_schema(url, schema)
        store = PgStore(scoped)
        try:
            return measure(store, "postgresql", scoped, n, gap_s)
        finally:
            store.shutdown()
    finally:
        with connect(url) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _listen(kind: str, target: str) -> int:
    """The desk process: follow the store, print `id monotonic_ns` per handoff, until terminated."""
    if kind == "postgresql":
        from policy.store_pg import PgStore  # lazily: psycopg only when PostgreSQL is measured

        store: HandoffStore = PgStore(target, max_connections=1)
    else:
        store = EmbeddedStore(target)
    for row in store.follow():
        print(row.id, time.monotonic_ns(), flush=True)
    return 0


def _print(results: list[JsonObject], skipped: str | None, n: int, gap_ms: float) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"store bench: {n} handoffs per store, {gap_ms:g} ms apart; cores {usable_cores()}, load average {load}")
    print(f"{'store':<12}{'write p50':>11}{'write p95':>11}{'desk p50':>11}{'desk p95':>11}{'desk max':>11}{'seen':>7}"
          f"{'ckpt p50':>11}{'ckpt p95':>11}")
    for r in results:
        cells = "".join(f"{str(r[k]) + ' ms' if r[k] is not None else '-':>11}"
                        for k in ("write_p50_ms", "write_p95_ms", "desk_p50_ms", "desk_p95_ms", "desk_max_ms"))
        ckpt = "".join(f"{str(r[k]) + ' ms' if r[k] is not None else '-':>11}"
                       for k in ("checkpoint_p50_ms", "checkpoint_p95_ms"))
        print(f"{r['store']!s:<12}{cells}{r['seen']!s:>7}{ckpt}")
    if skipped:
        print(f"postgresql: not measured ({skipped})")
    print("desk = from the commit (append returned) to the following desk process printing it; "
          "ckpt = a call's checkpoint upsert, the write each turn of a native call adds")


def cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="run.py bench store", description=__doc__.splitlines()[0])
    p.add_argument("--store", metavar="URL", help=f"PostgreSQL to measure (default: ${ENV}, else {DEFAULT_PG} "
                                                  "when it answers)")
    p.add_argument("--n", type=int, default=200, help="handoffs written per store (default: 200)")
    p.add_argument("--gap-ms", type=float, default=10.0, help="pause between writes (default: 10)")
    p.add_argument("--state-dir", help="where the JSONL store's temporary files go (default: the system's temp dir)")
    p.add_argument("--json", action="store_true", help="the results as one JSON object (last line)")
    p.add_argument("--listen", nargs=2, metavar=("KIND", "TARGET"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.listen:
        return _listen(*args.listen)
    if not 1 <= args.n <= 100000 or args.gap_ms < 0:
        print("error: --n must be 1..100000 and --gap-ms 0 or more", file=sys.stderr)
        return 2
    if args.store and not args.store.startswith(("postgresql://", "postgres://")):
        print(f"error: --store {args.store!r}: the store bench measures PostgreSQL (postgresql://...) "
              "beside the JSONL store", file=sys.stderr)
        return 2
    results: list[JsonObject] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-store-", dir=args.state_dir) as tmp:
            results.append(measure(EmbeddedStore(tmp), "jsonl", tmp, args.n, args.gap_ms / 1000))
        url, asked = _pg_url(args.store)
        skipped = None
        try:
            results.append(_bench_pg(url, args.n, args.gap_ms / 1000))
        except StoreError as exc:
            if asked:
                raise
            skipped = str(exc)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _print(results, skipped, args.n, args.gap_ms)
    if args.json:
        print(json.dumps({"n": args.n, "gap_ms": args.gap_ms, "cores": usable_cores(),
                          "load_average": list(os.getloadavg()), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
