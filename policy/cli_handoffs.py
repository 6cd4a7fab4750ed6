"""`run.py handoffs`: the human desk. Lists the durable handoff packages (newest last), follows new
ones as they arrive, and claims and closes them:

    run.py handoffs [--store URL] [--team T] [--state waiting|claimed|closed] [--json] [--last N]
    run.py handoffs --follow [--team T]
    run.py handoffs claim ID --agent NAME
    run.py handoffs close ID [--agent NAME]

The store is `--store`, else $VOICE_AGENT_STORE, else the JSONL files in `--state-dir`."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Iterator

from .store_api import STATES, HandoffRow, HandoffStore, StoreError
from .store_select import add_store_arg, open_store

WRITES = ("claim", "close")


def fail(message: str, code: int = 2) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run.py handoffs", description="List, follow, claim and close handoff packages.",
        epilog="Also: `run.py handoffs claim ID --agent NAME` and `run.py handoffs close ID [--agent NAME]`.")
    _common(p)
    p.add_argument("--team", help="only this team's handoffs")
    p.add_argument("--state", choices=STATES, help="only handoffs in this state")
    p.add_argument("--json", action="store_true", help="one full JSON package per line (with its desk state)")
    p.add_argument("--last", type=int, default=0, help="only the last N")
    p.add_argument("--follow", action="store_true",
                   help="print the waiting handoffs, then each new one as it arrives, until Ctrl-C")
    return p


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", default="var", help="state directory of the JSONL store (default: var)")
    add_store_arg(p)


def line(row: HandoffRow) -> str:
    """One handoff on one line; its desk state follows unless it is still waiting."""
    p = row.package
    reasons = p.get("reasons")
    question = p.get("question")
    text = (f"{row.created_at[:19]}  {row.id}  team={row.team}  "
            f"reasons={','.join(str(r) for r in reasons) if isinstance(reasons, list) else ''}  "
            f"q={(question if isinstance(question, str) else '')[:70]!r}")
    if row.state == "claimed":
        text += f"  [claimed by {row.claimed_by}]"
    elif row.state == "closed":
        text += "  [closed]"
    return text


def _show(row: HandoffRow, as_json: bool) -> str:
    return json.dumps({**row.package, "desk": row.desk()}, ensure_ascii=False) if as_json else line(row)


def cli(argv: list[str]) -> int:
    if argv and argv[0] in WRITES:
        return _write(argv[0], argv[1:])
    args = _parser().parse_args(argv)
    if args.last < 0:
        return fail(f"--last {args.last}: must be 0 (all) or more")
    if args.follow and (args.state or args.last):
        return fail("--follow prints waiting handoffs as they arrive; drop --state and --last")
    try:
        store = open_store(args.store, args.state_dir)
    except StoreError as exc:
        return fail(str(exc))
    try:
        if args.follow:
            return _follow(store, args.team, args.json)
        rows = store.read_handoffs(team=args.team, state=args.state, last=args.last)
        if not rows:
            print(f"no handoffs in {store.where()}")
        for row in rows:
            print(_show(row, args.json))
        return 0
    except StoreError as exc:
        return fail(str(exc), 1)
    finally:
        store.shutdown()


def _follow(store: HandoffStore, team: str | None, as_json: bool) -> int:
    """Each handoff as one flushed line, until Ctrl-C (a normal end: exit 0)."""
    stream: Iterator[HandoffRow] = store.follow(team)
    try:
        print(f"following handoffs{f' of team {team}' if team else ''} in {store.where()} (Ctrl-C to stop)",
              file=sys.stderr, flush=True)
        for row in stream:
            print(_show(row, as_json), flush=True)
    except KeyboardInterrupt:
        return 0
    finally:
        close = getattr(stream, "close", None)
        if callable(close):
            close()  # ends the generator: its connection is closed now, not at exit
    return 0


def _write(action: str, argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"run.py handoffs {action}",
                                description=f"{action.capitalize()} a handoff at the desk.")
    p.add_argument("id", help="the handoff's id (see `run.py handoffs`)")
    p.add_argument("--agent", required=action == "claim", help="who takes the call")
    _common(p)
    args = p.parse_args(argv)
    agent = args.agent.strip() if args.agent is not None else None
    if agent == "":
        return fail("--agent must not be empty")
    try:
        store = open_store(args.store, args.state_dir)
    except StoreError as exc:
        return fail(str(exc))
    try:
        done = store.claim(args.id, agent or "") if action == "claim" else store.close(args.id, agent)
    except StoreError as exc:
        return fail(str(exc), 1)
    finally:
        store.shutdown()
    if not done.ok:
        return fail(done.why, 1)
    row = done.row
    who = f" by {row.claimed_by}" if row and row.claimed_by else ""
    print(f"{'claimed' if action == 'claim' else 'closed'} {args.id}{who}"
          f"{f' (team {row.team})' if row else ''}")
    return 0
