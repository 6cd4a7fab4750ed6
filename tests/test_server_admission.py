"""Per-address admission: wrong-token backoff, per-address call and connection-rate limits, and
the proxy's X-Forwarded-For. Unit tests on a simulated clock; server tests on loopback, where
127.0.0.2 stands for a second client machine."""
from __future__ import annotations

import contextlib
import json

import pytest
from websockets.exceptions import ConnectionClosed

from tests.server_fakes import Srv, collect_until_close, connect, recv_json, run
from voice_agent.interfaces import ManualClock
from voice_agent.transport.admission import AddressGuard, AddressLimits


@pytest.mark.unit
def test_token_backoff_doubles_then_forgives():
    clock = ManualClock()
    g = AddressGuard(AddressLimits(token_failures_free=3, token_backoff_max_s=8), clock)
    assert [g.token_failed("a") for _ in range(3)] == [0, 0, 0]
    assert g.token_failed("a") == 1
    assert g.admit("a") is not None and g.admit("a").code == "rate_limited"
    assert g.admit("b") is None  # another address is not affected
    clock.advance(1.01)
    assert g.admit("a") is None
    g.release("a")
    assert [g.token_failed("a") for _ in range(5)] == [2, 4, 8, 8, 8]  # capped
    clock.advance(17)  # twice the cap with no failure: the streak is forgiven
    assert g.token_failed("a") == 0


@pytest.mark.unit
def test_per_address_calls_and_connection_rate():
    clock = ManualClock()
    g = AddressGuard(AddressLimits(max_calls=2, connects_per_minute=3), clock)
    assert g.admit("a") is None and g.admit("a") is None
    refusal = g.admit("a")
    assert refusal is not None and refusal.code == "busy"
    g.release("a")
    assert g.admit("a").code == "rate_limited"  # a 4th connection within the minute
    clock.advance(60.5)
    assert g.admit("a") is None


@pytest.mark.unit
def test_idle_addresses_are_forgotten():
    clock = ManualClock()
    g = AddressGuard(AddressLimits(), clock)
    for i in range(100):
        assert g.admit(f"10.0.0.{i}") is None
        g.release(f"10.0.0.{i}")
    assert g.tracked() == 0


async def _start(ws, token: str | None = None) -> dict:
    await ws.send(json.dumps({"type": "start", **({"token": token} if token else {})}))
    return await recv_json(ws)


@pytest.mark.chaos
def test_token_guessing_is_slowed_and_honest_callers_still_get_in():
    """A guesser on one address gets its wrong tokens looked at 4 times, then `rate_limited`
    without its token being looked at; a caller on another address is admitted meanwhile."""
    async def go():
        async with Srv(max_calls=4) as s:
            codes = []
            for i in range(30):
                async with connect(s.url(), local_addr=("127.0.0.2", 0)) as ws:
                    with contextlib.suppress(ConnectionClosed):  # refused before it could send
                        await ws.send(json.dumps({"type": "start", "token": f"guess-{i}"}))
                    msgs, close = await collect_until_close(ws)
                    codes.append((msgs[0]["code"], close))
            # 3 free failures, the 4th is answered and starts a 1 s backoff (doubling after)
            assert codes[:4] == [("unknown_token", 1008)] * 4
            assert set(codes) == {("unknown_token", 1008), ("rate_limited", 1008)}
            looked_at = sum(code == "unknown_token" for code, _ in codes)
            assert looked_at <= 5
            async with connect(s.url()) as ws:
                assert (await _start(ws, "agent-token"))["type"] == "ready"
                await ws.send(json.dumps({"type": "stop"}))
                await collect_until_close(ws)
            assert f'voice_agent_address_refusals_total{{code="rate_limited"}} {30 - looked_at}.0' in \
                s.state.metrics.exposition().decode()
    run(go())


def test_one_address_cannot_take_every_slot():
    async def go():
        async with Srv(max_calls=4, max_calls_per_address=2) as s:
            held = [await connect(s.url(), local_addr=("127.0.0.2", 0)) for _ in range(2)]
            for ws in held:
                assert (await _start(ws))["type"] == "ready"
            async with connect(s.url(), local_addr=("127.0.0.2", 0)) as third:
                msgs, close = await collect_until_close(third)
                assert msgs[0]["code"] == "busy" and close == 1013
            async with connect(s.url()) as other:  # 127.0.0.1: its own allowance
                assert (await _start(other))["type"] == "ready"
                await other.send(json.dumps({"type": "stop"}))
                await collect_until_close(other)
            for ws in held:
                await ws.close()
    run(go())


def test_forwarded_for_is_read_only_from_a_trusted_proxy():
    async def go():
        async with Srv(max_calls=4, max_calls_per_address=1, trusted_proxies=["127.0.0.1"]) as s:
            hdr = {"X-Forwarded-For": "203.0.113.9"}
            a = await connect(s.url(), additional_headers=hdr)
            assert (await _start(a))["type"] == "ready"
            async with connect(s.url(), additional_headers={"X-Forwarded-For": "198.51.100.7"}) as b:
                assert (await _start(b))["type"] == "ready"  # another client behind the same proxy
                await b.send(json.dumps({"type": "stop"}))
                await collect_until_close(b)
            async with connect(s.url(), additional_headers=hdr) as c:
                msgs, _ = await collect_until_close(c)
                assert msgs[0]["code"] == "busy"
            # an untrusted peer's header is ignored: 127.0.0.2 is one client whatever it claims
            d = await connect(s.url(), local_addr=("127.0.0.2", 0), additional_headers=hdr)
            assert (await _start(d))["type"] == "ready"
            for ws in (a, d):
                await ws.close()
    run(go())
