"""The voice pipeline of one call, over the policy engine: `runtime` (shared models), `session`
(the call loop), `speculation` and `reply`, `render`, `events` and `config`.

    audio in → resample to 16 kHz → VAD endpointing → ASR → normalize → engine turn
             → pre-TTS recheck → TTS sentence by sentence → resample/encode → audio out

`VoiceRuntime` holds what every call shares (engine, warm ASR model, TTS worker);
`CallSession` is one conversation: asyncio on the outside, CPU work in threads. Events come
out of `events()` in order; the server, replay, mic and bench all consume the same stream.

Latency: when the caller has been quiet for `pause_ms` (200 ms) we already transcribe the turn
so far, decide what we would say (`Session.preview`, which records nothing) and start rendering
that message into a buffer; nothing is emitted. When the turn really ends (`end_silence_ms`,
500 ms) with no more speech, the real turn and pre-TTS recheck run as always, and if the final
message is exactly the previewed one its buffered audio goes out at once; otherwise the early
render is cancelled and the final message is spoken. Speech after the pause discards it all.
Barge-in: while a reply plays, the microphone goes to a `BargeInDetector` that cancels the
reply's echo; when the caller talks over the reply we stop its audio, emit `ClearEvent`, and the
caller's speech (from just before its onset) becomes the next turn.
"""
from __future__ import annotations

from .config import CallConfig
from .events import (AudioChunk, AudioEnd, AudioStart, CallEvent, ClearEvent, DecisionEvent, ErrorEvent,
                     TranscriptEvent, TransferEvent)
from .render import Render
from .reply import TTS_FAILED_MESSAGE
from .runtime import VoiceRuntime
from .session import CallSession

__all__ = ["CallConfig", "CallSession", "VoiceRuntime", "Render", "TTS_FAILED_MESSAGE", "CallEvent",
           "TranscriptEvent", "DecisionEvent", "AudioStart", "AudioChunk", "AudioEnd", "ClearEvent",
           "TransferEvent", "ErrorEvent"]
