"""The websocket server's protocol handling, limits and framing, in-process on loopback.

The voice pipeline is replaced by a small fake CallSession with the real one's shape
(tests/server_fakes.py), isolating the server: routing, limits, error codes, event order. The
Twilio framing is in test_server_twilio.py; the real pipeline runs end to end in test_server_e2e.py.
"""
from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request

import numpy as np
import pytest

from voice_agent.transport.protocol import ERROR_CODES, ProtocolError, event_schemas, parse_client_event
from voice_agent.transport.config import ServerConfigError, load_server_config
from tests.server_fakes import collect_until_close, connect, recv_json, run, Srv, until

pytestmark = [pytest.mark.server]


# ----------------------------------------------------------------------------- unit parts

@pytest.mark.unit
def test_parse_client_event_codes():
    assert parse_client_event('{"type":"start","sample_rate":8000}').sample_rate == 8000
    for raw, code in [("not json", "bad_json"), ("[1,2]", "bad_json"), ('{"type":"dance"}', "unknown_event"),
                      ('{"text":"x"}', "unknown_event"), ('{"type":"text"}', "bad_event"),
                      ('{"type":"start","sample_rate":"fast"}', "bad_event"), ('{"type": []}', "unknown_event"),
                      ('{"type": {}}', "unknown_event"), ("[" * 60000, "bad_json")]:
        with pytest.raises(ProtocolError) as e:
            parse_client_event(raw)
        assert e.value.code == code, raw
        assert e.value.code in ERROR_CODES


@pytest.mark.unit
def test_parse_twilio_refuses_garbage_with_a_code():
    from voice_agent.transport.twilio import parse_twilio

    for raw, code in [('{"event": []}', "unknown_event"), ("[" * 60000, "bad_json"),
                      ('{"event":"dtmf","dtmf":{"digit":"' + "1" * 10000 + '"}}', "bad_event")]:
        with pytest.raises(ProtocolError) as e:
            parse_twilio(raw)
        assert e.value.code == code, raw[:40]


@pytest.mark.unit
def test_event_schemas_cover_every_event():
    s = event_schemas()
    assert set(s) == {"client.start", "client.text", "client.played", "client.stop", "server.ready",
                      "server.transcript", "server.decision", "server.audio", "server.audio_end",
                      "server.clear", "server.transfer", "server.error"}
    assert s["server.error"]["properties"]["code"]["enum"][0] == "bad_json"
    assert "decision" in s["server.decision"]["properties"]


@pytest.mark.unit
def test_server_config_file(tmp_path):
    cfg = load_server_config("fixtures/server.yaml")
    assert cfg.role_for("secret-agent-token") == "agent"
    assert cfg.role_for(None) == "public" and cfg.role_for("nope") is None
    bad = tmp_path / "s.yaml"
    bad.write_text("max_calls: 0\n")
    with pytest.raises(ServerConfigError, match=r"s\.yaml: max_calls"):
        load_server_config(bad)
    bad.write_text("max_cals: 3\n")
    with pytest.raises(ServerConfigError, match="max_cals"):
        load_server_config(bad)
    bad.write_text("tokens: [a, b]\n")
    with pytest.raises(ServerConfigError, match="tokens"):
        load_server_config(bad)
    with pytest.raises(ServerConfigError, match="no such"):
        load_server_config(tmp_path / "missing.yaml")


# ---------------------------------------------------------------------------- native path

