"""Sound-alike repairs of misheard words toward a KB's words, and when a second hearing is taken."""
import pytest

from policy.decision import Action, Citation, Decision, Reason
from kb.sound import SoundIndex, sound_alikes, sound_key, sound_repairs
from voice_agent.call.rehear import (Hypothesis, accept, answered_fragment, as_said, fitted_ask, needs_rehearing,
                                     new_words, weighed_line)

pytestmark = pytest.mark.unit

KB_WORDS = ["cost", "case", "router", "plan", "plans", "bill", "billed", "roaming", "reset", "access", "charges"]


def test_sound_key_keeps_the_consonant_skeleton():
    assert sound_key("cast") == sound_key("cost")
    assert sound_key("factor") == sound_key("factory")


@pytest.mark.parametrize("heard, meant", [
    ("How much does a replacement SIM cast?", "cost"),   # same key: cost, not the likelier-spelled "case"
    ("How do I reset my Ruger?", "router"),              # one key edit
    ("if I cancel my annual plant early", "plan"),
])
def test_a_misheard_word_becomes_the_kb_word_it_sounds_like(heard, meant):
    fixed, repairs = sound_repairs(heard, SoundIndex(KB_WORDS))
    assert [r.meant for r in repairs] == [meant]
    assert meant in fixed.lower()


@pytest.mark.parametrize("heard", [
    "my phone is stolen",           # "stolen"/"still": spelled too differently
    "How do I turn moving on?",     # "moving"/"roaming": two key edits
    "the radio",                    # nothing in the KB sounds like it
])
def test_words_that_merely_share_consonants_stay(heard):
    assert sound_repairs(heard, SoundIndex(KB_WORDS + ["still", "carry"])) == (heard, [])


def test_kb_words_and_function_words_are_never_replaced():
    text = "what is the cost of my plan"
    assert sound_repairs(text, SoundIndex(KB_WORDS + ["wheat", "thy"])) == (text, [])


def test_two_kb_words_equally_close_give_no_repair():
    assert SoundIndex(["bat", "bet"]).nearest("bit") is None


def _refusal() -> Decision:
    return Decision(action=Action.refuse, message="I can't confirm that.", reasons=[Reason.low_retrieval_score])


def _answer() -> Decision:
    return Decision(action=Action.answer, message="It costs $10.", reasons=[Reason.grounded_answer],
                    citations=[Citation(doc_id="fees", section="sim")], confidence=0.9)


def test_evidence_refusals_and_doubtful_hearings_are_heard_again():
    assert needs_rehearing(_refusal())
    assert needs_rehearing(Decision(action=Action.clarify, message="Sorry?", reasons=[Reason.asr_low_confidence]))
    assert not needs_rehearing(Decision(action=Action.refuse, message="no", reasons=[Reason.permission_denied]))
    assert not needs_rehearing(Decision(action=Action.clarify, message="Which?", reasons=[Reason.missing_facet]))


def test_a_sound_alike_answer_is_taken_only_when_its_evidence_uses_the_repaired_word():
    h = Hypothesis("How much does a SIM cost?", -0.2, "sounds like", decoded=False, repaired_words=("cost",))
    assert accept(h, _answer(), "How much does a SIM cast?", -0.2, "A replacement SIM costs $10. cost") is not None
    assert accept(h, _answer(), "How much does a SIM cast?", -0.2, "A replacement SIM is $10.") is None


@pytest.mark.parametrize("decision", [
    Decision(action=Action.clarify, message="Advance, anytime or season?", reasons=[Reason.missing_facet]),
    Decision(action=Action.transfer, message="Transferring you.", reasons=[Reason.high_risk_topic]),
    Decision(action=Action.transfer, message="Transferring you.", reasons=[Reason.human_requested]),
])
def test_a_sound_alike_is_taken_only_when_the_sections_its_decision_rests_on_use_the_repaired_word(decision):
    # "no matter the digital thing" -> "no battery": the pendant-alarm page's word; "gates" -> "dates" is
    # in no page the ticket-type question is asked from
    first = "Since you switched, there were no matter the digital thing it's not been working."
    h = Hypothesis(first.replace("matter", "battery"), -0.4, "sounds like", decoded=False, repaired_words=("battery",))
    assert accept(h, decision, first, -0.4, "Pendant alarms need a battery backup on the digital line.") is not None
    assert accept(h, decision, first, -0.4, "Ticket types: advance, anytime and season tickets.") is None
    assert accept(h, decision, first, -0.4, "") is None  # a decision that rests on no section


def test_an_answer_from_a_new_hearing_must_stand_on_a_word_it_heard_differently():
    first = "How much is the U-Loom day pass?"
    heard = "How much is the new long day pass?"
    assert new_words(first, heard) == ("new", "long")
    h = Hypothesis(heard, -0.3, "second decode, beam 2", decoded=True, repaired_words=new_words(first, heard))
    # the evidence found is the day pass page, which says neither new word: the words it was found by
    # were heard the first time too, and the first hearing was refused
    assert accept(h, _answer(), first, -0.3, "The Day Pass costs $5 a day in the EU.") is None
    assert accept(h, _answer(), first, -0.3, "Our new Long Day Pass costs $8.") is not None


