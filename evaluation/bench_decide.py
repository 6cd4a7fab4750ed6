"""`run.py bench decide`: one text turn end to end (retrieve + gates + compose + recheck + audit
write) on a synthetic KB of N sections, timed per stage."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from kb.measure import peak_rss_mb, percentile
from kb.loader import load_kb
from kb.retrieve import Retriever
from kb.synthetic import synthetic_queries, write_synthetic_kb
from policy.config import load_policy_config
from policy.engine import Engine


def cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="run.py bench decide", description=__doc__.splitlines()[0])
    p.add_argument("--sections", type=int, default=10000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--no-dense", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="decide-bench-") as tmp:
        write_synthetic_kb(Path(tmp) / "kb", args.sections)
        t0 = time.perf_counter()
        kb = load_kb(Path(tmp) / "kb")
        # The default embedding cache: the synthetic KB is deterministic, so a second run skips embedding.
        retriever = Retriever(kb, dense=not args.no_dense, progress=True)
        retriever.attach_units(progress=True)  # as Engine.load does: sentence scores are features
        engine = Engine(kb, retriever, load_policy_config(), state_dir=Path(tmp) / "state",
                        on_date=dt.date(2026, 11, 29), progress=True)
        engine.session().turn("warm up")
        build_s = time.perf_counter() - t0
        totals: list[float] = []
        stages: dict[str, list[float]] = {}
        actions: dict[str, int] = {}
        for q in synthetic_queries(args.queries):
            a = time.perf_counter()
            out = engine.session().turn(q)
            totals.append((time.perf_counter() - a) * 1000)
            for k, v in out.timings_ms.items():
                stages.setdefault(k, []).append(v)
            actions[out.decision.action.value] = actions.get(out.decision.action.value, 0) + 1
    res = {"sections": len(kb.sections), "queries": args.queries, "build_s": round(build_s, 2),
           "p50_ms": round(percentile(totals, 50) or 0.0, 2), "p95_ms": round(percentile(totals, 95) or 0.0, 2),
           "stages": {k: {"p50_ms": round(percentile(v, 50) or 0.0, 3), "p95_ms": round(percentile(v, 95) or 0.0, 3)}
                      for k, v in stages.items()},
           "actions": actions, "rss_mb": peak_rss_mb(), "cores": os.cpu_count() or 1}
    print(f"decide: {res['sections']} sections, {args.queries} turns, build {res['build_s']} s, "
          f"cores {res['cores']}")
    print(f"turn p50 {res['p50_ms']} ms, p95 {res['p95_ms']} ms (incl. fsync'd audit write); actions {actions}")
    for k, v in res["stages"].items():
        print(f"  {k:<18} p50 {v['p50_ms']:8.2f} ms   p95 {v['p95_ms']:8.2f} ms")
    print(f"peak RSS {res['rss_mb']} MB")
    if args.json:
        print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
