"""The beam's other hearings of a turn, on real recordings with the real whisper tiny.en: a word the
greedy hearing gets wrong is often the beam's second choice, which the refusal path can weigh."""
from __future__ import annotations

from pathlib import Path

import pytest

from voice_agent.audio_files import read_audio
from voice_agent.stages.asr import Transcriber

AUDIO = Path(__file__).resolve().parent.parent / "fixtures" / "audio"

pytestmark = [pytest.mark.audio]


@pytest.fixture(scope="module")
def asr() -> Transcriber:
    return Transcriber("tiny.en")


def _pcm(name: str):
    x, rate = read_audio(AUDIO / name)
    assert rate == 16000
    return x


def test_the_beam_keeps_a_hearing_the_greedy_decode_missed(asr):
    # espeak's "How do I reset my router?" is first heard as "... my Ruger?"
    x = _pcm("as01.wav")
    greedy = asr.transcribe(x, fallback="never").text
    assert "router" not in greedy.lower()
    hearings = asr.hearings(x, n=4)
    assert any("router" in h.text.lower() for h in hearings[1:]), [h.text for h in hearings]
    # every hearing keeps its own fit to the audio, for the refusal path's audio check
    assert all(h.avg_logprob < 0 and h.segments for h in hearings)


def test_hearings_are_distinct_word_sequences_and_one_is_greedy(asr):
    x = _pcm("ap01.wav")
    hearings = asr.hearings(x, n=4)
    words = [" ".join(w.strip(".,?!") for w in h.text.lower().split()) for h in hearings]
    assert 1 <= len(hearings) <= 4 and len(set(words)) == len(words)
    assert asr.hearings(x, n=1)[0].text == asr.transcribe(x, fallback="never").text


def test_a_full_window_transcriber_keeps_one_hearing():
    full = Transcriber("tiny.en", audio_ctx="full")
    hearings = full.hearings(_pcm("as01.wav"), n=4)
    assert len(hearings) == 1 and hearings[0].audio_ctx_s == 30.0