def test_a_second_decode_that_fits_the_audio_worse_is_not_taken():
    h = Hypothesis("How much does a SIM cost?", -0.9, "second decode", decoded=True)
    assert accept(h, _answer(), "How much does a SIM cast?", -0.3, "cost") is None
    assert accept(h, _refusal(), "How much does a SIM cast?", -0.9, "") is None


def test_a_request_for_a_person_is_taken_even_when_the_words_changed():
    transfer = Decision(action=Action.transfer, message="Transferring you.", reasons=[Reason.human_requested])
    better = Hypothesis("Operator.", -0.45, "second decode", decoded=True)
    assert accept(better, transfer, "Ah, the regular.", -0.89, "") is not None
    worse = Hypothesis("Operator.", -1.2, "second decode", decoded=True)
    assert accept(worse, transfer, "Ah, the regular.", -0.89, "") is None


def test_a_prompted_decode_may_hear_a_request_for_a_person_only_in_a_short_turn():
    transfer = Decision(action=Action.transfer, message="Transferring you.", reasons=[Reason.human_requested])
    short = Hypothesis("Speak to someone.", -0.5, "second decode", decoded=True, prompted=True)
    assert accept(short, transfer, "speak the song one", -0.6, "") is not None
    seven = Hypothesis("Transfer me to happy often.", -0.5, "second decode", decoded=True, prompted=True)
    assert accept(seven, transfer, "Try and find me to happy often", -0.6, "") is not None
    # the prompt's "Can I talk to ..." written over a long garbled turn about childcare vouchers
    first = "I'll merchant my celery, can I put into a child can't march on each month?"
    long = Hypothesis("I'll merchant my celery. Can I put in to a child. Can I talk to each man.", -0.5,
                      "second decode", decoded=True, prompted=True)
    assert accept(long, transfer, first, -0.6, "") is None
    # an unprompted model's own hearing is not held to it
    assert accept(Hypothesis(long.text, -0.5, "second model", decoded=True, independent=True), transfer,
                  first, -0.6, "") is not None


def test_a_prompted_decode_never_makes_a_turn_high_risk_but_the_second_model_may():
    risk = Decision(action=Action.transfer, message="Transferring you.", reasons=[Reason.high_risk_topic])
    first = "I can't still log on in your own manual plan."
    prompted = Hypothesis("I can't so log on in you alone, I am your plan.", -0.5, "second decode, beam 4",
                          decoded=True, prompted=True)
    assert accept(prompted, risk, first, -0.6, "") is None
    both = Decision(action=Action.transfer, message="Transferring you.",
                    reasons=[Reason.human_requested, Reason.high_risk_topic])
    assert accept(Hypothesis("I'm alone, get me a person.", -0.5, "second decode", decoded=True, prompted=True),
                  both, "I'm alone, get me up Herson.", -0.6, "") is not None
    own = Hypothesis("I got home from work and the landlord changed the locks.", -0.2, "second model", decoded=True,
                     independent=True)
    assert accept(own, risk, "I got home, room work and the land lot change of lots.", -0.6, "") is not None


def test_a_different_sentence_is_a_different_hearing():
    h = Hypothesis("Where is the nearest store?", -0.1, "second decode", decoded=True)
    assert accept(h, _answer(), "How much does a SIM cast?", -0.2, "store") is None


def test_a_stronger_models_own_hearing_may_differ_in_every_word_but_must_not_be_refused():
    first = "Hope you and your friends met Rachan number one."
    heard = "How soon does my refund reach my card?"
    h = Hypothesis(heard, -0.9, "second model", decoded=True, repaired_words=new_words(first, heard), independent=True)
    # another model's log-probability and wording are no measure against the first hearing's
    assert accept(h, _answer(), first, -0.2, "Your refund reaches your card in 3 days.") is not None
    assert accept(h, _answer(), first, -0.2, "A replacement SIM is $10.") is None  # found by no new word
    assert accept(h, _refusal(), first, -0.2, "") is None
    transfer = Decision(action=Action.transfer, message="Transferring you.", reasons=[Reason.human_requested])
    assert accept(h, transfer, first, -0.2, "") == "second model: human_requested instead of refuse"


