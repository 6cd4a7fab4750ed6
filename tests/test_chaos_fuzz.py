"""Chaos suite, fuzz half: structure-aware hypothesis fuzzing of both websocket endpoints (a real
server on loopback, the call itself faked), of the KB loader and of the WAV reader. Each test
prints its figures. Inputs are derandomized so CI explores the same ones every run."""
from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import resource
import struct
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed

from tests.server_fakes import FakeRuntime, collect_until_close, connect
from voice_agent.transport.config import ServerConfig
from voice_agent.transport.server import ServerState, open_server, server_port

pytestmark = [pytest.mark.chaos]
BATCHES = settings(max_examples=70, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ = settings(max_examples=220, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --------------------------------------------------------------------------- JSON and frames

scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=40)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)
nasty_text = st.sampled_from(['"\\ud800"', '"\\udfff tail"', "[" * 5000, "{" * 3000, '{"type": []}',
                              '{"type": {}}', "\x00\x01", "null", "1e999999", '"' + "x" * 70_000 + '"'])


def maybe(value: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """The valid-looking value most of the time, any JSON value sometimes."""
    return st.one_of(value, value, json_values)


native_events = st.fixed_dictionaries(
    {"type": maybe(st.sampled_from(["start", "text", "played", "stop", "audio", "START", ""]))},
    optional={"protocol": maybe(st.sampled_from([1, 2])), "sample_rate": maybe(st.sampled_from([16000, 8000, 1, 0])),
              "output_sample_rate": maybe(st.sampled_from([None, 24000, -1])), "token": maybe(st.text(max_size=20)),
              "caller": maybe(st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3)),
              "text": maybe(st.text(max_size=200)), "id": maybe(st.integers() | st.text(max_size=5)),
              "extra": json_values})
native_frames = st.one_of(native_events.map(json.dumps), st.binary(max_size=3000),
                          st.text(max_size=300), nasty_text)

_SID = "MZ" + "0" * 32
twilio_events = st.one_of(
    st.fixed_dictionaries({"event": st.just("connected")}, optional={"protocol": json_values}),
    st.fixed_dictionaries({"event": st.just("start"), "start": maybe(st.fixed_dictionaries(
        {"streamSid": maybe(st.just(_SID)), "callSid": maybe(st.text(max_size=34)),
         "mediaFormat": maybe(st.fixed_dictionaries({"encoding": maybe(st.just("audio/x-mulaw")),
                                                     "sampleRate": maybe(st.sampled_from([8000, 16000])),
                                                     "channels": maybe(st.sampled_from([1, 2]))})),
         "customParameters": maybe(st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=3))}))}),
    st.fixed_dictionaries({"event": st.just("media"), "media": maybe(st.fixed_dictionaries({
        "payload": maybe(st.binary(max_size=800).map(lambda b: base64.b64encode(b).decode()) | st.text(max_size=50))}))}),
    st.fixed_dictionaries({"event": st.just("mark"), "mark": maybe(st.fixed_dictionaries({"name": maybe(st.text(max_size=30))}))}),
    st.fixed_dictionaries({"event": st.just("dtmf"), "dtmf": maybe(st.fixed_dictionaries({"digit": maybe(st.text(max_size=12))}))}),
    st.fixed_dictionaries({"event": maybe(st.sampled_from(["stop", "bogus"]))}, optional={"stop": json_values}),
)
twilio_frames = st.one_of(twilio_events.map(json.dumps), st.binary(max_size=500), st.text(max_size=200), nasty_text)


# --------------------------------------------------------------------------- server harness

