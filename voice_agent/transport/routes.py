"""The HTTP side of the server: the browser page and its scripts, the health probes, /metrics,
the handoff desk (`/v1/handoffs`) and 404s; websocket paths pass through to the handshake."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from .desk_http import list_handoffs
from .metrics import CONTENT_TYPE_LATEST
from .protocol import PROTOCOL_VERSION
from .state import ServerState

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
WEB_FILES = {  # path -> (file, content type); no build step, no CDN
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/meter.js": ("meter.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
    "/pcm-worklet.js": ("pcm-worklet.js", "text/javascript; charset=utf-8"),
}
WS_PATHS = ("/v1/call", "/twilio")


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 503: "Service Unavailable"}


def process_request_for(state: ServerState) -> Callable[[ServerConnection, Request], Awaitable[Response | None]]:
    def respond(status: int, reason: str, body: bytes, ctype: str) -> Response:
        headers = Headers([("Content-Type", ctype), ("Content-Length", str(len(body))),
                           ("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")])
        return Response(status, reason, headers, body)

    def health(path: str) -> Response:
        """`/livez`: the process answers (200). `/readyz` and `/healthz`: it takes new calls; 503
        while draining on shutdown, so a load balancer stops sending callers here."""
        ready = not state.shutting_down.is_set()
        body = json.dumps({"ok": ready or path == "/livez", "ready": ready, "draining": not ready,
                           "active_calls": state.active, "max_calls": state.config.max_calls,
                           "protocol": PROTOCOL_VERSION}).encode()
        if ready or path == "/livez":
            return respond(200, "OK", body, "application/json")
        return respond(503, "Service Unavailable", body, "application/json")

    async def process_request(connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path in WS_PATHS:
            return None  # websocket handshake (websockets answers 426 to a plain GET)
        if path == "/v1/handoffs":  # the store may be a database: off the event loop
            ans = await asyncio.to_thread(list_handoffs, state.store, state.config, request.path,
                                          request.headers.get("Authorization"))
            return respond(ans.status, _REASONS.get(ans.status, "Error"), ans.body, "application/json")
        if path in ("/healthz", "/readyz", "/livez"):
            return health(path)
        if path == "/metrics":
            return respond(200, "OK", state.metrics.exposition(), CONTENT_TYPE_LATEST)
        if path in WEB_FILES:
            name, ctype = WEB_FILES[path]
            try:
                body = (WEB_DIR / name).read_bytes()
            except OSError:
                return respond(500, "Internal Server Error", f"missing {name}\n".encode(), "text/plain")
            return respond(200, "OK", body, ctype)
        return respond(404, "Not Found", f"no route {path}; try /, /v1/call, /twilio, /v1/handoffs\n".encode(),
                       "text/plain")

    return process_request