def test_an_answer_from_a_hearing_of_its_own_must_clear_a_higher_line():
    """The hearing itself may be wrong: an answer just over the typed line (0.79) is not taken from a
    second decode or the second model; a sound-alike, which found its evidence by the repaired word,
    keeps the typed line."""
    first = "Can my cat come in the cabin on the Dublin to high slide?"
    heard = "Can my cat come in the cabin on the Dublin to-ice flight?"
    near = _answer().model_copy(update={"confidence": 0.79})
    for independent in (False, True):
        h = Hypothesis(heard, -0.2, "second model", decoded=True, repaired_words=new_words(first, heard),
                       independent=independent)
        assert accept(h, near, first, -0.2, "Pets fly in the cabin on the Dublin to Nice flight.") is None
        assert accept(h, _answer(), first, -0.2, "Pets fly in the cabin on the Dublin to Nice flight.") is not None
    alike = Hypothesis("How much is a SIM?", None, "sounds like: sin->sim", decoded=False, repaired_words=("sim",))
    assert accept(alike, near, "How much is a sin?", -0.2, "A SIM is $10.") is not None


def test_sound_alikes_repair_one_word_each_and_keep_its_capital():
    alikes = sound_alikes("Ruger says the plant will cast more", SoundIndex(KB_WORDS))
    assert [(text, r.meant) for text, r in alikes] == [
        ("Router says the plant will cast more", "router"),
        ("Ruger says the plan will cast more", "plan"),
        ("Ruger says the plant will cost more", "cost"),
    ]


ASKS = ["Operator.", "Representative, please."]


def test_a_request_for_a_person_that_fits_the_audio_better_than_the_hearing_is_proposed():
    # the hearing fits at -1.83, "Representative, please." at -1.47: a gain of 0.36 on the first decode's scale
    h = fitted_ask(ASKS, [-1.83, -5.9, -1.47], first_logprob=-1.5)
    assert h is not None and h.text == "Representative, please." and h.decoded
    assert h.avg_logprob == pytest.approx(-1.5 + 0.36)
    transfer = Decision(action=Action.transfer, message="Transferring you.", reasons=[Reason.human_requested])
    assert accept(h, transfer, "Repreneurative, clean.", -1.5, "") is not None
    assert "fits the audio" in h.how and "Representative, please." in h.how


def test_a_request_that_fits_worse_than_the_hearing_is_not_proposed():
    assert fitted_ask(ASKS, [-1.58, -4.1, -4.95], first_logprob=-0.9) is None
    assert fitted_ask(ASKS, [-1.58], first_logprob=-0.9) is None  # no fit for the asks: nothing to weigh
    assert fitted_ask([], [-1.0], first_logprob=-0.9) is None


def test_phrases_are_written_as_whisper_writes_speech():
    assert as_said("operator") == "Operator."
    assert as_said("can I speak to someone?") == "Can I speak to someone?"


def test_a_hearing_not_taken_is_listed_with_what_it_was_read_as():
    h = Hypothesis("Do you sell laptops?", -0.3, "second model", decoded=True, independent=True)
    line = weighed_line(h, _refusal())
    assert line.startswith("second model: 'Do you sell laptops?' as refuse") and line.endswith("not taken")


def test_a_three_letter_word_one_vowel_off_is_a_sound_alike():
    # Jaro-Winkler puts "cut"/"cat" exactly on the 0.80 line; floating point must not drop it
    assert SoundIndex(["cat", "dog"]).nearest("cut").meant == "cat"


def _asks_again(key: str = "pet_type") -> Decision:
    return Decision(action=Action.clarify, message="Sorry, I didn't catch that. Is it cat or dog?",
                    reasons=[Reason.missing_facet], missing_information=[key])


def test_an_unread_answer_to_our_clarify_is_heard_again():
    assert needs_rehearing(_asks_again(), asked=("pet_type",))
    # a first clarify, or one asking for a facet we had not asked for, is no misheard answer
    assert not needs_rehearing(_asks_again(), asked=())
    assert not needs_rehearing(_asks_again("plan"), asked=("pet_type",))


def test_a_hearing_of_an_answer_to_our_clarify_is_taken_only_when_it_is_read():
    first = "It's for my cut."
    h = Hypothesis("It's for my cat.", -0.5, "sounds like: cut->cat", decoded=False, repaired_words=("cat",))
    evidence = "A dental cleaning for a cat costs $295."
    why = accept(h, _answer(), first, -0.5, evidence, asked=("pet_type",))
    assert why == "sounds like: cut->cat: answer instead of asking again"
    assert accept(h, _asks_again(), first, -0.5, evidence, asked=("pet_type",)) is None
    assert accept(h, _refusal(), first, -0.5, evidence, asked=("pet_type",)) is None
    assert accept(h, _answer(), first, -0.5, "A dental cleaning for a dog costs $350.", asked=("pet_type",)) is None


def test_an_answer_to_a_few_doubtful_words_is_heard_again_but_not_a_clear_or_long_one():
    answer = Decision(action=Action.answer, message="Most stores open at 9am.", reasons=[Reason.grounded_answer])
    assert answered_fragment(answer, "The regular...", -0.91)
    assert not answered_fragment(answer, "The regular...", -0.2)  # heard clearly
    assert not answered_fragment(answer, "What are your regular opening hours on a Sunday?", -0.91)
    assert not answered_fragment(answer, "The regular...", None)  # typed
    assert not answered_fragment(_refusal(), "The regular...", -0.91)  # refusals are heard again anyway