class LoopServer:
    """A real server on its own event-loop thread, so hypothesis (synchronous) can drive it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        cfg = ServerConfig(tokens={"agent-token": "agent"}, max_calls=64, start_timeout_s=0.5, idle_timeout_s=2,
                           max_protocol_errors=8, token_failures_free=10**6)
        self.state = ServerState(FakeRuntime(turn_delay=0.0), cfg, make_call_config=dict)
        self.server = self.run(open_server(self.state, "127.0.0.1", 0))
        self.port = server_port(self.server)

    def run(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.server.close()
        self.run(self.server.wait_closed())
        self.loop.call_soon_threadsafe(self.loop.stop)


class Tally:
    def __init__(self) -> None:
        self.inputs = self.connections = self.hung = self.internal = 0
        self.codes: dict[str, int] = {}


async def one_connection(url: str, frames: list[object], opening: list[str], closing: str, t: Tally) -> None:
    async with connect(url, max_size=2**22, open_timeout=5) as ws:
        for f in [*opening, *frames]:
            with contextlib.suppress(ConnectionClosed):
                await ws.send(f)  # type: ignore[arg-type]
            t.inputs += 1
        with contextlib.suppress(ConnectionClosed):
            await ws.send(closing)
        msgs, code = await collect_until_close(ws, timeout=6)
    t.connections += 1
    if code is None:
        t.hung += 1  # not closed 6 s after the client hung up
    for m in msgs:
        if isinstance(m, dict) and m.get("type") == "error":
            t.codes[m["code"]] = t.codes.get(m["code"], 0) + 1
    t.internal += code == 1011 or any(isinstance(m, dict) and m.get("code") == "internal" for m in msgs)


class Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def srv():
    errors = Errors()
    logging.getLogger().addHandler(errors)
    s = LoopServer()
    s.errors = errors  # type: ignore[attr-defined]
    yield s
    s.close()
    logging.getLogger().removeHandler(errors)


def _report(capsys, name: str, t: Tally, errors: Errors, seconds: float) -> None:
    with capsys.disabled():
        print(f"\nchaos {name}: {t.inputs} inputs over {t.connections} connections in {seconds:.1f} s; "
              f"unhandled exceptions {len(errors.records)}, internal closes {t.internal}, hung {t.hung}; "
              f"error codes {dict(sorted(t.codes.items()))}")


def _fuzz(srv, capsys, name: str, path: str, frames, opening, closing) -> None:
    t, t0 = Tally(), time.monotonic()
    srv.errors.records.clear()

    url = f"ws://127.0.0.1:{srv.port}{path}"

    @BATCHES
    @given(st.lists(st.tuples(st.lists(frames, min_size=1, max_size=5), st.booleans()), min_size=1, max_size=12))
    def connections(batch):  # clients at once, as a server meets them
        srv.run(_all([one_connection(url, fs, opening if started else [], closing, t) for fs, started in batch]))

    connections()
    assert srv.run(_until_idle(srv.state)), "call slots still held after every client left"
    _report(capsys, name, t, srv.errors, time.monotonic() - t0)
    assert t.inputs >= 500 and t.hung == 0 and t.internal == 0
    assert not srv.errors.records, [r.getMessage() for r in srv.errors.records][:3]


async def _all(coros: list) -> None:
    await asyncio.gather(*coros)


async def _until_idle(state: ServerState, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while state.active and time.monotonic() < end:
        await asyncio.sleep(0.05)
    return state.active == 0


def test_native_endpoint_fuzz(srv, capsys):
    _fuzz(srv, capsys, "native websocket fuzz", "/v1/call", native_frames,
          [json.dumps({"type": "start"})], json.dumps({"type": "stop"}))


def test_twilio_endpoint_fuzz(srv, capsys):
    start = {"event": "start", "streamSid": _SID, "start": {"streamSid": _SID, "callSid": "CA1", "customParameters": {},
                                                            "mediaFormat": {"encoding": "audio/x-mulaw",
                                                                            "sampleRate": 8000, "channels": 1}}}
    _fuzz(srv, capsys, "twilio websocket fuzz", "/twilio", twilio_frames,
          [json.dumps({"event": "connected"}), json.dumps(start)], json.dumps({"event": "stop", "streamSid": _SID}))


# --------------------------------------------------------------------------- loader and reader

def _bounded(fn, limit_s: float = 2.0) -> float:
    t = time.monotonic()
    fn()
    took = time.monotonic() - t
    assert took <= limit_s, f"one input took {took:.2f} s"
    return took


front_values = st.one_of(json_values, st.sampled_from(["&a [1,2]", "*a", "!!python/object:os.system ls", "2026-13-45",
                                                       "[" * 200, "{x: " * 50, "'unterminated"]))
md_bodies = st.lists(st.one_of(st.text(max_size=200), st.sampled_from(["# H", "## H", "```", "| a | b |", "|---|",
                                                                         "- item", "x" * 9000])), max_size=12)


def test_kb_loader_fuzz(tmp_path, capsys):
    from kb.loader import load_kb

    worst, n = [0.0], [0]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    @FUZZ
    @given(st.dictionaries(st.sampled_from(["id", "title", "status", "acl", "applies_to", "effective_from",
                                            "supersedes", "risk", "handoff_team", "acls", "x"]), front_values),
           md_bodies, st.binary(max_size=64))
    def one(front, body, raw):
        d = tmp_path / f"kb{n[0]}"
        d.mkdir()
        lines = [f"{k}: {json.dumps(v) if not isinstance(v, str) else v}" for k, v in front.items()]
        (d / "a.md").write_text("---\n" + "\n".join(lines) + "\n---\n" + "\n".join(body), encoding="utf-8",
                                errors="surrogatepass")
        (d / "b.md").write_bytes(b"---\nid: b\ntitle: B\n---\n" + raw)
        worst[0] = max(worst[0], _bounded(lambda: load_kb(d)))
        n[0] += 1

    one()
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    with capsys.disabled():
        print(f"\nchaos kb loader fuzz: {n[0]} KBs, 0 crashes, slowest {worst[0] * 1000:.0f} ms, "
              f"peak RSS grew {grown:.0f} MB")
    assert grown <= 500


wav_fields = st.tuples(st.sampled_from([1, 3, 6, 7, 0xFFFE, 2, 0]), st.integers(0, 65535),
                       st.sampled_from([1, 4000, 8000, 16000, 192000, 192001, 2**32 - 1, 0]),
                       st.sampled_from([0, 8, 16, 24, 32, 64, 12]), st.integers(0, 2**32 - 1))


def test_wav_reader_fuzz(capsys):
    from voice_agent.audio import AudioError, read_wav_bytes

    worst, n, refused = [0.0], [0], [0]

    @FUZZ
    @given(wav_fields, st.binary(max_size=4000), st.booleans())
    def one(fields, data, lie_about_size):
        tag, channels, rate, bits, claimed = fields
        block = max(1, channels * bits // 8)
        fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block % 2**32, block % 2**16, bits)
        size = claimed if lie_about_size else len(data)
        wav = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<I", 16) + fmt \
            + b"data" + struct.pack("<I", size) + data

        def read():
            try:
                read_wav_bytes(wav)
            except AudioError:
                refused[0] += 1

        worst[0] = max(worst[0], _bounded(read))
        n[0] += 1

    one()
    with capsys.disabled():
        print(f"\nchaos wav reader fuzz: {n[0]} files, {refused[0]} refused with AudioError, 0 crashes, "
              f"slowest {worst[0] * 1000:.0f} ms")


def test_any_audio_file_reader_refuses_garbage(tmp_path, capsys):
    """Garbage under every audio file name goes through PyAV and comes back as an AudioError."""
    from voice_agent.audio import AudioError
    from voice_agent.audio_files import read_audio

    refused = 0
    blobs = [b"", b"\x00" * 17, bytes(range(256)) * 12, b"fLaC" + bytes(100), b"ID3\x04" + bytes(500), b"OggS" * 80]
    for i, (ext, blob) in enumerate((e, b) for e in ["flac", "mp3", "ogg", "wav", "m4a"] for b in blobs):
        p = tmp_path / f"x{i}.{ext}"
        p.write_bytes(blob)
        try:
            _bounded(lambda: read_audio(p))
        except AudioError:
            refused += 1
    with capsys.disabled():
        print(f"\nchaos audio files: {refused} of 30 garbage files refused with AudioError, 0 crashes")
    assert refused == 30
