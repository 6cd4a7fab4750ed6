"""`GET /v1/handoffs?team=T&state=waiting&last=N`: the handoff desk over HTTP.

Protected like the websocket: `Authorization: Bearer <token>`, and the token's role must be one of
the config's `desk_roles`. Answers a JSON object `{"handoffs": [...]}`, oldest first; each item
is the stored package with its desk fields (state, claimed_by, claimed_at, closed_at)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from policy.store_api import HandoffStore

from .config import ServerConfig

__all__ = ["DeskAnswer", "list_handoffs"]

STATES = ("waiting", "claimed", "closed")
MAX_LAST = 1000


@dataclass(frozen=True)
class DeskAnswer:
    status: int
    body: bytes


def _error(status: int, message: str) -> DeskAnswer:
    return DeskAnswer(status, json.dumps({"error": message}).encode())


def list_handoffs(store: HandoffStore | None, config: ServerConfig, target: str,
                  authorization: str | None) -> DeskAnswer:
    """The answer to one request (blocking: the server runs it off the event loop)."""
    token = (authorization or "").removeprefix("Bearer ").strip()
    role = config.tokens.get(token) if token else None
    if role is None:
        return _error(401, "a desk token is required: Authorization: Bearer <token>")
    if role not in config.desk_roles:
        return _error(403, f"role {role!r} may not read handoffs (desk_roles: {', '.join(config.desk_roles)})")
    if store is None:
        return _error(503, "this server has no handoff store")
    query = parse_qs(urlsplit(target).query)
    team = query["team"][0] if query.get("team") else None
    state = query["state"][0] if query.get("state") else None
    if state is not None and state not in STATES:
        return _error(400, f"state must be one of {', '.join(STATES)}")
    try:
        last = int((query.get("last") or ["100"])[0])
    except ValueError:
        return _error(400, "last must be a whole number")
    if not 0 < last <= MAX_LAST:
        return _error(400, f"last must be between 1 and {MAX_LAST}")
    try:
        rows = store.read_handoffs(team=team, state=state, last=last)
    except OSError as e:  # StoreError: the database is down
        return _error(503, " ".join(str(e).split())[:200])
    items = [{**r.package, "id": r.id, "team": r.team, "created_at": r.created_at, **r.desk()} for r in rows]
    return DeskAnswer(200, json.dumps({"handoffs": items}, ensure_ascii=False, default=str).encode())
