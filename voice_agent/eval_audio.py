"""Run one evaluation case's recording through the full voice path (VAD, ASR, normalization, policy,
pre-TTS recheck, TTS) for `run.py eval --audio-dir`. The reply audio is rendered and discarded; a
decision that produced no reply audio is reported as a problem of the case.

`run.py eval` enters here: `cli()` hands `audio_setup` to `evaluation.cli`, which never imports
`voice_agent` itself."""
from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from pathlib import Path

from evaluation.cases import Case
from evaluation.cli import cli as eval_cli
from policy.decision import Decision
from policy.engine import Engine

from .audio import float_to_pcm16, resample
from .audio_files import MAX_SECONDS, read_audio
from .call import CallConfig, VoiceRuntime
from .interfaces import CallLike, CallRuntime

CHUNK_MS = 20
RATE = 16000
SETTLE_TIMEOUT_S = 60.0  # a turn's ASR + policy + TTS on 2 busy cores stays well under this
QUIET_S = 3.0
# Per detected turn: (what the caller was heard to say, what was decided, problems of the voice path,
# how each turn was heard: ASR's first hearing, and the turn as the policy read it).
CaseAudio = tuple[list[str], list[Decision], list[str], list[tuple[str, str]]]


def default_config(input_rate: int = RATE) -> CallConfig:
    # Audio is fed faster than real time, so a later turn would "interrupt" an earlier reply that is
    # still being rendered; barge-in is off so every turn's reply is rendered whole.
    return CallConfig(input_rate=input_rate, barge_in=False, reply_lead_s=None)


