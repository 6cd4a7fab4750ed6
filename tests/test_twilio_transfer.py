"""The Twilio transfer that reaches a person, on a real server on loopback: a websocket peer plays
Twilio's Media Stream, an HTTP stand-in plays its REST API and records every request. Here the call
is the protocol tests' fake (the server's part isolated: when and how the call is moved, what
happens when that fails); test_twilio_transfer_e2e.py runs the same with the real voice pipeline."""
from __future__ import annotations

import asyncio
import socket
import time

import pytest

from tests.server_fakes import Srv, connect, until
from tests.twilio_helpers import SID, StandIn, TwilioPeer, basic_auth, twilio_section
from voice_agent.transport.twilio_transfer import REDIRECT_FAILED_MESSAGE

pytestmark = [pytest.mark.server]


def records(s: Srv) -> list[dict]:
    return [r for r in s.audit if r.get("kind") == "transfer_redirect"]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_call_moves_once_and_only_after_the_transfer_message_played():
    async def go():
        with StandIn() as api:
            async with Srv(twilio=twilio_section(api.base_url)) as s, connect(s.url("/twilio")) as ws:
                peer = TwilioPeer(ws, hold_transfer=True)
                await peer.start()
                await peer.press("0")  # the FakeCall transfers to billing
                await peer.wait_mark("transfer:", timeout=5)
                await asyncio.sleep(0.5)
                assert api.requests == []  # the message has not played yet: the call stays
                echoed = time.monotonic()
                await peer.play_transfer()
                assert await until(lambda: len(api.requests) >= 1, 5)
                await asyncio.sleep(0.3)
                await peer.stop()
                await peer.closed()
                assert len(api.requests) == 1
                r = api.updates(peer.call_sid)[0]
                assert r.method == "POST" and r.at >= echoed and r.auth == basic_auth()
                assert "<Dial><Number>+15550100</Number></Dial>" in r.form["Twiml"]
                rec = records(s)
                assert len(rec) == 1 and rec[0]["ok"] is True and rec[0]["outcome"] == "redirected"
                assert rec[0]["handoff_id"] == "h123" and rec[0]["destination"] == "dial +15550100"
                assert rec[0]["call_sid"] == peer.call_sid and s.runtime.calls[0].said == []
    asyncio.run(go())


def test_without_an_echo_the_call_moves_after_mark_wait_s():
    async def go():
        with StandIn() as api:
            async with Srv(twilio=twilio_section(api.base_url, mark_wait_s=0.4)) as s, \
                    connect(s.url("/twilio")) as ws:
                peer = TwilioPeer(ws, hold_transfer=True)  # never echoes it
                await peer.start()
                await peer.press("0")
                mark = await peer.wait_mark("transfer:", timeout=5)
                assert await until(lambda: len(api.requests) == 1, 5)
                assert api.requests[0].at - peer.marks_at[mark] >= 0.4
                await peer.stop()
                await peer.closed()
                assert len(api.requests) == 1 and records(s)[0]["waited_s"] >= 0.4
    asyncio.run(go())


def test_a_stream_that_stops_before_the_message_played_is_not_moved():
    async def go():
        with StandIn() as api:
            async with Srv(twilio=twilio_section(api.base_url)) as s, connect(s.url("/twilio")) as ws:
                peer = TwilioPeer(ws, hold_transfer=True)
                await peer.start()
                await peer.press("0")
                await peer.wait_mark("transfer:", timeout=5)
                t = time.monotonic()
                await peer.stop()  # the caller hung up during the message
                await peer.closed()
                assert time.monotonic() - t < 3  # no wait for mark_wait_s (5 s)
                assert api.requests == []
                assert [r["outcome"] for r in records(s)] == ["stream_ended"]
    asyncio.run(go())


def test_without_a_twilio_section_the_transfer_is_the_mark_only_and_says_so():
    async def go():
        async with Srv() as s, connect(s.url("/twilio")) as ws:
            peer = TwilioPeer(ws)
            await peer.start()
            await peer.press("0")
            await peer.wait_mark("transfer:", timeout=5)
            assert await until(lambda: records(s), 2)
            await peer.stop()
            await peer.closed()
            rec = records(s)
            assert len(rec) == 1 and rec[0]["ok"] is False and rec[0]["outcome"] == "not_configured"
            assert "no twilio section" in rec[0]["error"] and s.runtime.calls[0].said == []
            assert peer.marks() == ["reply:1", "transfer:h123"]
    asyncio.run(go())


@pytest.mark.parametrize("failure", ["http_500", "closed_port", "timeout"])
def test_a_failed_redirect_is_spoken_recorded_and_never_retried(failure):
    async def go():
        with StandIn(status=500 if failure == "http_500" else 200, delay_s=3 if failure == "timeout" else 0) as api:
            base = f"http://127.0.0.1:{closed_port()}" if failure == "closed_port" else api.base_url
            async with Srv(twilio=twilio_section(base, timeout_s=0.5)) as s, connect(s.url("/twilio")) as ws:
                peer = TwilioPeer(ws)
                await peer.start()
                await peer.press("0")
                await peer.wait_mark("reply:", count=2, timeout=10)  # the failure message, spoken
                names = peer.marks()
                assert names[:2] == ["reply:1", "transfer:h123"] and names[2] == "reply:2"
                media = [i for i, m in enumerate(peer.messages) if m.get("event") == "media"]
                transfer_at = next(i for i, m in enumerate(peer.messages) if m.get("event") == "mark"
                                   and m["mark"]["name"].startswith("transfer:"))
                assert any(i > transfer_at for i in media)  # audio after the transfer mark
                await peer.stop()
                await peer.closed()
                assert s.runtime.calls[0].said == [REDIRECT_FAILED_MESSAGE]
                rec = records(s)
                assert len(rec) == 1 and rec[0]["ok"] is False and rec[0]["outcome"] == "failed"
                assert rec[0]["handoff_id"] == "h123"
                expect = {"http_500": "HTTP 500", "closed_port": "ConnectionError", "timeout": "Timeout"}[failure]
                assert expect in rec[0]["error"], rec[0]["error"]
                assert len(api.requests) == (0 if failure == "closed_port" else 1)  # one try, no retry
    asyncio.run(go())


def test_only_key_0_asks_for_a_person_and_only_once():
    async def go():
        with StandIn() as api:
            async with Srv(twilio=twilio_section(api.base_url)) as s, connect(s.url("/twilio")) as ws:
                peer = TwilioPeer(ws)
                await peer.start()
                for d in "19#*":
                    await peer.press(d)
                await asyncio.sleep(0.3)
                assert peer.marks() == [] and api.requests == []
                await peer.press("0")
                await peer.wait_mark("transfer:", timeout=5)
                assert await until(lambda: len(api.requests) == 1, 5)
                await peer.press("0")  # the call is a person's now: no second request, no second update
                await asyncio.sleep(0.5)
                await peer.stop()
                await peer.closed()
                assert len(api.requests) == 1 and len(records(s)) == 1
                assert api.requests[0].path == f"/2010-04-01/Accounts/{SID}/Calls/{peer.call_sid}.json"
    asyncio.run(go())