def test_text_turn_event_order_and_public_decision():
    async def go():
        async with Srv() as s, connect(s.url()) as ws:
            await ws.send(json.dumps({"type": "start", "caller": {"customer_type": "personal"}}))
            ready = await recv_json(ws)
            assert ready["type"] == "ready" and ready["role"] == "public" and ready["protocol"] == 1
            await ws.send(json.dumps({"type": "text", "text": "what are your hours"}))
            await ws.send(json.dumps({"type": "stop"}))
            msgs, code = await collect_until_close(ws)
            assert code == 1000
            kinds = [m["type"] if isinstance(m, dict) else "bin" for m in msgs]
            assert kinds[:3] == ["transcript", "decision", "audio"]
            assert kinds[-1] == "audio_end" and "bin" in kinds
            d = msgs[1]["decision"]
            assert d["action"] == "answer" and "debug" not in d
            assert s.runtime.calls[0].facets == {"customer_type": "personal"}
            assert await until(lambda: s.state.active == 0 and s.runtime.calls[0].closed)
            metrics = s.state.metrics.exposition().decode()  # what GET /metrics serves
            assert 'voice_agent_turns_total{action="answer"} 1.0' in metrics
            assert 'voice_agent_turn_reasons_total{reason="grounded_answer"} 1.0' in metrics
            assert 'voice_agent_calls_total{endpoint="native"} 1.0' in metrics
            assert "voice_agent_calls_active 0.0" in metrics
    run(go())


def test_transfer_is_sent_after_the_spoken_message_audio():
    async def go():
        async with Srv() as s, connect(s.url()) as ws:
            await ws.send(json.dumps({"type": "start", "token": "agent-token"}))
            assert (await recv_json(ws))["role"] == "agent"
            assert s.runtime.calls[0].role == "agent"
            await ws.send(json.dumps({"type": "text", "text": "a human please"}))
            await ws.send(json.dumps({"type": "stop"}))
            msgs, _ = await collect_until_close(ws)
            kinds = [m["type"] for m in msgs if isinstance(m, dict)]
            assert kinds[-2:] == ["audio_end", "transfer"], kinds
            assert msgs[-1]["handoff"]["id"] == "h123" and msgs[-1]["handoff"]["team"] == "billing"
    run(go())


def test_after_the_transfer_typed_turns_get_no_answer_and_stop_closes_at_once():
    async def go():
        async with Srv() as s, connect(s.url()) as ws:
            await ws.send(json.dumps({"type": "start"}))
            await recv_json(ws)
            await ws.send(json.dumps({"type": "text", "text": "a human please"}))
            while (await recv_json(ws))["type"] != "transfer":
                pass
            await ws.send(json.dumps({"type": "text", "text": "hello? anyone?"}))
            t = time.monotonic()
            await ws.send(json.dumps({"type": "stop"}))
            msgs, code = await collect_until_close(ws)
            assert code == 1000 and not [m for m in msgs if isinstance(m, dict) and m["type"] == "decision"]
            assert time.monotonic() - t < 3  # nothing in flight: the drain does not wait out its timeout
    run(go())


def test_audio_turn_and_barge_in_clear():
    async def go():
        async with Srv(turn_delay=0.3) as s, connect(s.url()) as ws:
            await ws.send(json.dumps({"type": "start", "sample_rate": 8000}))
            await recv_json(ws)
            tone = (8000 * np.sin(np.arange(8000) / 3)).astype("<i2").tobytes()
            silence = bytes(2 * 8000)
            for pcm in (tone, silence):
                for i in range(0, len(pcm), 320):
                    await ws.send(pcm[i : i + 320])
            # speak again while the reply is being sent: barge-in
            ev = await recv_json(ws)
            while ev["type"] != "audio":
                ev = await recv_json(ws)
            for i in range(0, len(tone), 320):
                await ws.send(tone[i : i + 320])
            await ws.send(json.dumps({"type": "stop"}))
            msgs, code = await collect_until_close(ws)
            kinds = [m["type"] for m in msgs if isinstance(m, dict)]
            assert "clear" in kinds, kinds
            assert s.runtime.calls[0].config["input_rate"] == 8000
            assert kinds.count("decision") == 1 and code == 1000  # the barged-in turn ends at stop
    run(go())


