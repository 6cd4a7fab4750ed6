"""voice_agent.stages.turn_end: when a transcript reads as a finished turn."""
import pytest

from voice_agent.stages.turn_end import reads_complete

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text", ["When is my bill due?", "How do I pay \"online\"?", "Can I keep my number?",
                                  "Is the Market Street store open on Sunday.",  # whisper's full stop
                                  "I'm on the business plan. What does roaming cost?"])
def test_questions_read_complete(text):
    assert reads_complete(text, question=True)


@pytest.mark.parametrize("text", ["I want to cancel my...", "How do I cancel my?", "Can I pay with", "Hello.",
                                  "When I paid my bill last week.",  # a clause, not a question
                                  "I'm a personal customer and the card I paid with has expired.",
                                  "What about the"])
def test_unfinished_or_scene_setting_turns_do_not(text):
    assert not reads_complete(text, question=True)


def test_statements_count_when_no_question_is_required():
    assert reads_complete("I'm a personal customer.")
    assert not reads_complete("I'm a personal customer and")
    assert not reads_complete("It's for my")
