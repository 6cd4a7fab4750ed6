"""The Twilio transfer with the real voice pipeline: faster-whisper hears the caller, the policy
engine decides and stores the handoff package, piper speaks, the server moves the call through the
official twilio package to an HTTP stand-in of the REST API (tests/twilio_helpers.py). One runtime
is loaded for the module; each test opens its own server on loopback with its own `twilio:` section."""
from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.twilio_helpers import StandIn, TwilioPeer, basic_auth, twilio_section
from voice_agent.audio import read_wav, resample
from voice_agent.transport.config import ServerConfig
from voice_agent.transport.server import ServerState, open_server, server_port

pytestmark = [pytest.mark.server, pytest.mark.audio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    from voice_agent.call import VoiceRuntime

    state = tmp_path_factory.mktemp("state")
    rt = VoiceRuntime.load(ROOT / "fixtures" / "kb", asr_model="tiny.en", state_dir=state)
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def say(tmp_path_factory):
    """A question as the caller says it: espeak-ng at 8 kHz (what a phone line carries)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("needs espeak-ng (apt-get install espeak-ng)")
    folder = tmp_path_factory.mktemp("speech")

    def make(text: str) -> np.ndarray:
        out = folder / f"{abs(hash(text))}.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(out), text], check=True)
        x, sr = read_wav(out)
        return resample(x, sr, 8000)

    return make


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def unpaced(**kw):
    """The call config a live server uses, but replies rendered as fast as they come: the peer
    'plays' them at once (it echoes each mark on arrival), so nothing is gained by pacing."""
    from voice_agent.call import CallConfig

    return CallConfig(**kw, reply_lead_s=None)


async def call(rt, twilio: dict, script) -> TwilioPeer:
    """One Twilio call on a fresh server: `script(peer)` plays the caller; then the stream stops."""
    state = ServerState(rt, ServerConfig(twilio=twilio), audit=rt.engine.audit, make_call_config=unpaced)
    server = await open_server(state, "127.0.0.1", 0)
    from websockets.asyncio.client import connect

    try:
        async with connect(f"ws://127.0.0.1:{server_port(server)}/twilio", compression=None) as ws:
            peer = TwilioPeer(ws)
            await peer.start()
            await script(peer)
            await peer.stop()
            await peer.closed(60)
    finally:
        server.close()
        await server.wait_closed()
    return peer


def handoff(rt, peer: TwilioPeer) -> dict:
    hid = next(m for m in peer.marks() if m.startswith("transfer:")).split(":", 1)[1]
    return next(h for h in jsonl(rt.engine.state_dir / "handoffs.jsonl") if h["id"] == hid)


def redirect_record(rt, handoff_id: str) -> dict:
    found = [r for r in jsonl(rt.engine.state_dir / "audit.jsonl")
             if r.get("kind") == "transfer_redirect" and r["handoff_id"] == handoff_id]
    assert len(found) == 1, found
    return found[0]


async def wait_requests(api: StandIn, n: int, timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(api.requests) < n and loop.time() < deadline:
        await asyncio.sleep(0.05)


def test_a_spoken_request_for_a_person_moves_the_call_once_to_its_team(runtime, say):
    async def script(peer: TwilioPeer) -> None:
        await peer.speak(say("I want to speak to a human agent, please."))
        await peer.wait_mark("transfer:", timeout=60)
        await wait_requests(api, 1)
        await asyncio.sleep(0.5)  # a second update would come now

    with StandIn() as api:
        peer = asyncio.run(call(runtime, twilio_section(api.base_url), script))
    h = handoff(runtime, peer)
    assert h["team"] == "customer_care" and "human_requested" in h["reasons"]
    assert len(api.requests) == 1
    r = api.updates(peer.call_sid)[0]
    assert r.auth == basic_auth() and r.at >= peer.marks_at[f"transfer:{h['id']}"]
    assert "<Enqueue>support</Enqueue>" in r.form["Twiml"]  # customer care is not mapped: the default
    rec = redirect_record(runtime, h["id"])
    assert rec["ok"] is True and rec["destination"] == "enqueue support" and rec["team"] == "customer_care"


@pytest.mark.parametrize("question,team,twiml", [
    # phrases tiny.en hears right from espeak on an 8 kHz line (many others it does not)
    ("How much is my bill?", "billing", "<Dial><Number>+15550100</Number></Dial>"),
    ("How do I turn on Wi-Fi calling?", "tech_support", "<Dial><Sip>sip:desk@example.com</Sip></Dial>"),
])
def test_key_0_after_a_question_rings_that_questions_team(runtime, say, question, team, twiml):
    async def script(peer: TwilioPeer) -> None:
        await peer.speak(say(question))
        await peer.wait_mark("reply:", timeout=60)  # the answer
        await peer.press("0")
        await peer.wait_mark("transfer:", timeout=60)
        await wait_requests(api, 1)

    with StandIn() as api:
        peer = asyncio.run(call(runtime, twilio_section(api.base_url), script))
    h = handoff(runtime, peer)
    assert h["team"] == team, h["transcript"]
    assert len(api.requests) == 1 and twiml in api.updates(peer.call_sid)[0].form["Twiml"]
    assert redirect_record(runtime, h["id"])["ok"] is True


def test_key_0_alone_writes_a_handoff_and_transfers(runtime):
    async def script(peer: TwilioPeer) -> None:
        await peer.press("0")
        await peer.wait_mark("transfer:", timeout=60)
        await wait_requests(api, 1)

    with StandIn() as api:
        peer = asyncio.run(call(runtime, twilio_section(api.base_url), script))
    names = peer.marks()
    assert names[-2].startswith("reply:") and names[-1].startswith("transfer:")  # "transferring you", then the mark
    h = handoff(runtime, peer)
    assert "human_requested" in h["reasons"] and h["team"] == "customer_care"
    assert len(api.requests) == 1


@pytest.mark.parametrize("failure", ["http_500", "closed_port"])
def test_a_failed_redirect_tells_the_caller_and_keeps_the_handoff(runtime, failure):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]

    async def script(peer: TwilioPeer) -> None:
        await peer.press("0")
        await peer.wait_mark("transfer:", timeout=60)
        await peer.wait_mark("reply:", count=2, timeout=60)  # the failure message

    with StandIn(status=500) as api:
        base = api.base_url if failure == "http_500" else f"http://127.0.0.1:{free}"
        peer = asyncio.run(call(runtime, twilio_section(base), script))
    h = handoff(runtime, peer)  # still stored: nothing deletes a package
    after = peer.messages[next(i for i, m in enumerate(peer.messages)
                               if m.get("event") == "mark" and m["mark"]["name"] == f"transfer:{h['id']}"):]
    spoken = sum(len(m["media"]["payload"]) * 3 // 4 for m in after if m.get("event") == "media")
    assert spoken > 8000 * 2  # more than two seconds of speech after the transfer mark
    rec = redirect_record(runtime, h["id"])
    assert rec["ok"] is False and rec["outcome"] == "failed"
    assert ("HTTP 500" if failure == "http_500" else "ConnectionError") in rec["error"]
    assert len(api.requests) == (1 if failure == "http_500" else 0)
