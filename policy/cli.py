"""`run.py ask`: one typed question through the full text path, Decision JSON on stdout."""
from __future__ import annotations

import argparse
import datetime as dt
import difflib
import json
import sys
from pathlib import Path

from kb.loader import KBNotFound, kb_dir_error

from .config import PolicyConfigError
from .engine import Engine, UnknownRole
from .store_api import StoreError
from .store_embedded import EmbeddedStore
from .store_select import add_store_arg, open_store


def fail(message: str, code: int = 2) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def iso_date(text: str) -> dt.date:
    """An argparse type: a calendar date, with a one-line error for 2026-13-01."""
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def positive_seconds(text: str) -> float:
    """An argparse type: seconds, more than 0 and at most a day."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < v <= 24 * 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: expected more than 0 and at most 86400 seconds")
    return v


def writable_dir(path: str | Path) -> str | None:
    """The one-line error for a state directory that cannot be created or written, else None."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".write-test"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        return f"{p}: cannot write the state directory ({exc.strerror or exc})"
    return None


def parse_facets(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"facet {p!r} must look like key=value, e.g. customer_type=business")
        out[key.strip()] = value.strip()
    return out


def facet_error(facets: dict[str, str], known: dict[str, set[str]]) -> str | None:
    """A `--facet` whose key or value this KB (as the caller's role sees it) never uses: a typo
    would otherwise be taken as a different caller ("persnal" is not "personal")."""
    for key, value in facets.items():
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            return (f"--facet {key}={value}: unknown facet key {key!r}"
                    + (f"; did you mean {hint[0]!r}?" if hint else f"; this KB uses: {', '.join(sorted(known)) or 'none'}"))
        if value not in known[key]:
            hint = difflib.get_close_matches(value, known[key], n=1)
            return (f"--facet {key}={value}: {value!r} is not a value of {key}"
                    + (f"; did you mean {hint[0]!r}?" if hint else f"; known: {', '.join(sorted(known[key]))}"))
    return None


def load_engine(args: argparse.Namespace) -> Engine:
    """Load the engine for a CLI command, turning bad input into one-line errors."""
    on_date = getattr(args, "date", None)
    try:
        store = open_store(getattr(args, "store", None), getattr(args, "state_dir", "var"))
    except StoreError as exc:  # before the models load: a wrong URL fails in a second
        raise SystemExit(fail(str(exc)))
    if isinstance(store, EmbeddedStore) and (err := writable_dir(getattr(args, "state_dir", "var"))):
        raise SystemExit(fail(err))
    try:
        engine = Engine.load(args.kb, policy_file=getattr(args, "policy_file", None),
                             state_dir=getattr(args, "state_dir", "var"), on_date=on_date, store=store)
    except (KBNotFound, PolicyConfigError) as exc:
        store.shutdown()
        raise SystemExit(fail(str(exc)))
    for warning in engine.kb_warnings():
        print(f"warning: {warning}", file=sys.stderr)
    return engine


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kb", required=True, help="knowledge base directory")
    p.add_argument("--state-dir", default="var", help="where audit log and handoffs are written (default: var)")
    p.add_argument("--policy-file", help="policy YAML overriding policy/default_policy.yaml")
    p.add_argument("--date", type=iso_date, help="decide as of this ISO date (default: today)")
    add_store_arg(p)


def cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="run.py ask", description="Ask one question; prints the Decision JSON.")
    add_common(p)
    p.add_argument("--role", default=None, help="caller role for ACLs (default: public)")
    p.add_argument("--facet", action="append", default=[], metavar="KEY=VALUE", help="known caller facet")
    p.add_argument("--session", help="JSON file keeping conversation state across invocations")
    p.add_argument("--policy", default="gated", choices=["gated", "threshold", "minimal"])
    p.add_argument("--fault", action="append", default=[], help="inject a fault (retrieval_unavailable, embedding_unavailable)")
    p.add_argument("--debug", action="store_true", help="include retrieval hits and timings")
    p.add_argument("question")
    args = p.parse_args(argv)
    if err := kb_dir_error(args.kb):
        return fail(err)
    try:
        facets = parse_facets(args.facet)
    except ValueError as exc:
        return fail(str(exc))
    state = _load_state(args.session) if args.session else {}
    engine = load_engine(args)
    try:
        return _ask(args, engine, state, facets)
    except StoreError as exc:  # the database went away mid-turn
        return fail(str(exc), 1)
    finally:
        engine.store.shutdown()


def _ask(args: argparse.Namespace, engine: Engine, state: dict, facets: dict[str, str]) -> int:
    try:
        session = engine.session(role=args.role or state.get("role", "public"),
                                 facets={**state.get("facets", {}), **facets}, session_id=state.get("session_id"),
                                 policy=args.policy)
    except UnknownRole as exc:
        return fail(str(exc))
    if err := facet_error(facets, engine.kb_facets(session.role)):
        return fail(err)
    session.pending_question = state.get("pending_question")
    session.pending_facets = list(state.get("pending_facets") or [])
    session.transcript = state.get("transcript", [])
    session.last_question = state.get("last_question")
    session.topic_team = state.get("topic_team")
    out = session.turn(args.question, faults=args.fault)
    d = out.decision
    if args.debug:
        d = d.model_copy(update={"debug": {"gate": out.gate, "normalized_question": out.normalized_question,
                                           "timings_ms": out.timings_ms, "audit_id": out.audit_id,
                                           "hits": [h.model_dump(exclude={"text"}) for h in (out.retrieval.hits if out.retrieval else [])]}})
        print(d.model_dump_json(indent=2))
    else:
        print(json.dumps(d.public_dict(), indent=2, ensure_ascii=False))
    if args.session:
        Path(args.session).write_text(json.dumps({
            "session_id": session.session_id, "role": session.role, "facets": session.facets,
            "pending_question": session.pending_question, "pending_facets": session.pending_facets,
            "transcript": session.transcript, "last_question": session.last_question,
            "topic_team": session.topic_team}, indent=2))
    return 0


def _load_state(path: str) -> dict:
    p = Path(path)
    if not p.exists():
        return {}
    try:
        data = json.loads(p.read_text())
        return data if isinstance(data, dict) else {}
    except json.JSONDecodeError:
        print(f"warning: session file {path} is not valid JSON; starting a new conversation", file=sys.stderr)
        return {}