class _Heard:
    """What one call's event stream has said so far, and when it has settled."""

    def __init__(self) -> None:
        self.transcripts: list[str] = []
        self.raw: list[str] = []  # ASR's first hearing, per transcript
        self.said: list[str] = []  # the policy's reading, per decision
        self.decisions: list[Decision] = []
        self.audio_bytes: dict[str, int] = {}
        self.ended: set[str] = set()
        self.replies: list[str] = []  # audio id per decision, in order
        self.errors: list[str] = []
        self.changed = asyncio.Event()

    async def consume(self, call: CallLike) -> None:
        async for ev in call.events():
            # `ev.type` (not a copy of it) so the checker narrows the event's class
            if ev.type == "transcript" and getattr(ev, "final", True):
                self._transcript(ev.text, getattr(ev, "raw_text", "") or ev.text)
            elif ev.type == "decision":
                self.decisions.append(ev.decision)
                self.said.append(getattr(ev, "said", ""))
            elif ev.type == "audio_start":
                self.replies.append(ev.id)
            elif ev.type == "audio_chunk":
                self.audio_bytes[ev.id] = self.audio_bytes.get(ev.id, 0) + len(ev.data)
            elif ev.type == "audio_end":
                self.ended.add(ev.id)
            elif ev.type == "error":
                self.errors.append(f"{ev.code}: {ev.message}")
            self.changed.set()

    def _transcript(self, text: str, raw: str) -> None:
        # A second final transcript before the turn's decision is the ASR repair pass: it replaces
        # the first rather than counting as another turn.
        if len(self.transcripts) > len(self.decisions):
            self.transcripts[-1] = text
        else:
            self.transcripts.append(text)
            self.raw.append(raw)

    def hearing(self) -> list[tuple[str, str]]:
        return [(self.raw[i] if i < len(self.raw) else "", self.said[i] if i < len(self.said) else "")
                for i in range(max(len(self.raw), len(self.said)))]

    def playing(self) -> bool:
        return any(r not in self.ended for r in self.replies)

    async def settle(self, want: int, quiet_s: float = QUIET_S) -> None:
        """Wait until every one of `want` caller turns has its decision and finished reply audio.
        Otherwise (VAD heard fewer turns, a reply never started) stop once nothing is playing and
        the stream has been quiet for `quiet_s`, or at SETTLE_TIMEOUT_S."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_TIMEOUT_S
        while not (len(self.decisions) >= want and len(self.replies) >= len(self.decisions) and not self.playing()):
            left = deadline - loop.time()
            if left <= 0:
                break
            self.changed.clear()
            idle = bool(self.decisions) and not self.playing()
            try:
                await asyncio.wait_for(self.changed.wait(), timeout=min(quiet_s, left) if idle else left)
            except asyncio.TimeoutError:
                if idle:
                    break

    def problems(self) -> list[str]:
        """Call errors, and decisions that produced no reply audio."""
        problems = [f"audio: call error {e}" for e in self.errors]
        replies = self.replies
        silent = [i for i, _ in enumerate(self.decisions) if i >= len(replies) or not self.audio_bytes.get(replies[i])]
        if silent:
            problems.append(f"audio: no reply audio for turn(s) {[i + 1 for i in silent]}")
        return problems


async def _run(runtime: CallRuntime, case: Case, wav_path: Path, config: CallConfig | None, role: str,
               quiet_s: float, max_seconds: float) -> CaseAudio:
    pcm, sr = read_audio(wav_path, max_seconds)
    # a telephone recording goes in at 8 kHz, as a phone line's audio does: the call resamples it
    config = config if config is not None else default_config(sr if sr in (8000, RATE) else RATE)
    rate = config.input_rate
    if sr != rate:
        pcm = resample(pcm, sr, rate)
    call = runtime.new_call(role=case.role(role), facets=case.caller.all_facets(), config=config)
    heard = _Heard()
    consumer = asyncio.create_task(heard.consume(call))
    try:
        step = rate * CHUNK_MS // 1000
        data = float_to_pcm16(pcm)
        for i in range(0, len(data), step * 2):
            await call.feed_audio(data[i:i + step * 2])
        await call.end_of_input()
        await heard.settle(len(case.caller_turns), quiet_s)
    finally:
        await call.close()
        consumer.cancel()
        try:
            await consumer
        except (asyncio.CancelledError, Exception):  # the stream ends with the call
            pass
    return heard.transcripts, heard.decisions, heard.problems(), heard.hearing()


def run_audio_case(runtime: CallRuntime, case: Case, wav_path: str | Path, *,
                   config: CallConfig | None = None, role: str = "public", quiet_s: float = QUIET_S,
                   max_seconds: float = MAX_SECONDS) -> CaseAudio:
    """Feed `<case id>.wav` through a new call of `runtime` (a `VoiceRuntime`) and collect what the
    caller was heard to say and what the agent decided, one per detected turn. `role` applies to
    cases that name none. The third element lists problems of the voice path (no reply audio, call
    errors); the eval counts them as failures of the case. The fourth: per turn, ASR's first hearing
    and the policy's reading of it. `quiet_s`: how long a stream with fewer
    turns than the case expects must stay quiet before the case is scored as it stands."""
    return asyncio.run(_run(runtime, case, Path(wav_path), config, role, quiet_s, max_seconds))


def audio_setup(kb: str, state_dir: str, policy_file: str | None, on_date: dt.date | None,
                role: str, max_audio_s: float = MAX_SECONDS) -> tuple[Engine, Callable[[Case, str | Path], CaseAudio]]:
    """The voice runtime for `--audio-dir`: its engine and a runner feeding one case's WAV."""
    runtime = VoiceRuntime.load(kb, state_dir=state_dir, policy_file=policy_file)
    runtime.engine.on_date = on_date
    return runtime.engine, _Runner(runtime, role, max_audio_s)


class _Runner:
    """Feeds one case's WAV through a new call; `close()` stops the runtime's TTS worker."""

    def __init__(self, runtime: VoiceRuntime, role: str, max_audio_s: float):
        self.runtime, self.role, self.max_audio_s = runtime, role, max_audio_s

    def __call__(self, case: Case, wav: str | Path) -> CaseAudio:
        return run_audio_case(self.runtime, case, wav, role=self.role, max_seconds=self.max_audio_s)

    def close(self) -> None:
        self.runtime.close()


def cli(argv: list[str]) -> int:
    return eval_cli(argv, audio_setup)
