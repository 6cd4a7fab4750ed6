"""The websocket server's Twilio media-stream path, in-process on loopback: framing, marks, the
transfer mark, fatal starts, busy, barge-in, and the protocol document's schemas."""
from __future__ import annotations

import asyncio
import base64
import json
import time

import numpy as np
import pytest

from voice_agent.transport.protocol import ERROR_CODES, event_schemas
from tests.server_fakes import collect_until_close, connect, recv_json, run, Srv

pytestmark = [pytest.mark.server]


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
