"""Process-wide warm models, shared by all calls: the policy engine, the ASR model and the TTS
worker (piper runs in its own process; see stages/tts.py)."""
from __future__ import annotations

import sys
import threading
from pathlib import Path

from policy.engine import Engine
from policy.session_state import SessionState
from policy.store_api import HandoffStore

from ..interfaces import Clock, MonotonicClock, Synthesizer, Transcriber, TurnHook
from ..stages.asr import Transcriber as WhisperTranscriber
from ..stages.asr import AsrError, build_prompt
from ..stages.asr_moonshine import MoonshineTranscriber, open_transcriber
from ..stages.tts import TtsClient
from .config import CallConfig
from .rehear import as_said
from .session import CallSession


# The model that hears a turn afresh before it is refused (None: only the call's own model's
# prompted second decode), and the one taken when it is not installed. On the 19 domains' 456
# recordings, against whisper base: voice 0.702 -> 0.711 of cases (telephone 0.684 -> 0.719), word
# error rate 24.9% -> 20.4%, refusal path p95 ~1.0 -> ~1.15 s, ~270 MB more. Whisper base had taken
# the voice path from 0.662 to 0.671. `bench voice --rehear-model tiny.en` measures without either.
REHEAR_MODEL: str | None = "moonshine"
REHEAR_FALLBACK = "base"


def _rehear_transcriber(model: str | None, first: str) -> MoonshineTranscriber | WhisperTranscriber | None:
    """The model for second decodes; None (the first model serves) when it is the same or neither it
    nor the fallback is installed."""
    tried: list[str] = []
    for name in dict.fromkeys(m for m in (model, REHEAR_FALLBACK if model == REHEAR_MODEL else None) if m):
        if name == first:
            return None
        try:
            return open_transcriber(name, language="en")
        except AsrError as e:
            tried.append(str(e))
    if tried:
        print(f"note: second decodes use {first}: {'; '.join(tried)}", file=sys.stderr)
    return None


class VoiceRuntime:
    """Process-wide warm models, shared by all calls."""

    def __init__(self, engine: Engine, transcriber: Transcriber, tts: Synthesizer | None, asr_model: str = "tiny.en",
                 clock: Clock | None = None, rehear_transcriber: Transcriber | None = None):
        self.engine = engine
        self.transcriber = transcriber
        # the second decode of a turn about to be refused: a larger model when one is installed
        self.rehear_transcriber = rehear_transcriber or transcriber
        self.tts = tts
        self.clock: Clock = clock or MonotonicClock()
        self.asr_model = asr_model
        self._prompts: dict[str, str | None] = {}
        self._warming: threading.Thread | None = None

    @classmethod
    def load(cls, kb_dir: str | Path, *, asr_model: str = "tiny.en", state_dir: str | Path = "var",
             policy_file: str | Path | None = None, tts: bool = True,
             store: HandoffStore | None = None, rehear_model: str | None = REHEAR_MODEL) -> "VoiceRuntime":
        engine = Engine.load(kb_dir, policy_file=policy_file, state_dir=state_dir, store=store)
        for warning in engine.kb_warnings():
            print(f"warning: {warning}", file=sys.stderr)
        transcriber = WhisperTranscriber(asr_model, vocabulary=engine.vocabulary("public"))
        client = None
        if tts:
            client = TtsClient()
            threading.Thread(target=_start_quietly, args=(client,), daemon=True).start()  # loads in parallel
        rehear = _rehear_transcriber(rehear_model, asr_model)
        warming = None
        if rehear is not None:  # warms beside the first model; a refusal before it is ready waits for it
            warming = threading.Thread(target=rehear.warmup, daemon=True)
            warming.start()
        transcriber.warmup()
        engine.warmup()  # the first caller's first turn pays no lazy loads (~0.8 s on 2 cores)
        if client is not None:
            client.start()
        runtime = cls(engine, transcriber, client, asr_model, rehear_transcriber=rehear)
        runtime._warming = warming
        return runtime

    def vocabulary(self, role: str) -> list[str]:
        return self.engine.vocabulary(role)  # cached per role by the engine

    def repair_prompt(self, role: str) -> str | None:
        """The second decode's prompt for a turn about to be refused: KB terms this role may see,
        then how callers ask for a person (last, so a long glossary never pushes them out)."""
        key = f"repair:{role}"
        if key not in self._prompts:
            asks = " ".join(as_said(p) for p in self.engine.request_phrases())
            self._prompts[key] = " ".join(x for x in (build_prompt(self.vocabulary(role)), asks) if x) or None
        return self._prompts[key]

    def asr_prompt(self, role: str) -> str | None:
        """ASR bias per role: a caller never gets a restricted document's words in the prompt."""
        if getattr(self.transcriber, "bias", "prompt") != "prompt":
            return None
        if role not in self._prompts:
            self._prompts[role] = build_prompt(self.vocabulary(role))
        return self._prompts[role]

    def new_call(self, *, role: str = "public", facets: dict[str, str] | None = None,
                 config: CallConfig | None = None, state: SessionState | None = None,
                 on_turn: TurnHook | None = None) -> "CallSession":
        """A call; with `state`, the conversation continues from it (a resumed call)."""
        return CallSession(self, role=role, facets=facets, config=config or CallConfig(asr_model=self.asr_model),
                           state=state, on_turn=on_turn)

    def close(self) -> None:
        if self._warming is not None:  # exiting mid-decode aborts the process inside CTranslate2
            self._warming.join()
        if self.tts is not None:
            self.tts.close()
        self.engine.store.shutdown()  # a database store's connections


def _start_quietly(client: TtsClient) -> None:
    try:
        client.start()
    except Exception:  # noqa: BLE001 - retried (and reported) by the synchronous start
        pass
