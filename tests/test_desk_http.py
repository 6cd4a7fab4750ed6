"""The desk over HTTP: `GET /v1/handoffs` (token-protected, filtered by team and state) on both
stores, and the webhook POST per new handoff with retries and a signature. A real server on
loopback with the protocol tests' fake call; a real HTTP server stands in for the desk."""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from policy.store_embedded import EmbeddedStore
from tests.server_fakes import FakeRuntime, collect_until_close, connect, recv_json
from voice_agent.transport.config import ServerConfig
from voice_agent.transport.server import ServerState, open_server, server_port

pytestmark = pytest.mark.server
TOKENS = {"desk-token": "agent", "caller-token": "public"}


def _get(port: int, query: str = "", token: str | None = "desk-token") -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/handoffs{query}")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _fill(store) -> None:
    for i, team in enumerate(["billing", "billing", "tech_support"]):
        store.handoffs.append({"id": f"h{i}", "team": team, "question": f"q{i}", "created_at": f"2026-12-01T10:0{i}:00"})
    assert store.claim("h1", "ana").ok


async def _serve(store, **cfg):
    state = ServerState(FakeRuntime(), ServerConfig(tokens=TOKENS, **cfg), make_call_config=dict, store=store)
    return state, await open_server(state, "127.0.0.1", 0)


def _desk_queries(store) -> None:
    _fill(store)

    async def go():
        state, server = await _serve(store)
        port = server_port(server)
        try:
            answers = {q: await asyncio.to_thread(_get, port, q) for q in
                       ["", "?team=billing", "?state=waiting", "?team=billing&state=claimed", "?last=1"]}
            refused = [await asyncio.to_thread(_get, port, "", t) for t in (None, "nope", "caller-token")]
            bad = [await asyncio.to_thread(_get, port, q) for q in ("?state=lost", "?last=x", "?last=0")]
        finally:
            server.close()
            await server.wait_closed()
        return answers, refused, bad

    answers, refused, bad = asyncio.run(go())
    ids = {q: [h["id"] for h in body["handoffs"]] for q, (status, body) in answers.items()}
    assert all(status == 200 for status, _ in answers.values())
    assert ids == {"": ["h0", "h1", "h2"], "?team=billing": ["h0", "h1"], "?state=waiting": ["h0", "h2"],
                   "?team=billing&state=claimed": ["h1"], "?last=1": ["h2"]}
    claimed = answers["?team=billing&state=claimed"][1]["handoffs"][0]
    assert claimed["claimed_by"] == "ana" and claimed["question"] == "q1"
    assert [s for s, _ in refused] == [401, 401, 403] and [s for s, _ in bad] == [400, 400, 400]


def test_desk_lists_handoffs_from_the_embedded_store(tmp_path):
    _desk_queries(EmbeddedStore(tmp_path))


@pytest.mark.pg
def test_desk_lists_handoffs_from_postgresql(pg_url):
    from policy.store_pg import PgStore

    store = PgStore(pg_url)
    try:
        _desk_queries(store)
    finally:
        store.shutdown()


class Desk(BaseHTTPRequestHandler):
    """Answers 500 to the first `fail` POSTs, then 204; records every body and signature."""
    fail = 2
    seen: list[tuple[bytes, str]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Desk.seen.append((body, self.headers.get("X-Voice-Agent-Signature", "")))
        self.send_response(500 if len(Desk.seen) <= Desk.fail else 204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_webhook_is_posted_once_per_handoff_with_retries_and_signature(tmp_path, monkeypatch):
    monkeypatch.setenv("VOICE_AGENT_WEBHOOK_SECRET", "s3cret")
    desk = ThreadingHTTPServer(("127.0.0.1", 0), Desk)
    threading.Thread(target=desk.serve_forever, daemon=True).start()
    Desk.seen = []

    async def go():
        state, server = await _serve(EmbeddedStore(tmp_path), webhook_url=f"http://127.0.0.1:{desk.server_port}/hook",
                                     webhook_retries=3)
        state.webhook.backoff_s = 0.05
        try:
            async with connect(f"ws://127.0.0.1:{server_port(server)}/v1/call") as ws:
                await ws.send(json.dumps({"type": "start"}))
                await recv_json(ws)
                await ws.send(json.dumps({"type": "text", "text": "a human please"}))
                await ws.send(json.dumps({"type": "stop"}))
                await collect_until_close(ws)
            await state.webhook.flush(5)
        finally:
            server.close()
            await server.wait_closed()
        return state.metrics.exposition().decode()

    metrics = asyncio.run(go())
    desk.shutdown()
    assert len(Desk.seen) == 3  # two 500s, then delivered
    body, sig = Desk.seen[-1]
    assert {b for b, _ in Desk.seen} == {body}  # the same body each time
    event = json.loads(body)
    assert event["event"] == "handoff.created" and event["handoff"]["id"] == "h123"
    assert sig == "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert 'voice_agent_webhook_deliveries_total{outcome="delivered"} 1.0' in metrics


@pytest.mark.unit
def test_a_webhook_url_must_be_http():
    with pytest.raises(ValueError, match="webhook_url must be an http"):
        ServerConfig(webhook_url="ftp://desk")
