"""Resuming a native call on another server (voice_agent/transport/resume.py), in-process on
loopback: two servers over one real store (the embedded files, as two processes would open them),
the fake call of tests/server_fakes.py standing in for the voice pipeline. The real pipeline,
real processes and PostgreSQL are in test_resume_kill.py."""
from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from policy.store_embedded import EmbeddedStore
from tests.server_fakes import Srv, collect_until_close, connect, recv_json, run

pytestmark = [pytest.mark.server]


def _start(**kw) -> str:
    return json.dumps({"type": "start", "protocol": 1, "sample_rate": 16000, **kw})


async def _turn(ws, text: str) -> dict:
    await ws.send(json.dumps({"type": "text", "text": text}))
    while (ev := await recv_json(ws))["type"] != "decision":
        pass
    return ev["decision"]


async def _open(url: str, **start) -> tuple:
    ws = await connect(url)
    await ws.send(_start(**start))
    return ws, await recv_json(ws)


def test_a_call_goes_on_on_another_server_with_its_role_and_conversation(tmp_path):
    async def go():
        async with Srv(checkpoints=EmbeddedStore(tmp_path, fsync=False)) as a, \
                Srv(checkpoints=EmbeddedStore(tmp_path, fsync=False)) as b:
            ws, ready = await _open(a.url(), token="agent-token", caller={"customer_type": "business"})
            assert ready["role"] == "agent" and not ready["resumed"] and ready["turns"] == 0
            call_id, token = ready["call_id"], ready["resume_token"]
            assert len(token) == 32 and call_id  # secrets.token_urlsafe(24)
            assert (await _turn(ws, "hello"))["message"] == "You said hello."
            await ws.close()  # the connection is lost; the call is not over

            # a new start's token would be another role: the checkpoint's role wins
            ws, ready = await _open(b.url(), token="no-such-token", resume={"call_id": call_id, "token": token})
            assert ready["type"] == "ready" and ready["resumed"] and ready["turns"] == 1
            assert (ready["call_id"], ready["resume_token"], ready["role"]) == (call_id, token, "agent")
            assert (await _turn(ws, "and then")) ["message"] == "You said and then."
            await ws.send(json.dumps({"type": "stop"}))
            await collect_until_close(ws)
            resumed = b.runtime.calls[-1]
            assert resumed.state.session_id == call_id and resumed.state.facets == {"customer_type": "business"}
            assert resumed.state.transcript[0] == "caller: hello" and resumed.state.turns == 2

        saved = EmbeddedStore(tmp_path).get_checkpoint(call_id)
        assert saved is not None and saved["epoch"] == 1 and saved["session"]["turns"] == 2
        assert saved["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
        assert token not in (tmp_path / "checkpoints" / f"{call_id}.json").read_text()  # only its hash
    run(go())


@pytest.mark.parametrize("case", ["wrong_token", "unknown_call", "transferred", "no_store"])
def test_a_resume_that_cannot_be_honoured_is_bad_resume_and_closes_1008(tmp_path, case):
    async def go():
        store = None if case == "no_store" else EmbeddedStore(tmp_path, fsync=False)
        async with Srv(checkpoints=EmbeddedStore(tmp_path, fsync=False)) as a, Srv(checkpoints=store) as b:
            ws, ready = await _open(a.url())
            if case == "transferred":
                assert (await _turn(ws, "a human please"))["action"] == "transfer"
            await ws.close()
            resume = {"call_id": ready["call_id"], "token": ready["resume_token"]}
            if case == "wrong_token":
                resume["token"] = resume["token"][:-1] + ("A" if resume["token"][-1] != "A" else "B")
            elif case == "unknown_call":
                resume["call_id"] = "0123456789ab"
            async with connect(b.url()) as again:
                await again.send(_start(resume=resume))
                events, close = await collect_until_close(again)
            assert [e["code"] for e in events if e.get("type") == "error"] == ["bad_resume"] and close == 1008
            assert not any(e.get("type") == "ready" for e in events) and not b.runtime.calls
    run(go())


def test_of_two_servers_resuming_one_call_at_once_one_wins_and_the_old_owner_is_fenced(tmp_path):
    async def go():
        servers = [Srv(checkpoints=EmbeddedStore(tmp_path, fsync=False)) for _ in range(3)]
        async with servers[0] as a, servers[1] as b, servers[2] as c:
            old, ready = await _open(a.url())
            await _turn(old, "first")  # the old connection stays open: a half-dead link
            resume = {"call_id": ready["call_id"], "token": ready["resume_token"]}
            socks = [await connect(s.url()) for s in (b, c)]
            await asyncio.gather(*(ws.send(_start(resume=resume)) for ws in socks))
            firsts = [await recv_json(ws) for ws in socks]
            assert sorted(e["type"] for e in firsts) == ["error", "ready"], firsts
            winner = socks[[e["type"] for e in firsts].index("ready")]
            assert next(e for e in firsts if e["type"] == "error")["code"] == "bad_resume"
            await _turn(winner, "second")
            await _turn(old, "late")  # the old server still answers its socket, but cannot write the call
            saved = EmbeddedStore(tmp_path).get_checkpoint(ready["call_id"])
            assert saved["epoch"] == 1 and saved["session"]["transcript"][-2:] == ["caller: second",
                                                                                  "agent: You said second."]
            for ws in (old, *socks):
                await ws.close()
    run(go())


def test_the_client_resumes_on_the_next_server_when_its_server_goes_away(tmp_path):
    from voice_agent.client import stream_call

    async def go():
        async with Srv(checkpoints=EmbeddedStore(tmp_path, fsync=False)) as a, \
                Srv(checkpoints=EmbeddedStore(tmp_path, fsync=False)) as b:
            def on_event(ev: dict) -> None:
                if ev.get("type") == "decision" and not a.state.shutting_down.is_set():
                    a.state.shutting_down.set()  # A drains its call and closes it 1001, going away

            res = await stream_call(a.url(), texts=["one", "two", "three"], resume_urls=[b.url()],
                                    on_event=on_event, timeout_s=20)
            assert [d["message"] for d in res.decisions] == ["You said one.", "You said two.", "You said three."]
            assert res.resumes == 1 and res.urls == [a.url(), b.url()] and res.close_code == 1000
            assert [e["type"] for e in res.events].count("reconnect") == 1
            [on_b] = b.runtime.calls  # the conversation went on there, from A's checkpoint
            assert [t for t in on_b.state.transcript if t.startswith("caller")] == \
                ["caller: one", "caller: two", "caller: three"]  # each turn decided once
    run(go())
