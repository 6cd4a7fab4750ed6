"""How one call behaves: endpointing, speculation, early end, barge-in and the audio formats."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class CallConfig(BaseModel):
    end_silence_ms: int = 500
    max_turn_s: float = 30.0
    asr_model: str = "tiny.en"
    input_rate: int = 16000
    output_rate: int = 16000
    output_encoding: Literal["pcm16", "mulaw"] = "pcm16"
    barge_in: bool = True
    speculative_asr: bool = True  # transcribe at the first pause, before the turn ends
    speculative_reply: bool = True  # also preview the decision and render its audio at the pause
    # Render a reply at most this many seconds ahead of its playback (None: as fast as possible).
    # Live calls pace so concurrent calls share the CPU for first sentences, not for audio nobody
    # has heard yet (a barge-in would throw it away); replays and evaluation render straight through.
    reply_lead_s: float | None = 2.0
    # When a turn would be refused for lack of evidence, hear it again (call/rehear.py): KB words
    # that sound like its words, then a second decode prompted with the KB's terms and the ways
    # callers ask for a person; one is used only when it clearly strengthens the turn.
    asr_repair: bool = True
    pause_ms: int = 200
    # End the turn after this much silence instead of `end_silence_ms` when the transcript made
    # at the pause reads as a finished sentence and its reply is ready (None: always wait).
    early_end_ms: int | None = 300
    # A caller who starts speaking again within this many seconds of such an early end was not
    # finished: the reply stops, and both parts are transcribed and decided as one turn. (Speech
    # is confirmed `min_speech_ms` after it starts, so this covers pauses of up to ~1 s in all.)
    continuation_s: float = 0.9
    vad_threshold: float = 0.5
    # For 8 kHz telephone audio: silero's speech probability dips inside band-limited words, so at
    # 0.5 a turn ends mid-question (12 of 150 generated telephone questions were cut in two); at
    # 0.35 none was, and none of 270 wideband or noisy recordings was cut or merged at either.
    narrowband_vad_threshold: float = 0.35
    min_speech_ms: int = 200
    pre_roll_ms: int = 200  # audio kept from before the VAD's speech onset
    # For 8 kHz telephone audio: silero also confirms band-limited speech later. On 420 generated
    # telephone recordings the speech began up to 360-410 ms before the VAD's onset (p99 310-360 ms),
    # and a 200 ms pre-roll cut the first word ("Can I speak to someone?" heard as "I think the term one").
    narrowband_pre_roll_ms: int = 400

    @property
    def narrowband(self) -> bool:
        """Telephone-line input (8 kHz or less)."""
        return self.input_rate <= 8000

    def speech_threshold(self) -> float:
        """The VAD's speech threshold for this call's input: lower on a telephone line."""
        return self.narrowband_vad_threshold if self.narrowband else self.vad_threshold

    def speech_pre_roll_ms(self) -> int:
        """How much audio before the VAD's onset a turn keeps: more on a telephone line."""
        return self.narrowband_pre_roll_ms if self.narrowband else self.pre_roll_ms
