"""The full text path on the sample KB: real retrieval (BM25 + MiniLM), gates, compose, recheck,
durable handoffs and the audit log."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from kb.units import units_of_text as sentences
from policy.decision import Action, Citation, Decision, Reason
from policy.engine import Engine

pytestmark = pytest.mark.unit  # the real engine on the sample KB: ~2 s with its embeddings cached
DATE = dt.date(2026, 11, 29)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return Engine.load("fixtures/kb", state_dir=tmp_path_factory.mktemp("state"), on_date=DATE)


def ask(engine, q, **kw):
    return engine.session(**kw).turn(q).decision


def test_answer_is_grounded_and_cited(engine):
    d = ask(engine, "How do I factory reset my home router?")
    assert d.action == Action.answer
    assert d.citations and d.citations[0].doc_id == "router-factory-reset"
    assert "version" in d.message and d.kb_version == engine.kb_version and d.policy_version


def test_business_refund_never_answered_with_personal_rule(engine):
    personal = engine.kb.docs["refund-personal-2026"]
    assert personal.applies_to.get("customer_type") == "personal"
    d = ask(engine, "I'm a business customer. Can I get a refund if I cancel my annual plan early?")
    assert not any(c.doc_id.startswith("refund-personal") for c in d.citations)
    assert "5 to 10 business days" not in d.message


def test_clarify_then_answer_continues_the_pending_question(engine):
    s = engine.session()
    first = s.turn("Can I get a refund if I cancel my annual plan early?").decision
    assert first.action == Action.clarify and first.missing_information == ["customer_type"]
    second = s.turn("I'm a personal customer.").decision
    assert second.action == Action.answer
    assert second.citations[0].doc_id == "refund-personal-2026"
    assert s.facets == {"customer_type": "personal"}


def test_the_page_a_clarify_was_asked_for_answers_once_the_caller_says_which_applies(engine):
    # "how do I check my data" fits each plan's page only loosely (below the answer threshold): we
    # asked which plan because such a page was likely to answer; told "pay as you go", it answers
    s = engine.session()
    first = s.turn("How do I check how much data I've got left?").decision
    assert first.action == Action.clarify and first.missing_information == ["plan_type"]
    second = s.turn("I'm on pay as you go.").decision
    assert second.action == Action.answer and second.citations[0].doc_id == "data-topup-prepaid"
    assert s.snapshot().pending_facets == []
    # once answered, the clarify gives no such benefit: a new question starts from nothing
    assert s.turn("Do you deliver pizza?").decision.action == Action.refuse


def test_a_request_for_a_person_after_an_unread_clarify_answer_transfers(engine):
    """The caller's reply to our clarify could not be read, so we asked again; a request for a
    person next is a request for a person, not another unread reply."""
    s = engine.session()
    assert s.turn("Can I get a refund if I cancel my annual plan early?").decision.action == Action.clarify
    again = s.turn("Hmm, it's the one my brother set up for me.").decision
    assert again.action == Action.clarify and again.message.startswith("Sorry")
    d = s.turn("Right, can I speak to someone about it?").decision
    assert d.action == Action.transfer and Reason.human_requested in d.reasons


def test_context_before_any_question_asks_for_the_question_and_is_kept(engine):
    s = engine.session()
    d = s.turn("It's a personal account.").decision  # searched, it would go to the privacy team
    assert d.action == Action.clarify and d.reasons == [Reason.question_needed]
    assert "customer type is personal" in d.message and not d.citations
    audit = [json.loads(x) for x in (engine.state_dir / "audit.jsonl").read_text().splitlines()][-1]
    assert audit["gate"] == "context_only" and audit["retrieval"]["hits"] == []  # nothing was searched
    assert audit["signals"]["context"] == {"customer_type": "personal"}
    d = s.turn("How much does a replacement SIM cost?").decision
    assert d.action == Action.answer and d.citations[0].doc_id == "sim-replacement-personal"


def test_context_after_an_answer_re_asks_the_last_question(engine):
    s = engine.session(facets={"plan_type": "prepaid"})
    first = s.turn("How do I turn on roaming?").decision
    assert first.action == Action.answer and first.citations[0].doc_id == "roaming-activation-prepaid"
    d = s.turn("Oh wait, I'm on a monthly plan now.").decision
    assert d.action == Action.answer and d.citations[0].doc_id == "roaming-activation-monthly"
    assert s.facets == {"plan_type": "monthly"}
    # context that comes with a question of its own starts that question
    d = s.turn("I'm a business customer, how much is a replacement SIM?").decision
    assert d.action == Action.answer and d.citations[0].doc_id == "sim-replacement-business"


def test_a_turn_nothing_answers_is_not_what_later_context_applies_to(engine):
    s = engine.session()
    assert s.turn("How much does a replacement SIM cost?").decision.action == Action.clarify
    assert s.turn("Do you deliver pizza?").decision.action == Action.refuse
    d = s.turn("I'm a business customer.").decision  # about the SIM, not about the pizza
    assert d.action == Action.answer and d.citations[0].doc_id == "sim-replacement-business"


def test_greeting_thanks_and_goodbye_are_replied_to_not_refused(engine):
    s = engine.session()
    d = s.turn("Hello?").decision
    assert d.action == Action.clarify and d.reasons == [Reason.question_needed] and "What can I help" in d.message
    assert s.turn("How much does a replacement SIM cost?").decision.action == Action.clarify
    again = s.turn("Okay.").decision  # the clarify still waits for its answer
    assert again.reasons == [Reason.missing_facet] and again.missing_information == ["customer_type"]
    assert s.turn("Business.").decision.citations[0].doc_id == "sim-replacement-business"
    assert s.turn("Thanks!").decision.message.startswith("You're welcome.")
    assert s.turn("No, that's all, bye.").decision.message == "Thank you for calling. Goodbye!"


def test_business_days_does_not_make_the_caller_a_business_customer(engine):
    s = engine.session()
    d = s.turn("How many business days does the refund take if I cancel my annual plan?").decision
    assert d.action == Action.clarify and d.missing_information == ["customer_type"] and s.facets == {}


def test_a_clause_that_only_states_who_the_caller_is_is_not_searched(engine):
    # searched, "business customer" made the business SIM page answer a question it says nothing about
    s = engine.session()
    o = s.turn("I'm a business customer. How many lines can I have?")
    assert o.decision.action != Action.answer and s.facets == {"customer_type": "business"}
    assert o.retrieval.query == "how many lines can i have"  # a closing "?" never decides anything
    o = s.turn("I'm a business customer, how much is a replacement SIM?")
    assert o.decision.action == Action.answer and "free of charge" in o.decision.message


def test_human_request_transfers_with_durable_handoff(engine):
    s = engine.session(facets={"customer_type": "personal"})
    d = s.turn("How do I reset my router? Actually, can I talk to a real person?").decision
    assert d.action == Action.transfer and d.handoff is not None
    stored = [json.loads(line) for line in (engine.state_dir / "handoffs.jsonl").read_text().splitlines()]
    assert stored[-1]["id"] == d.handoff.id
    assert stored[-1]["question"].startswith("How do I reset") and stored[-1]["caller_facets"] == {"customer_type": "personal"}
    assert stored[-1]["transcript"][0].startswith("caller:")


def test_a_bare_request_for_a_person_goes_to_the_team_of_the_conversation(engine):
    """'I want to talk to a person' says nothing of the topic: the call goes to the team of what the
    caller was asking about, and only with no topic yet to the default team."""
    for question, team in [("How do I set up my voicemail?", "tech_support"), ("What is the late payment fee?", "billing")]:
        s = engine.session()
        s.turn(question)
        d = s.turn("I want to talk to a person").decision
        assert d.action == Action.transfer and d.handoff.team == team, question
        assert d.handoff.summary == (f'The caller asked: "I want to talk to a person". Before that: "{question}". '
                                     "Transferred because the caller asked for a person.")
        assert d.handoff.evidence == []  # this turn's search found nothing it was about
    fresh = engine.session().turn("I want to talk to a person").decision
    assert fresh.handoff.team == engine.config.default_team


def test_high_risk_topic_transfers_to_its_team(engine):
    d = ask(engine, "I'd like to close my account and have all my personal data deleted")
    assert d.action == Action.transfer and d.handoff.team == "privacy"


def test_an_approval_action_goes_to_the_team_its_own_words_name(engine):
    # "sue" is closest in meaning to whatever upset the caller (the SIM-swap fraud page scores
    # highest), but legal action is the legal team's: the lexicon pattern's words find its page
    d = ask(engine, "I'm going to sue Northbeam over this.")
    assert d.action == Action.transfer and d.handoff.team == "legal"
    # a pattern made of everyday verbs ("sign me up") names no page; routing stays as it was
    d = ask(engine, "Sign me up for the International Saver add-on.")
    assert d.action == Action.transfer and d.handoff.team != "fraud"


def test_restricted_document_never_reaches_a_public_caller(engine):
    restricted = [doc for doc in engine.kb.docs.values() if "public" not in doc.acl]
    assert restricted
    for doc in restricted:
        sections = [sec for sec in engine.kb.sections if sec.doc_id == doc.id]
        # Ask with the restricted document's own words: the best possible match for it.
        question = sections[0].heading + " " + " ".join(sections[0].text.split()[:8])
        out = engine.session().turn(question)
        text = json.dumps(out.decision.public_dict())
        assert doc.id not in text
        assert all(s not in text for sec in sections for s in sentences(sec.text)[1:])
        assert all(h.doc_id != doc.id for h in out.retrieval.hits)
    agent = engine.session(role="agent").turn(restricted[0].title)
    assert any(h.doc_id == restricted[0].id for h in agent.retrieval.hits)


def test_retrieval_fault_refuses_as_system_limitation(engine):
    d = engine.session().turn("How do I reset my router?", faults=["retrieval_unavailable"]).decision
    assert d.action == Action.refuse and d.reasons == [Reason.retrieval_unavailable]
    assert "not responding" in d.message


def test_embedding_fault_falls_back_to_lexical(engine):
    d = engine.session().turn("How do I factory reset my home router?", faults=["embedding_unavailable"]).decision
    assert d.action == Action.answer and Reason.embedding_unavailable in d.reasons


def test_lexical_fallback_weighs_each_section_against_the_best_covered(engine):
    """Without the dense model a section's share of the question's words is no probability: one that
    says only the common words ("opening", "hours") must not route the call to a critical page."""
    out = engine.session().turn("What are the store opening hours on Sunday?", faults=["embedding_unavailable"])
    assert out.decision.action == Action.answer, out.decision.reasons
    best, *rest = out.graded
    assert best.p == 1.0 and all(g.p < 0.35 for g in rest if g.hit.risk == "critical")


def test_audit_line_explains_the_decision(engine):
    out = engine.session().turn("How do I set up voicemail?")
    lines = [json.loads(x) for x in (engine.state_dir / "audit.jsonl").read_text().splitlines()]
    rec = next(r for r in lines if r.get("audit_id") == out.audit_id)
    for key in ("signals", "gate", "policy_version", "kb_version", "timings_ms", "decision", "retrieval"):
        assert key in rec
    assert rec["retrieval"]["hits"] and {"retrieve", "policy", "compose", "recheck"} <= set(rec["timings_ms"])


def test_pre_tts_recheck_rejects_citation_outside_this_turn(engine):
    s = engine.session()
    out = s.turn("How do I factory reset my home router?")
    forged = out.decision.model_copy(update={"citations": [Citation(doc_id="refund-personal-2026", section="x")]})
    checked = s.recheck_before_speech(forged, out.audit_id)
    assert checked.action == Action.refuse and Reason.citation_not_in_evidence in checked.reasons


def test_pre_tts_recheck_rejects_answer_without_citation(engine):
    s = engine.session()
    out = s.turn("How do I factory reset my home router?")
    checked = s.recheck_before_speech(out.decision.model_copy(update={"citations": []}), out.audit_id)
    assert checked.action == Action.refuse


def test_pre_tts_recheck_rejects_unsupported_number(engine):
    s = engine.session()
    out = s.turn("How do I factory reset my home router?")
    assert out.decision.action == Action.answer
    tampered = out.decision.model_copy(update={"message": out.decision.message + " It costs $49."})
    checked = s.recheck_before_speech(tampered, out.audit_id)
    assert checked.action == Action.refuse and Reason.unsupported_claim in checked.reasons


def test_pre_tts_recheck_rejects_changed_kb_version(engine):
    s = engine.session()
    out = s.turn("How do I factory reset my home router?")
    stale = out.decision.model_copy(update={"kb_version": "kb-old"})
    assert s.recheck_before_speech(stale, out.audit_id).action == Action.refuse


def test_decision_json_round_trips_with_synonyms():
    d = Decision.model_validate({"action": "abstain", "message": "x"})
    assert d.action == Action.refuse
    assert Decision.model_validate({"action": "handoff", "message": "x"}).action == Action.transfer


def test_preview_changes_nothing_and_matches_the_turn(engine):
    s = engine.session()
    audit = engine.state_dir / "audit.jsonl"
    before = audit.read_text() if audit.exists() else ""
    handoffs = engine.state_dir / "handoffs.jsonl"
    h_before = handoffs.read_text() if handoffs.exists() else ""
    p1 = s.preview("Can I get a refund if I cancel my annual plan early?")
    p2 = s.preview("I want to speak to a real person")
    assert p1.action == Action.clarify and p2.action == Action.transfer and p2.handoff is None
    assert (audit.read_text() if audit.exists() else "") == before
    assert (handoffs.read_text() if handoffs.exists() else "") == h_before
    assert s.pending_question is None and s.transcript == [] and s.turns == 0
    real = s.turn("Can I get a refund if I cancel my annual plan early?").decision
    assert real.message == p1.message and s.pending_question


def test_a_superseded_turn_is_undone_but_stays_in_the_audit_log(engine):
    s = engine.session()
    state = s.snapshot()
    cut = s.turn("Can I get a refund if I cancel my annual plan early?")  # the voice path ended it early
    assert s.pending_question and s.turns == 1
    s.restore(state, superseded=cut.audit_id, reason="caller_continued")
    assert s.pending_question is None and s.turns == 0 and s.transcript == []
    lines = [json.loads(line) for line in (engine.state_dir / "audit.jsonl").read_text().splitlines()]
    assert any(r.get("audit_id") == cut.audit_id and r.get("decision") for r in lines)  # still there
    assert lines[-1]["kind"] == "turn_superseded" and lines[-1]["audit_id"] == cut.audit_id
    whole = s.turn("Can I get a refund if I cancel my annual plan early? I'm a personal customer.").decision
    assert whole.action == Action.answer


def test_unknown_role_is_an_error_not_public_access(engine):
    from policy.engine import UnknownRole

    with pytest.raises(UnknownRole, match="agnet"):
        engine.session(role="agnet")


def test_warmup_loads_the_first_turn_s_lazy_parts_and_records_nothing(tmp_path):
    state = tmp_path / "state"
    e = Engine.load("fixtures/kb", state_dir=state, on_date=DATE)
    e.warmup()
    assert e._intent_memo or not e.config.intents  # the intent examples are embedded
    assert not [p for p in state.rglob("*") if p.is_file()]  # no audit line, no handoff


def test_a_caller_in_distress_goes_to_a_person(engine):
    said = "A man outside keeps shouting that he'll hurt me, I'm really frightened."
    assert engine.session().turn(said).decision.action.value == "transfer"
    assert engine.session().turn("How do I set up voicemail?").decision.action.value != "transfer"



def test_a_clarify_answered_in_a_run_on_transcript_is_read(tmp_path):
    """"It's for the shop, I run a hairdresser's" said without the comma is still a business customer."""
    e = Engine.load("fixtures/domains/energy/kb", state_dir=tmp_path, on_date=DATE)
    s = e.session()
    assert s.turn("How much is the standing charge on the gas?").decision.missing_information == ["customer_type"]
    assert s.turn("It's for the shop I run a hairdresser's").decision.action.value == "answer"
    assert s.facets == {"customer_type": "business"}


def test_distress_said_in_a_run_on_transcript_still_goes_to_a_person(engine):
    """ASR may write no punctuation: the short "I'm scared" must not drown in the long clause before it."""
    said = "Some lads on my estate keep shouting racist stuff at me and said they'll put my windows in I'm scared to go out"
    assert engine.session().turn(said).decision.action.value == "transfer"
    assert "distress" in engine.intents(said)  # by the examples, from the piece cut before "I'm"
    assert "distress" not in engine.intents(said.replace("I'm scared to go out", "what do I do"))


def test_the_kbs_synonyms_let_a_caller_say_it_in_their_own_words(engine, tmp_path):
    import shutil

    q = "When does my invoice get generated each month?"
    assert ask(engine, q).action == Action.refuse  # the KB says "bill", never "invoice"
    kb = tmp_path / "kb"
    shutil.copytree("fixtures/kb", kb)
    with open(kb / "_policy.yaml", "a", encoding="utf-8") as f:
        f.write('\nsynonyms:\n  bill: ["invoice", "statement"]\n  account holder: ["person"]\n')
    own = Engine.load(kb, state_dir=tmp_path / "state", on_date=DATE)
    d = own.session().turn(q).decision
    assert d.action == Action.answer and d.citations[0].doc_id == "bill-due-dates"
    audit = [json.loads(x) for x in (own.state_dir / "audit.jsonl").read_text().splitlines()][-1]
    assert "synonym: invoice -> bill" in audit["normalization"]
    # a synonym never hides a request for a person: the turn as said is read for one too
    assert own.session().turn("Can I speak to a real person?").decision.action == Action.transfer
