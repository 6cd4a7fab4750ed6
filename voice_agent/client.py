"""`run.py client`: stream a WAV file to a running server, the way a phone line would.

Native (`/v1/call`): `start`, then 20 ms PCM16 binary frames, then `stop`. Twilio (`--twilio`,
`/twilio`): `connected`, `start` (streamSid/callSid/mediaFormat), 20 ms base64 μ-law 8 kHz
`media` frames, `stop`; marks the server sends are echoed back, as Twilio does once the audio
before them has played. Prints every server event as one JSON line (reply audio frames are
summarized) and can save the reply audio. `stream_call()` is the same thing as a library call,
used by `bench load` and the tests. `--resume-url` resumes a native call on another server when
its connection drops (client_resume.py); the call itself is client_stream.py.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from websockets.asyncio.client import connect

from kb.jsontypes import JsonObject
from voice_agent.audio import AudioError, resample, write_wav
from voice_agent.audio_files import read_audio

from .client_resume import resuming_call
from .client_stream import FRAME_MS, CallResult, CallStream, speech_ends

__all__ = ["CallResult", "stream_call", "speech_ends", "cli"]

async def stream_call(
    url: str,
    audio: np.ndarray | None = None,
    audio_rate: int = 16000,
    *,
    twilio: bool = False,
    token: str | None = None,
    caller: dict[str, str] | None = None,
    texts: list[str] | None = None,
    realtime: bool = True,
    sample_rate: int = 16000,
    tail_silence_s: float = 1.0,
    on_event: Callable[[JsonObject], None] | None = None,
    reply_audio: bytearray | None = None,
    timeout_s: float = 120.0,
    resume_urls: list[str] | None = None,
) -> CallResult:
    """Run one call against `url`; returns when the server closes the connection. With
    `resume_urls` (native only), a connection that drops mid-call is resumed on the next of
    `url, *resume_urls` (client_resume.py), and typed turns go one decision at a time."""
    wire_rate = 8000 if twilio else sample_rate
    x = np.zeros(0, dtype=np.float32) if audio is None else resample(np.asarray(audio, np.float32), audio_rate, wire_rate)
    ends = set(speech_ends(x, wire_rate)) if len(x) else set()
    if len(x) and tail_silence_s > 0:  # the server's endpointer needs trailing quiet to end the turn
        x = np.concatenate([x, np.zeros(int(tail_silence_s * wire_rate), np.float32)])
    call = CallStream(CallResult(reply_rate=8000 if twilio else 0), x, ends, wire_rate * FRAME_MS // 1000,
                      twilio=twilio, token=token, caller=caller, texts=texts, realtime=realtime,
                      sample_rate=sample_rate, on_event=on_event, reply_audio=reply_audio)
    res = call.res
    if resume_urls is not None and not twilio:
        await asyncio.wait_for(resuming_call(call, [url, *resume_urls]), timeout_s)
        res.busy = res.close_code == 1013 and not res.decisions
        return res
    res.urls.append(url)
    async with connect(url, max_size=2**22, compression=None, open_timeout=10, close_timeout=5) as ws:
        try:
            await asyncio.wait_for(call.conversation(ws), timeout_s)
        finally:
            res.close_code = ws.close_code
            res.close_reason = ws.close_reason or ""
    if res.close_code == 1013 or res.close_reason == "busy":
        res.busy = True
    return res


# ----------------------------------------------------------------------------------- CLI


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run.py client", description="Stream a WAV file to a running voice agent server.")
    ap.add_argument("wav", nargs="?", help="caller audio (any WAV; resampled as needed)")
    ap.add_argument("--url", default="ws://127.0.0.1:8765/v1/call")
    ap.add_argument("--twilio", action="store_true", help="speak Twilio Media Streams framing (use the /twilio URL)")
    ap.add_argument("--token", help="credential mapping to a caller role on the server")
    ap.add_argument("--caller", nargs="+", action="extend", default=[], metavar="K=V", help="caller facets")
    ap.add_argument("--text", action="append", default=[], help="send a typed turn (native only); repeatable")
    ap.add_argument("--out", help="write the reply audio to this WAV")
    ap.add_argument("--rate", type=int, default=16000, help="native: sample rate of the frames sent (default 16000)")
    pace = ap.add_mutually_exclusive_group()
    pace.add_argument("--realtime", dest="realtime", action="store_true", default=True, help="20 ms frames in real time (default)")
    pace.add_argument("--fast", dest="realtime", action="store_false", help="send as fast as possible")
    ap.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    ap.add_argument("--resume-url", action="append", default=None, metavar="URL",
                    help="native: when the connection drops mid-call, resume the call on this server (repeatable; "
                         "tried in order after --url, which may be listed again)")
    args = ap.parse_args(argv)
    # `--caller a=b call.wav`: the WAV may have been swallowed by --caller's nargs.
    facets = []
    for item in args.caller:
        if "=" not in item and args.wav is None:
            args.wav = item
        else:
            facets.append(item)
    args.caller = facets
    return args


def _report(res: CallResult, reply: bytearray, out: str | None) -> int:
    """Save the reply audio if asked, print the call summary; the exit code says whether the
    call ended normally."""
    if out and reply:
        pcm = np.frombuffer(bytes(reply[: len(reply) - len(reply) % 2]), dtype="<i2")
        try:
            write_wav(out, pcm, res.reply_rate or 16000)
        except AudioError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(json.dumps({"type": "reply_saved", "path": str(Path(out)), "seconds": round(len(pcm) / (res.reply_rate or 16000), 2)}))
    lat = res.latencies_ms
    print(json.dumps({"type": "call_summary", "close_code": res.close_code, "decisions": len(res.decisions),
                      "errors": [e.get("code") for e in res.errors], "latency_ms": lat, "call_id": res.call_id,
                      "resumes": res.resumes}), flush=True)
    if res.busy:
        print("error: server busy (at its concurrent-call limit); try again later", file=sys.stderr)
        return 1
    if res.close_code not in (1000, 1001, None):
        print(f"error: server closed the call with {res.close_code} {res.close_reason}".rstrip(), file=sys.stderr)
        return 1
    return 0


def cli(argv: list[str]) -> int:
    args = _parse(argv)
    caller: dict[str, str] = {}
    for item in args.caller:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            print(f"error: --caller {item!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        caller[k.strip()] = v.strip()
    if not args.wav and not args.text:
        print("error: give a WAV file to stream (or --text for a typed turn)", file=sys.stderr)
        return 2
    if args.url.split("?", 1)[0].rstrip("/").endswith("/twilio"):
        args.twilio = True  # the /twilio endpoint only speaks Twilio's framing
    if args.twilio and args.text:
        print("error: --text needs the native protocol; Twilio streams carry audio only", file=sys.stderr)
        return 2
    if args.twilio and args.resume_url:
        print("error: --resume-url needs the native protocol; a Twilio stream cannot be resumed", file=sys.stderr)
        return 2
    if bad := next((u for u in args.resume_url or [] if not u.startswith(("ws://", "wss://"))), None):
        print(f"error: --resume-url {bad}: expected ws://HOST:PORT/v1/call", file=sys.stderr)
        return 2
    if not args.url.startswith(("ws://", "wss://")):
        print(f"error: --url {args.url}: expected ws://HOST:PORT/v1/call or .../twilio", file=sys.stderr)
        return 2
    audio, rate = None, 16000
    if args.wav:
        try:
            audio, rate = read_audio(args.wav)
        except AudioError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    reply = bytearray()

    def show(ev: JsonObject) -> None:
        print(json.dumps(ev, ensure_ascii=False), flush=True)

    try:
        res = asyncio.run(stream_call(
            args.url, audio, rate, twilio=args.twilio, token=args.token, caller=caller, texts=args.text,
            realtime=args.realtime, sample_rate=args.rate, on_event=show, reply_audio=reply, timeout_s=args.timeout,
            resume_urls=args.resume_url,
        ))
    except (OSError, asyncio.TimeoutError) as e:
        print(f"error: cannot complete the call at {args.url}: {e or type(e).__name__}", file=sys.stderr)
        return 1
    except Exception as e:  # handshake refused (404, 426...), bad URL
        print(f"error: {args.url}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return _report(res, reply, args.out)
