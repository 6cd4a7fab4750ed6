"""`run.py ask`: one typed question through the full text path, Decision JSON on stdout."""
from __future__ import annotations

import argparse
import datetime as dt
import difflib
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from kb.loader import KBNotFound, kb_dir_error

from .config import PolicyConfigError
from .engine import POLICIES, Engine, UnknownRole
from .session_state import SessionState
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
    p.add_argument("--policy", default="gated", choices=POLICIES)
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
    state = _load_state(args.session) if args.session else None
    engine = load_engine(args)
    try:
        return _ask(args, engine, state, facets)
    except StoreError as exc:  # the database went away mid-turn
        return fail(str(exc), 1)
    finally:
        engine.store.shutdown()


def _ask(args: argparse.Namespace, engine: Engine, state: SessionState | None, facets: dict[str, str]) -> int:
    # the session file's conversation, with --role and --facet on top of what it remembers
    base = state or SessionState()
    base = base.model_copy(update={"role": args.role or base.role, "facets": {**base.facets, **facets}})
    try:
        session = engine.session(state=base, policy=args.policy)
    except UnknownRole as exc:
        return fail(str(exc))
    if err := facet_error(facets, engine.kb_facets(session.role)):
        return fail(err)
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
        Path(args.session).write_text(session.snapshot().model_dump_json(indent=2))
    return 0


def _load_state(path: str) -> SessionState | None:
    """The conversation a session file keeps (None: none yet). Files written before the state had
    a model load too: a field they lack takes its default."""
    p = Path(path)
    if not p.exists():
        return None
    try:
        return SessionState.model_validate_json(p.read_text())
    except (ValidationError, OSError, UnicodeDecodeError) as exc:
        why = "is not valid JSON" if "json_invalid" in str(exc) else "does not hold a conversation"
        print(f"warning: session file {path} {why}; starting a new conversation", file=sys.stderr)
        return None
