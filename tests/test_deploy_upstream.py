"""The README's "Many servers", run: nginx with deploy/nginx-upstream.conf (TLS, a free loopback
port, a fresh self-signed certificate) in front of two real `run.py serve` processes sharing one
PostgreSQL schema. A typed call through the balancer gets a clarifying question; the server it
landed on is SIGKILLed; the real client reconnects to the same balancer URL, nginx passes the
handshake to the living server, and the call goes on there: the answer reads as the clarify's,
then the transfer. In CI (CI set) a missing nginx fails the test instead of skipping it."""
from __future__ import annotations

import asyncio
import signal

import pytest

from test_deploy_nginx import free_port, nginx_binary, run_nginx, self_signed
from test_resume_kill import TEXTS, Server, _rows
from voice_agent.bench_load import stop_server
from voice_agent.client import stream_call

pytestmark = [pytest.mark.server, pytest.mark.pg, pytest.mark.audio, pytest.mark.slow]


def test_a_call_through_the_balancer_survives_the_kill_of_its_server(pg_url, tmp_path, monkeypatch):
    nginx_binary()
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client's default context trusts exactly this certificate
    servers = [Server(tmp_path / "a", pg_url), Server(tmp_path / "b", pg_url)]
    proxy = None
    try:
        for s in servers:
            s.start()
        listen = free_port()
        proxy = run_nginx(tmp_path / "nginx", "nginx-upstream.conf", listen,
                          {"SERVER1": f"127.0.0.1:{servers[0].port}", "SERVER2": f"127.0.0.1:{servers[1].port}"},
                          cert, key)
        url = f"wss://127.0.0.1:{listen}/v1/call"
        killed: list[Server] = []
        call: dict = {}

        def kill_its_server(ev: dict) -> None:
            call.setdefault("id", ev.get("call_id"))
            if ev.get("type") == "decision" and not killed:
                owner = str(_rows(pg_url, call["id"])[2]["owner"])  # host:pid:nonce of the server the call is on
                [on] = [s for s in servers if str(s.proc.pid) == owner.split(":")[1]]
                on.proc.send_signal(signal.SIGKILL)
                on.proc.wait(10)
                killed.append(on)

        res = asyncio.run(stream_call(url, texts=TEXTS, resume_urls=[url], realtime=False,
                                      on_event=kill_its_server, timeout_s=120))
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(10)
        living = [stop_server(s.proc) for s in servers if s.proc is not None and s.proc.poll() is None]
    assert [d["action"] for d in res.decisions] == ["clarify", "answer", "transfer"], res.events
    assert any(c["doc_id"] == "sim-replacement-business" for c in res.decisions[1]["citations"])
    assert res.resumes == 1 and res.urls == [url, url] and res.close_code == 1000 and len(killed) == 1
    turns, handoffs, checkpoint = _rows(pg_url, res.call_id)
    assert [t["turn"] for t in turns] == [1, 2, 3] and [h["id"] for h in handoffs] == [res.transfers[0]["id"]]
    [other] = [s for s in servers if s is not killed[0]]
    assert checkpoint["owner"].split(":")[1] == str(other.proc.pid) and living == [0]
