"""Text to speech, MIT side: speech text formatting and a client for the piper worker process.

piper-tts is GPL-3.0, so it never runs in this process: `TtsClient` starts
`python -m voice_agent.stages.tts_worker` and speaks the frame protocol documented in that module.
This module imports no piper code.

- The text rules (`speakable`, `split_sentences`) live in `speech_text.py`.
- `TtsClient.synthesize(text)` yields one `TtsChunk` per rendered sentence, lazily. A dead or
  stuck worker is restarted once and the current request raises `TtsUnavailable`, so the
  caller can degrade (e.g. to a transfer); the next request uses the restarted worker.
- `TtsPool(size)` spreads concurrent requests over several workers.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import struct
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Iterator, Literal, TypedDict, Unpack

import numpy as np
from pydantic import BaseModel, ConfigDict

from kb.jsontypes import JsonObject

from ..audio import float_to_pcm16, mulaw_encode, resample
from .speech_text import quick_start, speakable, split_sentences

LOG = logging.getLogger(__name__)
_ROOT = Path(__file__).resolve().parents[2]  # the repository root, for the worker's PYTHONPATH
# The worker runs at a lower CPU priority than the agent: when calls contend for the cores, a
# caller's transcription (everything else waits on it) goes first, and rendering takes the rest.
TTS_NICE = 10


class TtsUnavailable(RuntimeError):
    """The TTS worker could not render this request (dead, stuck or failing)."""


class SynthesisOptions(TypedDict, total=False):
    """The keyword options of `TtsClient.synthesize`, for the methods that pass them on."""

    normalize: bool
    length_scale: float | None
    noise_scale: float | None
    noise_w_scale: float | None


class ClientOptions(TypedDict, total=False):
    """`TtsClient`'s options after the voice, for `TtsPool`, which builds its clients."""

    start_timeout_s: float
    frame_timeout_s: float
    python: str | None
    nice: bool
    threads: int


