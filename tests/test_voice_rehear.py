"""A turn about to be refused for lack of evidence is heard again, on real recordings through the
real voice path: a misheard request for a person reaches a person, a misheard KB word is repaired
by sound, and the audit keeps what was heard, what it became and why."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.cases import Case
from policy.decision import Action, Reason
from voice_agent.eval_audio import audio_setup

ROOT = Path(__file__).resolve().parent.parent
AUDIO = ROOT / "fixtures" / "audio"

pytestmark = [pytest.mark.audio, pytest.mark.slow]


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    engine, run = audio_setup(str(ROOT / "fixtures" / "kb"), str(state), None, None, "public")
    return engine, run, state


def _asr_of_last_turn(state: Path) -> dict:
    turns = [json.loads(x) for x in (state / "audit.jsonl").read_text().splitlines() if '"kind": "turn"' in x]
    return turns[-1]["asr"]


def test_a_misheard_request_for_a_person_is_transferred(voice):
    # espeak's "Operator." is first heard as something else entirely ("Ah, the regular...")
    _, run, state = voice
    case = Case.model_validate({"id": "hu02", "question": "Operator.", "expect": {"action": "transfer"}})
    transcripts, decisions, problems, hearing = run(case, AUDIO / "hu02.wav")
    assert problems == []
    assert [d.action for d in decisions] == [Action.transfer]
    assert Reason.human_requested in decisions[0].reasons
    asr = _asr_of_last_turn(state)
    assert "operator" not in asr["raw_text"].lower()  # what was first heard stays in the audit
    assert "operator" in transcripts[0].lower() and asr["repair"].startswith("second decode")


def test_a_misheard_kb_word_is_repaired_by_sound_when_the_evidence_uses_it(voice):
    # "router" is first heard as "Ruger"; the KB's router pages answer once it is repaired
    engine, run, state = voice
    case = Case.model_validate({"id": "as01", "question": "How do I reset my router?", "expect": {"action": "answer"}})
    transcripts, decisions, _, hearing = run(case, AUDIO / "as01.wav")
    asr = _asr_of_last_turn(state)
    assert decisions[0].action == Action.answer, (hearing, asr)
    assert "router" in transcripts[0].lower()
    if "router" not in asr["raw_text"].lower():  # heard wrong first: the repair says how it was found
        assert asr["repair"], asr
    sections = [engine.kb.section(f"{c.doc_id}#{c.section}") for c in decisions[0].citations]
    cited = " ".join(f"{s.heading} {s.text}" for s in sections)
    assert "router" in cited.lower()


@pytest.mark.parametrize("said", ["I want to talk to a real person."])
def test_a_request_for_a_person_over_the_telephone_line_is_transferred(voice, tmp_path, said):
    # (espeak's "Agent, please." on this line is heard as "Hey, just leave." and refused with the
    # default second decode, tiny.en; whisper base hears it: one of the misses issue 12 still has)
    # spoken, band-limited to 300-3400 Hz and passed through G.711 mu-law at 8 kHz, as a phone line
    # carries it; the call takes it at 8 kHz and resamples it itself
    import shutil
    import subprocess

    if not (shutil.which("espeak-ng") and shutil.which("sox")):
        pytest.skip("espeak-ng and sox make the recording")
    raw, phone = tmp_path / "raw.wav", tmp_path / "phone.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(raw), said], check=True)
    subprocess.run(["sox", str(raw), "-r", "8000", "-e", "mu-law", "-b", "8", str(tmp_path / "line.wav"),
                    "sinc", "300-3400", "pad", "0.4", "0.8"], check=True)
    subprocess.run(["sox", str(tmp_path / "line.wav"), "-e", "signed-integer", "-b", "16", str(phone)], check=True)
    _, run, _ = voice
    case = Case.model_validate({"id": "phone", "question": said, "expect": {"action": "transfer"}})
    transcripts, decisions, problems, _ = run(case, phone)
    assert problems == [] and len(decisions) == 1, (transcripts, problems)
    assert decisions[0].action == Action.transfer and Reason.human_requested in decisions[0].reasons, transcripts


def test_a_short_request_heard_as_nonsense_on_the_phone_line_still_reaches_a_person(voice):
    # "Representative, please." over the telephone channel: tiny.en hears no request at all. The
    # second model (Moonshine) hears it ("second model: human_requested"); without one, the prompted
    # second decode's beam did, and before the beam the policy's spoken form forced through the
    # decoder fitted the audio better than the hearing did. Each way the repair says how it was found.
    _, run, state = voice
    case = Case.model_validate({"id": "pr02", "question": "Representative, please.", "expect": {"action": "transfer"}})
    transcripts, decisions, problems, _ = run(case, AUDIO / "phone" / "representative_please.wav")
    assert problems == [] and [d.action for d in decisions] == [Action.transfer], transcripts
    asr = _asr_of_last_turn(state)
    assert "representative" not in asr["raw_text"].lower()
    assert asr["repair"].startswith(("second model", "second decode", "fits the audio as a request for a person")), asr
    assert "human_requested" in asr["repair"] or "fits the audio" in asr["repair"], asr


def test_forced_fit_ranks_the_words_said_above_other_texts():
    from voice_agent.audio import load_audio
    from voice_agent.stages.asr import Transcriber

    pcm = load_audio(AUDIO / "phone" / "representative_please.wav")
    said, other, unrelated = Transcriber("tiny.en").fit(pcm, ["Representative, please.", "Operator.",
                                                              "How do I reset my router?"])
    assert said > other and said > unrelated


def test_a_telephone_turn_keeps_its_first_words(voice):
    # espeak en-gb over the telephone channel: silero confirms band-limited speech late, and with the
    # wideband pre-roll (200 ms) the turn lost "Can I" and was heard as "I think the term one."
    _, run, state = voice
    case = Case.model_validate({"id": "pr11", "question": "Can I speak to someone?", "expect": {"action": "transfer"}})
    transcripts, decisions, problems, _ = run(case, AUDIO / "phone" / "can_i_speak_to_someone.wav")
    assert problems == [] and [d.action for d in decisions] == [Action.transfer], transcripts
    heard = _asr_of_last_turn(state)["raw_text"].lower()
    assert heard.startswith("can i") and "speak" in heard, heard  # the first hearing, no repair needed


def test_bench_wer_hears_a_telephone_file_as_the_phone_line_does():
    # `bench wer` cuts turns with the telephone line's VAD threshold and pre-roll, as the call does:
    # with the wideband ones it measured a word error the phone path does not make
    from voice_agent.bench_wer import Recording, hear
    from voice_agent.call.config import CallConfig
    from voice_agent.stages.asr import Transcriber

    rec = Recording(AUDIO / "phone" / "can_i_speak_to_someone.wav", {"spoken": ["Can I speak to someone?"]}, "phone")
    heard, _, turns = hear(Transcriber("tiny.en"), rec, "vad", CallConfig())
    assert turns == 1 and heard.lower().startswith("can i") and "speak" in heard.lower(), heard