def test_protocol_errors_are_reported_and_the_call_survives():
    async def go():
        async with Srv() as s, connect(s.url()) as ws:
            await ws.send(b"\x00\x01" * 160)
            assert (await recv_json(ws))["code"] == "not_started"
            await ws.send(json.dumps({"type": "text", "text": "hi"}))
            assert (await recv_json(ws))["code"] == "not_started"
            await ws.send(json.dumps({"type": "start"}))
            assert (await recv_json(ws))["type"] == "ready"
            for raw, code in [("{{{", "bad_json"), ('{"type":"dance"}', "unknown_event"),
                              ('{"type":"start"}', "already_started"), ('{"type":"text","text":7}', "bad_event"),
                              (json.dumps({"type": "text", "text": "x" * 1001}), "turn_too_long"),
                              (b"\x01\x02\x03", "bad_audio")]:
                await ws.send(raw)
                ev = await recv_json(ws)
                assert ev == {"type": "error", "code": code, "message": ev["message"]}, raw
                assert ev["message"]
            await ws.send(json.dumps({"type": "text", "text": "still there?"}))
            assert (await recv_json(ws))["type"] == "transcript"
    run(go())


@pytest.mark.parametrize("start,code", [
    ({"type": "start", "token": "stolen"}, "unknown_token"),
    ({"type": "start", "sample_rate": 12345}, "bad_sample_rate"),
    ({"type": "start", "protocol": 2}, "bad_protocol"),
])
def test_fatal_start_errors_close_the_call(start, code):
    async def go():
        async with Srv() as s, connect(s.url()) as ws:
            await ws.send(json.dumps(start))
            msgs, close = await collect_until_close(ws)
            assert msgs[0]["code"] == code and close == 1008
            assert s.runtime.calls == []  # never silent public access
            assert await until(lambda: s.state.active == 0)
    run(go())


def test_frame_too_large_and_oversize_close():
    async def go():
        async with Srv(max_frame_bytes=4096) as s:
            async with connect(s.url()) as ws:
                await ws.send(json.dumps({"type": "start"}))
                await recv_json(ws)
                await ws.send(b"\x00" * 5000)
                msgs, close = await collect_until_close(ws)
                assert msgs[-1]["code"] == "frame_too_large" and close == 1009
            async with connect(s.url(), max_size=None) as ws:  # beyond websockets' own max_size
                await ws.send(json.dumps({"type": "start"}))
                await recv_json(ws)
                await ws.send(b"\x00" * 4096 * 5)
                _, close = await collect_until_close(ws)
                assert close == 1009
            assert await until(lambda: s.state.active == 0 and all(c.closed for c in s.runtime.calls))
    run(go())


@pytest.mark.chaos
def test_busy_past_max_calls_then_slot_is_freed():
    async def go():
        async with Srv(max_calls=2) as s:
            a = await connect(s.url())
            b = await connect(s.url())
            for ws in (a, b):
                await ws.send(json.dumps({"type": "start"}))
                await recv_json(ws)
            async with connect(s.url()) as c:
                msgs, close = await collect_until_close(c)
                assert msgs[0]["code"] == "busy" and close == 1013
            assert 'voice_agent_busy_rejections_total{endpoint="native"} 1.0' in s.state.metrics.exposition().decode()
            await a.close()  # abrupt hang-up (no stop) frees a slot
            assert await until(lambda: s.state.active < 2)
            async with connect(s.url()) as d:
                await d.send(json.dumps({"type": "start"}))
                assert (await recv_json(d))["type"] == "ready"
            await b.close()
            assert await until(lambda: s.runtime.calls[0].closed and s.state.active == 0)
    run(go())


@pytest.mark.chaos
def test_silent_squatters_are_closed_and_real_calls_get_in():
    """Ten connections that send `start` and then nothing cannot hold the call slots: each is
    closed with `idle_timeout` once it has been silent for idle_timeout_s, and every real call
    that comes after is admitted (10 of 10)."""
    async def go():
        async with Srv(max_calls=10, idle_timeout_s=0.5) as s:
            squatters = [await connect(s.url()) for _ in range(10)]
            for ws in squatters:
                await ws.send(json.dumps({"type": "start"}))
                await recv_json(ws)
            closes = await asyncio.gather(*(collect_until_close(ws, timeout=5) for ws in squatters))
            assert all(msgs[-1]["code"] == "idle_timeout" and code == 1008 for msgs, code in closes)
            admitted = 0
            for _ in range(10):
                async with connect(s.url()) as real:
                    await real.send(json.dumps({"type": "start"}))
                    admitted += (await recv_json(real))["type"] == "ready"
                    await real.send(json.dumps({"type": "stop"}))
                    await collect_until_close(real)
            assert admitted == 10
    run(go())


