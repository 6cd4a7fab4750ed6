"""`run.py handoffs`: list the durable handoff packages (newest last)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TypedDict, cast

from .store import JsonlStore


class HandoffLine(TypedDict, total=False):
    """The fields listed of one stored package (the session writes a Handoff's fields)."""

    created_at: str
    id: str
    team: str
    reasons: list[str]
    question: str


def cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="run.py handoffs", description="List stored handoff packages.")
    p.add_argument("--state-dir", default="var", help="state directory (default: var)")
    p.add_argument("--json", action="store_true", help="one full JSON package per line")
    p.add_argument("--last", type=int, default=0, help="only the last N")
    args = p.parse_args(argv)
    records = list(JsonlStore(Path(args.state_dir) / "handoffs.jsonl").read())
    if args.last:
        records = records[-args.last:]
    if not records:
        print(f"no handoffs in {Path(args.state_dir) / 'handoffs.jsonl'}")
        return 0
    for r in records:
        if args.json:
            print(json.dumps(r, ensure_ascii=False))
        else:
            h = cast(HandoffLine, r)
            print(f"{h.get('created_at', '')[:19]}  {h.get('id')}  team={h.get('team')}  "
                  f"reasons={','.join(h.get('reasons', []))}  q={h.get('question', '')[:70]!r}")
    return 0