class TtsChunk(BaseModel):
    """Rendered audio of one sentence (or of one piper chunk of a long sentence)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pcm: np.ndarray  # int16 mono
    sample_rate: int
    sentence_index: int
    text: str

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / float(self.sample_rate)


# --------------------------------------------------------------------------------------------
# Worker client
# --------------------------------------------------------------------------------------------

_EOF = object()


class _Worker:
    """One running worker process and the thread that reads its frames into a queue."""

    def __init__(self, voice: str, python: str, nice: int = 0, threads: int = 0) -> None:
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
        # The worker lowers its own priority: a preexec_fn would make Popen fork() the whole process,
        # and OpenBLAS's fork handler can deadlock while other threads run (an audio eval hung so).
        self.proc = subprocess.Popen(
            [python, "-m", "voice_agent.stages.tts_worker", "--voice", voice, "--threads", str(threads),
             "--nice", str(nice)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env, cwd=str(_ROOT),
        )
        self.frames: queue.Queue = queue.Queue()
        self.ready: dict | None = None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True,
                                        name=f"tts-reader-{self.proc.pid}")
        self._reader.start()

    def _read(self, out: IO[bytes]) -> None:
        try:
            while True:
                head = out.read(4)
                if len(head) < 4:
                    break
                (n,) = struct.unpack(">I", head)
                header = json.loads(out.read(n))
                size = int(header.get("bytes", 0))
                payload = out.read(size) if size else b""
                if len(payload) < size:
                    break
                self.frames.put((header, payload))
        except (OSError, ValueError) as exc:
            LOG.warning("tts worker %s: bad frame stream: %s", self.proc.pid, exc)
        self.frames.put((_EOF, b""))

    def send(self, obj: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj) + "\n").encode("utf-8"))
        self.proc.stdin.flush()

    def next_frame(self, timeout: float) -> tuple[dict, bytes]:
        try:
            header, payload = self.frames.get(timeout=timeout)
        except queue.Empty:
            raise TtsUnavailable(f"TTS worker {self.proc.pid} sent nothing for {timeout:.0f} s") from None
        if header is _EOF:
            self.frames.put((_EOF, b""))  # stay at EOF for later readers
            raise TtsUnavailable(f"TTS worker {self.proc.pid} exited (code {self.proc.poll()})")
        return header, payload

    def wait_ready(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while self.ready is None:
            header, _ = self.next_frame(max(0.01, deadline - time.monotonic()))
            if header.get("kind") == "ready":
                self.ready = header
        return self.ready

    def stop(self, grace_s: float = 2.0) -> None:
        try:
            self.send({"op": "quit"})
            self.proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


class TtsClient:
    """Talks to one piper worker process. Thread-safe: one request at a time per worker.

    Finish or close a `synthesize()` iterator before starting the next request on the same
    thread: the worker's lock is held while the iterator is open.
    """

    def __init__(self, voice: str = "joe", start_timeout_s: float = 20.0,
                 frame_timeout_s: float = 15.0, python: str | None = None, nice: bool = True,
                 threads: int = 0) -> None:
        self.voice = voice
        self.nice = nice
        self.threads = threads  # onnxruntime threads in the worker (0: one per core)
        self.start_timeout_s = start_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.python = python or sys.executable
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._ids = itertools.count(1)
        self.restarts = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "TtsClient":
        """Start the worker (if not running) and wait until its voice is loaded."""
        with self._lock:
            self._ensure_ready()
        return self

    def _spawn(self) -> None:
        try:
            self._worker = _Worker(self.voice, self.python, TTS_NICE if self.nice else 0, self.threads)
        except OSError as exc:
            self._worker = None
            raise TtsUnavailable(f"cannot start TTS worker ({self.python}): {exc}") from exc

    def _ensure_ready(self) -> _Worker:
        if self._worker is not None and self._worker.proc.poll() is not None:
            LOG.warning("TTS worker %s had exited (code %s); starting a new one",
                        self._worker.proc.pid, self._worker.proc.returncode)
            self._discard()
            self.restarts += 1
        if self._worker is None:
            self._spawn()
        worker = self._worker
        assert worker is not None
        try:
            worker.wait_ready(self.start_timeout_s)
        except TtsUnavailable as exc:
            self._discard()
            raise TtsUnavailable(f"TTS worker did not start: {exc}") from None
        return worker

    def _discard(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None and worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(timeout=5)

    def _fail(self, reason: str) -> TtsUnavailable:
        """Kill the broken worker, launch its replacement now (it loads while the caller
        degrades), and return the error for the current request."""
        LOG.warning("TTS worker failed (%s); restarting it", reason)
        self._discard()
        self.restarts += 1
        try:
            self._spawn()
        except TtsUnavailable as exc:
            return TtsUnavailable(f"{reason}; restart failed: {exc}")
        return TtsUnavailable(reason)

    def close(self) -> None:
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    def __enter__(self) -> "TtsClient":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None when no worker runs)."""
        return self._worker.proc.pid if self._worker else None

    @property
    def sample_rate(self) -> int:
        with self._lock:
            return int(self._ensure_ready().ready["sample_rate"])  # type: ignore[index]

    # -- requests ----------------------------------------------------------------------------
    def ping(self, timeout_s: float = 5.0) -> float:
        """Round trip to the worker in seconds; raises TtsUnavailable if it does not answer."""
        with self._lock:
            worker = self._ensure_ready()
            rid = f"ping-{next(self._ids)}"
            started = time.perf_counter()
            try:
                worker.send({"op": "ping", "id": rid})
                deadline = started + timeout_s
                while True:
                    header, _ = worker.next_frame(max(0.01, deadline - time.perf_counter()))
                    if header.get("kind") == "pong" and header.get("id") == rid:
                        return time.perf_counter() - started
            except (OSError, TtsUnavailable) as exc:
                raise self._fail(f"ping failed: {exc}") from None

    def synthesize(self, text: str, *, normalize: bool = True, length_scale: float | None = None,
                   noise_scale: float | None = None,
                   noise_w_scale: float | None = None) -> Iterator[TtsChunk]:
        """Yield the speech of `text` sentence by sentence, each as soon as it is rendered.

        `normalize` runs `speakable()` first. `length_scale` > 1 speaks slower; noise scales
        of 0 make the audio reproducible (piper samples noise otherwise). Raises
        TtsUnavailable if the worker dies, stalls or reports an error (the worker is
        restarted for the next request).
        """
        spoken = speakable(text) if normalize else text
        sentences = quick_start(split_sentences(spoken))
        if not sentences:
            return
        with self._lock:
            worker = self._ensure_ready()
            rid = next(self._ids)
            request: JsonObject = {"id": rid, "sentences": sentences}
            for key, value in (("length_scale", length_scale), ("noise_scale", noise_scale),
                               ("noise_w_scale", noise_w_scale)):
                if value is not None:
                    request[key] = value
            done = False
            try:
                worker.send(request)
                while True:
                    header, payload = worker.next_frame(self.frame_timeout_s)
                    if header.get("id") != rid:
                        continue  # leftovers of an abandoned earlier request
                    kind = header.get("kind")
                    if kind == "audio":
                        yield TtsChunk(pcm=np.frombuffer(payload, dtype="<i2").copy(),
                                       sample_rate=int(header["sample_rate"]),
                                       sentence_index=int(header["sentence"]),
                                       text=str(header.get("text", "")))
                    elif kind == "end":
                        done = True
                        return
                    elif kind == "error":
                        done = True
                        raise TtsUnavailable(f"TTS worker error: {header.get('message')}")
            except (OSError, TtsUnavailable) as exc:
                if done:
                    raise
                raise self._fail(str(exc) if isinstance(exc, TtsUnavailable)
                                 else f"TTS worker pipe broken: {exc}") from None
            finally:
                if not done and self._worker is worker and worker.proc.poll() is None:
                    # The caller stopped listening (barge-in): stop rendering the rest.
                    try:
                        worker.send({"op": "cancel", "id": rid})
                    except OSError:
                        pass

    def synthesize_all(self, text: str, **kw: Unpack[SynthesisOptions]) -> tuple[np.ndarray, int]:
        """The whole utterance as one int16 array plus its sample rate."""
        chunks = list(self.synthesize(text, **kw))
        if not chunks:
            return np.zeros(0, dtype=np.int16), self.sample_rate
        return np.concatenate([c.pcm for c in chunks]), chunks[0].sample_rate

    def synthesize_to(self, text: str, sample_rate: int = 16000,
                      encoding: Literal["pcm16", "mulaw"] = "pcm16",
                      **kw: Unpack[SynthesisOptions]) -> Iterator[bytes]:
        """Like synthesize(), but each sentence resampled for the sink: PCM16 little-endian
        bytes or G.711 μ-law bytes at `sample_rate` (e.g. 8000 for a phone line)."""
        if encoding not in ("pcm16", "mulaw"):
            raise ValueError(f"unknown encoding {encoding!r}; use 'pcm16' or 'mulaw'")
        for chunk in self.synthesize(text, **kw):
            x = chunk.pcm.astype(np.float32) / 32768.0
            if chunk.sample_rate != sample_rate:
                x = resample(x, chunk.sample_rate, sample_rate)
            yield float_to_pcm16(x) if encoding == "pcm16" else mulaw_encode(x)