def test_session_and_start_time_limits():
    async def go():
        async with Srv(max_session_s=0.5, start_timeout_s=0.3) as s:
            async with connect(s.url()) as ws:
                msgs, close = await collect_until_close(ws)
                assert msgs[0]["code"] == "not_started" and close == 1008
            async with connect(s.url()) as ws:
                await ws.send(json.dumps({"type": "start"}))
                await recv_json(ws)
                t = time.monotonic()
                msgs, close = await collect_until_close(ws)
                assert msgs[-1]["code"] == "session_too_long" and close == 1008
                assert time.monotonic() - t < 2
    run(go())


def test_turn_too_long_cuts_an_endless_turn():
    async def go():
        async with Srv(max_turn_s=1.0) as s, connect(s.url()) as ws:
            await ws.send(json.dumps({"type": "start"}))
            await recv_json(ws)
            noise = (6000 * np.sin(np.arange(320) / 2)).astype("<i2").tobytes()  # 20 ms, never quiet
            for _ in range(60):
                await ws.send(noise)
            kinds = []
            while "turn_too_long" not in kinds:
                ev = await recv_json(ws)
                kinds.append(ev.get("code", ev["type"]))
            assert s.runtime.calls[0].cuts >= 1  # the call's endpointer cut it and answered
    run(go())


def test_http_routes():
    async def go():
        async with Srv() as s:
            base = f"http://127.0.0.1:{s.port}"

            def get(path):
                try:
                    with urllib.request.urlopen(base + path, timeout=5) as r:
                        return r.status, r.headers.get("Content-Type"), r.read()
                except urllib.error.HTTPError as e:
                    return e.code, e.headers.get("Content-Type"), e.read()

            st, ct, body = await asyncio.to_thread(get, "/")
            assert st == 200 and ct.startswith("text/html") and b"Start call" in body
            # every file the page loads (scripts, modules it imports, the stylesheet) is served
            wanted = set(re.findall(r'(?:src|href)="(/[^"]+)"', body.decode()))
            seen: set[str] = set()
            while wanted - seen:
                path = sorted(wanted - seen)[0]
                seen.add(path)
                st, ct, asset = await asyncio.to_thread(get, path)
                assert st == 200, path
                assert ("javascript" if path.endswith(".js") else "css") in ct, (path, ct)
                for pair in re.findall(r'from "(/[^"]+)"|addModule\("(/[^"]+)"\)', asset.decode()):
                    wanted |= {p for p in pair if p}
            assert {"/app.js", "/console.js", "/meter.js", "/pcm-worklet.js", "/style.css"} <= seen, seen
            st, _, body = await asyncio.to_thread(get, "/healthz")
            assert st == 200 and json.loads(body)["max_calls"] == 4 and json.loads(body)["ready"]
            s.state.shutting_down.set()  # draining: not ready, still alive
            assert (await asyncio.to_thread(get, "/readyz"))[0] == 503
            assert (await asyncio.to_thread(get, "/healthz"))[0] == 503
            st, _, body = await asyncio.to_thread(get, "/livez")
            assert st == 200 and json.loads(body)["draining"]
            s.state.shutting_down.clear()
            st, ct, body = await asyncio.to_thread(get, "/metrics")
            assert st == 200 and ct.startswith("text/plain") and b"voice_agent_calls_active" in body
            st, _, _ = await asyncio.to_thread(get, "/nope")
            assert st == 404
            st, _, _ = await asyncio.to_thread(get, "/v1/call")  # plain GET on a websocket path
            assert st == 426
    run(go())
