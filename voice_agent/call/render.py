"""One reply's TTS render in a worker thread, buffered for the event loop, and the small task
helpers speculation needs to drop renders nobody will speak."""
from __future__ import annotations

import asyncio
import threading
from typing import Iterator

from policy.decision import Decision
from policy.session import AsrSignal

from ..interfaces import Clock, MonotonicClock, Synthesizer
from ..stages.tts import TtsChunk

DONE = object()  # end of a render's queue (and of a call's event stream)


def finished_ok(task: asyncio.Task) -> bool:
    """Finished with a result (not cancelled, no exception)."""
    return task.done() and not task.cancelled() and task.exception() is None


def cancel_render(task: asyncio.Task) -> None:
    """Done-callback of a dropped speculative task: a render it started anyway is cancelled."""
    if not task.cancelled() and task.exception() is None and task.result() is not None:
        task.result().cancel()


class Render:
    """One TTS render in a worker thread, its chunks buffered in an asyncio queue.

    Rendering starts at once; whoever speaks it drains `q` (chunks, an exception, then `DONE`).
    `cancel()` makes the thread stop after the chunk it is waiting for and close the TTS
    iterator, which releases the TTS client's lock and cancels the rest in the worker."""

    def __init__(self, tts: Synthesizer, text: str, loop: asyncio.AbstractEventLoop, lead_s: float | None = None,
                 clock: Clock | None = None):
        self.text = text
        self.lead_s = lead_s
        self.decision: Decision | None = None  # the previewed decision this audio speaks
        self.repair_ran = False  # the ASR repair pass already ran for this transcript …
        self.repaired: tuple[str, AsrSignal, Decision] | None = None  # … and found this (None: nothing)
        self.weighed: list[str] = []  # … having previewed and not taken these hearings
        self.rehear_timings: dict[str, float] = {}  # … and took this long weighing other hearings
        self.q: asyncio.Queue[TtsChunk | BaseException | object] = asyncio.Queue()  # chunks, then DONE
        self.cancelled = threading.Event()
        self._loop = loop
        self.clock: Clock = clock or MonotonicClock()
        self.started_at = self.clock.now()
        self.first_chunk_at: float | None = None  # when its first audio was rendered
        self.future = loop.run_in_executor(None, self._run, tts)

    def _put(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self.q.put_nowait, item)
        except RuntimeError:  # the loop is gone (call torn down): nobody listens any more
            pass

    def _run(self, tts: Synthesizer) -> None:
        gen: Iterator[TtsChunk] | None = None
        try:
            gen = iter(tts.synthesize(self.text))
            rendered = 0.0  # seconds of audio handed out so far
            for chunk in gen:
                if self.cancelled.is_set():
                    break
                if self.first_chunk_at is None:
                    self.first_chunk_at = self.clock.now()
                self._put(chunk)
                rendered += len(chunk.pcm) / chunk.sample_rate
                # Pacing: stop pulling while far ahead of playback; the worker then blocks on its
                # full pipe, leaving the CPU to other calls' first sentences.
                while self.lead_s is not None and not self.cancelled.is_set() \
                        and rendered - (self.clock.now() - self.first_chunk_at) > self.lead_s:
                    self.cancelled.wait(0.05)
        except BaseException as e:  # noqa: BLE001 - handed to the event loop
            self._put(e)
        finally:
            close = getattr(gen, "close", None)
            if close:
                close()  # a cancelled render stops the rest (and frees the TTS lock)
            self._put(DONE)

    def cancel(self) -> None:
        self.cancelled.set()