class TtsPool:
    """Several workers for concurrent calls; each request takes whichever worker is free."""

    def __init__(self, size: int = 2, voice: str = "joe", **client_kw: Unpack[ClientOptions]) -> None:
        if size < 1:
            raise ValueError("TtsPool size must be at least 1")
        # one onnxruntime thread per worker: 4 first sentences on 2 cores in 116-400 ms, not 380-570
        client_kw.setdefault("threads", 1 if size > 1 else 0)
        self.clients = [TtsClient(voice, **client_kw) for _ in range(size)]
        self._idle: queue.Queue[TtsClient] = queue.Queue()
        for c in self.clients:
            self._idle.put(c)

    def start(self) -> "TtsPool":
        with self._lock_all():
            for c in self.clients:  # spawn all first so they load in parallel
                if c._worker is None:
                    c._spawn()
            for c in self.clients:
                c._ensure_ready()
        return self

    def _lock_all(self) -> ExitStack[bool | None]:
        stack = ExitStack()
        for c in self.clients:
            stack.enter_context(c._lock)
        return stack

    def synthesize(self, text: str, *, wait_s: float = 30.0, **kw: Unpack[SynthesisOptions]) -> Iterator[TtsChunk]:
        try:
            client = self._idle.get(timeout=wait_s)
        except queue.Empty:
            raise TtsUnavailable(f"all {len(self.clients)} TTS workers busy for {wait_s:.0f} s") from None
        try:
            yield from client.synthesize(text, **kw)
        finally:
            self._idle.put(client)

    @property
    def restarts(self) -> int:
        return sum(c.restarts for c in self.clients)

    def close(self) -> None:
        for c in self.clients:
            c.close()

    def __enter__(self) -> "TtsPool":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
