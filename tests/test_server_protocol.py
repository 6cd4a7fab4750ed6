"""The websocket server's protocol handling, limits and framing, in-process on loopback.

The voice pipeline is replaced by a small fake CallSession with the real one's shape (isolating
the server: routing, limits, error codes, event order, Twilio framing). The real pipeline is
exercised end to end in test_server_e2e.py.
"""
from __future__ import annotations

import asyncio
import base64
import json
import re
import time
import urllib.request
from typing import Any

import numpy as np
import pytest

from policy.decision import Action, Decision, Handoff, Reason
from policy.session_state import SessionState
from voice_agent.call.events import (AudioChunk, AudioEnd, AudioStart, ClearEvent, DecisionEvent,
                                     TranscriptEvent, TransferEvent)
from voice_agent.transport.protocol import ERROR_CODES, ProtocolError, event_schemas, parse_client_event
from voice_agent.transport.server import ServerState, open_server, server_port
from voice_agent.transport.config import ServerConfig, ServerConfigError, load_server_config

pytestmark = [pytest.mark.server]


# ------------------------------------------------------------------------------ fake call
# The fake call emits the real call events, so it cannot drift from what the server reads.

_END = object()


class FakeCall:
    """Energy endpointing; 'human' in a turn → transfer, else answer; replies are a tone.
    `turn_delay` simulates ASR + policy time (to test draining on shutdown)."""

    def __init__(self, role: str, facets: dict, config: dict, turn_delay: float = 0.05, state=None, on_turn=None):
        self.role, self.facets, self.config = role, facets, config
        # the conversation the server checkpoints (a stand-in for the policy session's own)
        self.state = state or SessionState(role=role, facets=facets)
        self.on_turn = on_turn
        self.q: asyncio.Queue = asyncio.Queue()
        self.voiced_ms = 0
        self.quiet_ms = 0
        self.turn_delay = turn_delay
        self.reply_id = 0
        self.closed = False
        self.audio_fed = 0
        self.ends = 0
        self.cuts = 0
        self.playing = False
        self.said: list[str] = []  # fixed messages spoken outside a turn

    async def feed_audio(self, pcm16: bytes) -> None:
        self.audio_fed += len(pcm16)
        x = np.frombuffer(pcm16, "<i2").astype(np.float32)
        ms = 1000 * len(x) / self.config["input_rate"]
        if x.size and np.sqrt(np.mean(x**2)) > 500:
            if self.playing:
                self.playing = False
                await self.q.put(ClearEvent())
            self.voiced_ms += ms
            self.quiet_ms = 0
            if self.voiced_ms >= 1000 * self.config["max_turn_s"]:  # the endpointer's own cut
                self.cuts += 1
                await self._turn("an endless turn")
        elif self.voiced_ms:
            self.quiet_ms += ms
            if self.quiet_ms >= self.config["end_silence_ms"]:
                await self._turn("hello from audio")

    async def text_turn(self, text: str) -> None:
        await self._turn(text)

    async def end_of_input(self) -> None:
        self.ends += 1
        if self.voiced_ms:
            await self._turn("hello from audio")

    async def _turn(self, text: str) -> None:
        self.voiced_ms = self.quiet_ms = 0
        await self.q.put(TranscriptEvent(text=text, final=True))
        await asyncio.sleep(self.turn_delay)
        transfer = "human" in text or text.endswith("a person")
        handoff = Handoff(id="h123", team="billing", summary="wants a human") if transfer else None
        d = Decision(action=Action.transfer if transfer else Action.answer,
                     message="Connecting you." if transfer else f"You said {text}.",
                     reasons=[Reason.human_requested if transfer else Reason.grounded_answer], handoff=handoff,
                     debug={"secret": "x"})
        self.state.turns += 1
        self.state.transcript += [f"caller: {text}", f"agent: {d.message}"]
        if self.on_turn is not None:  # as the real call: after the turn, before the decision goes out
            self.on_turn(self.state.model_copy(deep=True), d)
        await self.q.put(DecisionEvent(decision=d))
        await self._reply()
        if transfer:
            await self.q.put(TransferEvent(handoff=handoff))

    async def say(self, text: str) -> None:
        self.said.append(text)
        await self._reply()

    async def _reply(self) -> None:
        self.reply_id += 1
        rate = self.config["output_rate"]
        await self.q.put(AudioStart(id=str(self.reply_id), sample_rate=rate, encoding=self.config["output_encoding"]))
        self.playing = True
        tone = (0.3 * np.sin(np.arange(rate // 5) * 2 * np.pi * 440 / rate)).astype(np.float32)
        from voice_agent.audio import float_to_pcm16, mulaw_encode

        data = mulaw_encode(tone) if self.config["output_encoding"] == "mulaw" else float_to_pcm16(tone)
        for i in range(0, len(data), 1000):
            await self.q.put(AudioChunk(id=str(self.reply_id), data=data[i : i + 1000]))
        await self.q.put(AudioEnd(id=str(self.reply_id)))

    async def events(self):
        while True:
            ev = await self.q.get()
            if ev is _END:
                return
            yield ev

    async def close(self) -> None:
        self.closed = True
        await self.q.put(_END)


class FakeRuntime:
    def __init__(self, turn_delay: float = 0.05):
        self.calls: list[FakeCall] = []
        self.turn_delay = turn_delay

    def new_call(self, *, role="public", facets=None, config=None, state=None, on_turn=None) -> FakeCall:
        c = FakeCall(role, dict(facets or {}), config, self.turn_delay, state, on_turn)
        self.calls.append(c)
        return c


class Srv:
    def __init__(self, **cfg: Any):
        self.runtime = FakeRuntime(cfg.pop("turn_delay", 0.05))
        self.checkpoints = cfg.pop("checkpoints", None)  # a real store, for resume tests
        self.config = ServerConfig(**{"tokens": {"agent-token": "agent"}, **cfg})
        self.audit: list[dict] = []  # the server's own records (a list has the sink's `append`)

    async def __aenter__(self) -> "Srv":
        self.state = ServerState(self.runtime, self.config, make_call_config=dict, audit=self.audit,
                                 checkpoints=self.checkpoints)
        self.server = await open_server(self.state, "127.0.0.1", 0)
        self.port = server_port(self.server)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.server.close()
        await self.server.wait_closed()
        if exc[0] is None:  # no task of any call may outlive the server (pumps, text turns, timers)
            me = asyncio.current_task()
            assert await until(lambda: not [t for t in asyncio.all_tasks() if t is not me]), \
                [t.get_coro() for t in asyncio.all_tasks() if t is not me]
            assert self.state.active == 0
            assert all(c.closed for c in self.runtime.calls)

    def url(self, path: str = "/v1/call") -> str:
        return f"ws://127.0.0.1:{self.port}{path}"


async def recv_json(ws, timeout=5.0) -> dict:
    while True:
        m = await asyncio.wait_for(ws.recv(), timeout)
        if isinstance(m, str):
            return json.loads(m)


async def collect_until_close(ws, timeout=10.0) -> tuple[list, int | None]:
    from websockets.exceptions import ConnectionClosed

    out: list = []
    try:
        async with asyncio.timeout(timeout):
            async for m in ws:
                out.append(json.loads(m) if isinstance(m, str) else m)
    except ConnectionClosed:
        pass
    return out, ws.close_code


async def until(pred, timeout=2.0) -> bool:
    t = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > t:
            return False
        await asyncio.sleep(0.02)
    return True


def run(coro):
    return asyncio.run(coro)


def connect(url, **kw):
    from websockets.asyncio.client import connect as c

    return c(url, compression=None, **kw)


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


# ---------------------------------------------------------------------------- Twilio path

def _twilio_start(sid="MZ1", params=None, fmt=None):
    return json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": sid,
                       "start": {"streamSid": sid, "callSid": "CA1", "accountSid": "AC1", "tracks": ["inbound"],
                                 "customParameters": params or {},
                                 "mediaFormat": fmt or {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})


def test_twilio_framing_media_marks_and_transfer_mark():
    from voice_agent.audio import mulaw_encode

    async def go():
        async with Srv() as s, connect(s.url("/twilio")) as ws:
            await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            await ws.send(_twilio_start(params={"token": "agent-token", "customer_type": "business"}))
            tone = 0.5 * np.sin(np.arange(8000) / 3)
            audio = mulaw_encode(np.concatenate([tone, np.zeros(8000)]))
            for i in range(0, len(audio), 160):
                await ws.send(json.dumps({"event": "media", "streamSid": "MZ1",
                                          "media": {"track": "inbound", "payload": base64.b64encode(audio[i:i + 160]).decode()}}))
            await ws.send(json.dumps({"event": "dtmf", "streamSid": "MZ1", "dtmf": {"digit": "1"}}))
            await ws.send("garbage")  # logged, not fatal
            await ws.send(json.dumps({"event": "stop", "streamSid": "MZ1", "stop": {}}))
            msgs, code = await collect_until_close(ws)
            assert code == 1000
            assert all(m["streamSid"] == "MZ1" and m["event"] in ("media", "mark", "clear") for m in msgs)
            media = [m for m in msgs if m["event"] == "media"]
            assert media and all(len(base64.b64decode(m["media"]["payload"])) <= 160 for m in media)
            assert sum(len(base64.b64decode(m["media"]["payload"])) for m in media) == 1600  # 0.2 s at 8 kHz
            assert msgs[-1] == {"event": "mark", "streamSid": "MZ1", "mark": {"name": "reply:1"}}
            call = s.runtime.calls[0]
            assert call.role == "agent" and call.facets == {"customer_type": "business"}
            assert call.config["output_encoding"] == "mulaw" and call.config["input_rate"] == 8000

        # a transfer: the mark follows the spoken message's media
        s.runtime.calls.clear()
        async with Srv() as s2, connect(s2.url("/twilio")) as ws:
            await ws.send(_twilio_start())
            await asyncio.sleep(0.05)
            await s2.runtime.calls[0].text_turn("a human please")
            await ws.send(json.dumps({"event": "stop", "streamSid": "MZ1"}))
            msgs, _ = await collect_until_close(ws)
            names = [m["mark"]["name"] for m in msgs if m["event"] == "mark"]
            assert names == ["reply:1", "transfer:h123"]
            assert msgs[-1]["mark"]["name"] == "transfer:h123" and msgs[-2]["event"] == "mark"
    run(go())


@pytest.mark.parametrize("params,fmt,code", [
    ({"token": "stolen"}, None, 1008),
    ({}, {"encoding": "audio/x-l16", "sampleRate": 16000, "channels": 1}, 1008),
])
def test_twilio_fatal_start(params, fmt, code):
    async def go():
        async with Srv() as s, connect(s.url("/twilio")) as ws:
            await ws.send(_twilio_start(params=params, fmt=fmt))
            msgs, close = await collect_until_close(ws)
            assert msgs == [] and close == code  # Twilio gets no non-Twilio messages
            assert ws.close_reason in ("unknown_token", "bad_sample_rate")
            assert s.runtime.calls == []
    run(go())


def test_twilio_busy_closes_1013():
    async def go():
        async with Srv(max_calls=1) as s:
            async with connect(s.url("/twilio")) as a:
                await a.send(_twilio_start())
                await asyncio.sleep(0.05)
                async with connect(s.url("/twilio")) as b:
                    _, close = await collect_until_close(b)
                    assert close == 1013 and b.close_reason == "busy"
    run(go())


@pytest.mark.unit
def test_protocol_doc_schemas_match_the_models():
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "PROTOCOL.md").read_text()
    assert "version **1**" in doc
    block = doc.split("## JSON Schemas", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    assert json.loads(block) == {"protocol": 1, "events": event_schemas()}, \
        "docs/PROTOCOL.md is stale: regenerate its schema block with `python3 run.py serve --print-schemas`"
    for code in ERROR_CODES:
        assert f"`{code}`" in doc, code


def test_twilio_barge_in_sends_clear():
    from voice_agent.audio import mulaw_encode

    async def go():
        async with Srv(turn_delay=0.2) as s, connect(s.url("/twilio")) as ws:
            await ws.send(_twilio_start(sid="MZ9"))
            tone = mulaw_encode(0.5 * np.sin(np.arange(4000) / 3))
            quiet = mulaw_encode(np.zeros(8000))

            async def media(audio):
                for i in range(0, len(audio), 160):
                    await ws.send(json.dumps({"event": "media", "streamSid": "MZ9",
                                              "media": {"payload": base64.b64encode(audio[i:i + 160]).decode()}}))

            await media(tone + quiet)
            await asyncio.sleep(0.3)  # the reply is being sent
            await media(tone)  # the caller talks over it
            await ws.send(json.dumps({"event": "stop", "streamSid": "MZ9"}))
            msgs, _ = await collect_until_close(ws)
            assert {"event": "clear", "streamSid": "MZ9"} in msgs
    run(go())


def test_shutdown_drains_turn_in_flight_and_releases_silent_connections():
    async def go():
        async with Srv(turn_delay=0.5) as s:
            silent = await connect(s.url())  # never sends start
            async with connect(s.url()) as ws:
                await ws.send(json.dumps({"type": "start"}))
                await recv_json(ws)
                await ws.send(json.dumps({"type": "text", "text": "what are your hours"}))
                assert (await recv_json(ws))["type"] == "transcript"  # the turn is in flight
                t = time.monotonic()
                s.state.shutting_down.set()
                msgs, code = await collect_until_close(ws)
                kinds = [m["type"] for m in msgs if isinstance(m, dict)]
                assert kinds[0] == "decision" and kinds[-1] == "audio_end" and code == 1001
                silent_msgs, silent_code = await collect_until_close(silent)
                assert silent_code == 1001 and silent_msgs[0]["code"] == "busy"
                assert time.monotonic() - t < 3
                async with connect(s.url()) as late:  # admitted no more
                    _, late_code = await collect_until_close(late)
                    assert late_code == 1013
    run(go())
