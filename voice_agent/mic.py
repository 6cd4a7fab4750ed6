"""`run.py mic`: talk to the agent through the local microphone and speaker (sounddevice).

The microphone streams 16 kHz mono into a `CallSession`; replies play through the default
output device. Barge-in is on: talk over the agent and it stops. Ctrl-C ends the call.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import threading
from types import ModuleType

import numpy as np

from kb.loader import kb_dir_error
from policy.cli import fail
from policy.store_api import StoreError
from policy.store_select import add_store_arg, open_store

from .audio import float_to_pcm16, pcm16_to_float
from .call import CallConfig, VoiceRuntime
from .interfaces import CallRuntime

SR = 16000
BLOCK = SR // 50  # 20 ms


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run.py mic", description=__doc__)
    p.add_argument("--kb", required=True, help="knowledge base directory")
    p.add_argument("--role", default="public")
    p.add_argument("--asr-model", default="tiny.en")
    p.add_argument("--policy", default=None)
    p.add_argument("--state-dir", default="var")
    add_store_arg(p)
    p.add_argument("--input-device", default=None, help="sounddevice input device (index or name)")
    p.add_argument("--output-device", default=None, help="sounddevice output device (index or name)")
    p.add_argument("--no-barge-in", action="store_true", help="do not stop replies when you talk over them")
    p.add_argument("--json", action="store_true", help="print each decision as JSON")
    return p


def open_sounddevice(input_device: str | None = None) -> ModuleType:
    """Import sounddevice and check there is a microphone; raises RuntimeError with the fix."""
    try:
        import sounddevice as sd  # optional: needs PortAudio; only `run.py mic` uses it
    except OSError as e:  # the Python package is there but PortAudio is not
        raise RuntimeError(f"PortAudio is missing ({e}): run `apt-get install libportaudio2`") from None
    except ImportError:
        raise RuntimeError("sounddevice is not installed: run `pip install sounddevice`") from None
    try:
        info = sd.query_devices(_device(input_device), "input")
    except Exception as e:  # noqa: BLE001 - PortAudio reports "no default input device" etc.
        raise RuntimeError(f"no microphone found ({e}): plug in a microphone or pass --input-device") from None
    if not info or int(info.get("max_input_channels", 0)) < 1:
        raise RuntimeError("no microphone found: plug in a microphone or pass --input-device")
    return sd


def _device(d: str | None) -> int | str | None:
    """A --input-device/--output-device value: a device index when it is all digits, else a name."""
    if d is None:
        return None
    return int(d) if str(d).isdigit() else d


class _Speaker:
    """Playback buffer fed by reply audio; `clear()` drops what has not played (barge-in)."""

    def __init__(self) -> None:
        self._buf: collections.deque[np.ndarray] = collections.deque()
        self._lock = threading.Lock()

    def add(self, x: np.ndarray) -> None:
        with self._lock:
            self._buf.append(x)

    def clear(self) -> None:
        with self._lock:
            self._buf.clear()

    def callback(self, outdata: np.ndarray, frames: int, _time: object, _status: object) -> None:
        out = np.zeros(frames, dtype=np.float32)
        i = 0
        with self._lock:
            while i < frames and self._buf:
                head = self._buf[0]
                n = min(frames - i, len(head))
                out[i : i + n] = head[:n]
                i += n
                if n == len(head):
                    self._buf.popleft()
                else:
                    self._buf[0] = head[n:]
        outdata[:, 0] = out


async def _run(args: argparse.Namespace, sd: ModuleType, runtime: CallRuntime) -> None:
    loop = asyncio.get_running_loop()
    mic_q: asyncio.Queue[bytes] = asyncio.Queue()
    speaker = _Speaker()
    call = runtime.new_call(role=args.role, config=CallConfig(barge_in=not args.no_barge_in, output_rate=SR))

    def on_mic(indata: np.ndarray, frames: int, _time: object, _status: object) -> None:
        loop.call_soon_threadsafe(mic_q.put_nowait, float_to_pcm16(indata[:, 0].copy()))

    async def show() -> None:
        async for ev in call.events():
            if ev.type == "transcript":
                print(f"you:   {ev.text}" + ("  (not sure I heard that right)" if ev.low_confidence else ""), flush=True)
            elif ev.type == "decision":
                d = ev.decision
                print(json.dumps(d.public_dict()) if args.json else f"agent: [{d.action.value}] {d.message}", flush=True)
            elif ev.type == "audio_chunk":
                speaker.add(pcm16_to_float(ev.data))
            elif ev.type == "clear":
                speaker.clear()
                print("       (interrupted)", flush=True)
            elif ev.type == "transfer":
                print(f"agent: -> transferred to {ev.handoff.team} (handoff {ev.handoff.id})", flush=True)
            elif ev.type == "error":
                print(f"error: {ev.code}: {ev.message}", file=sys.stderr, flush=True)

    shower = asyncio.create_task(show())
    with sd.InputStream(samplerate=SR, channels=1, dtype="float32", blocksize=BLOCK,
                        device=_device(args.input_device), callback=on_mic), \
            sd.OutputStream(samplerate=SR, channels=1, dtype="float32", blocksize=BLOCK,
                            device=_device(args.output_device), callback=speaker.callback):
        print("listening: ask a question (Ctrl-C to stop)", flush=True)
        try:
            while True:
                await call.feed_audio(await mic_q.get())
        finally:
            await call.close()
            shower.cancel()


def cli(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if err := kb_dir_error(args.kb):
        return fail(err)
    try:
        sd = open_sounddevice(args.input_device)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        store = open_store(args.store, args.state_dir)
    except StoreError as e:
        return fail(str(e))
    try:
        runtime = VoiceRuntime.load(args.kb, asr_model=args.asr_model, state_dir=args.state_dir, policy_file=args.policy,
                                    store=store)
    except Exception as e:  # noqa: BLE001
        store.shutdown()
        print(f"error: cannot start the voice path: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_run(args, sd, runtime))
    except KeyboardInterrupt:
        pass
    except Exception as e:  # noqa: BLE001 - e.g. the device vanished mid-call
        print(f"error: audio device failed: {e}", file=sys.stderr)
        return 1
    finally:
        runtime.close()
    return 0
