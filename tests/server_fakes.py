"""A fake call for the websocket server tests: it emits the real call events with the real CallSession's
shape, so the server (routing, limits, error codes, event order, Twilio framing) is tested in isolation;
and the helpers that drive a server on loopback."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np

from policy.decision import Action, Decision, Handoff, Reason
from policy.session_state import SessionState
from voice_agent.call.events import (AudioChunk, AudioEnd, AudioStart, ClearEvent, DecisionEvent,
                                     TranscriptEvent, TransferEvent)
from voice_agent.transport.server import ServerState, open_server, server_port
from voice_agent.transport.config import ServerConfig


# ------------------------------------------------------------------------------ fake call
# The fake call emits the real call events, so it cannot drift from what the server reads.

END = object()


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
            if ev is END:
                return
            yield ev

    async def close(self) -> None:
        self.closed = True
        await self.q.put(END)


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
