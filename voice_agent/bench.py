"""`run.py bench KIND`: route to the benchmark that measures that part of the product."""
from __future__ import annotations

import importlib
import sys

BENCHES = {
    "retrieval": "kb.bench",  # index build + hybrid query latency at N sections
    "decide": "policy.bench",  # retrieval + policy + compose + recheck per turn
    "voice": "voice_agent.bench_voice",  # end of caller speech -> first reply audio
    "load": "voice_agent.bench_load",  # concurrent calls against a local server
}


def cli(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print(f"usage: python3 run.py bench {{{'|'.join(BENCHES)}}} [options]", file=sys.stderr)
        return 2
    return int(importlib.import_module(BENCHES[argv[0]]).cli(argv[1:]) or 0)
