"""One conversation: its state (role, facets, the question a clarify waits on, the transcript) and
one turn, top to bottom: read → search → decide → recheck → remember → record."""
from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Collection

from pydantic import BaseModel, Field

from kb.models import Hit, RetrievalResult, RetrievalUnavailable
from kb.tokenize import content_terms

from . import recheck
from .baselines import BASELINES  # the naive designs, run side by side by the evaluation
from .compose import compose
from .decision import Action, Decision, Reason
from .evidence import GradedHit
from .gates import DANGER_INTENTS, GateOutcome, TurnFacts, decide
from .intents import heard_intents
from .language import asks_question, normalize_text, sentences
from .normalize import normalize_transcript
from .records import audit_line, handoff_package, now
from .session_state import SessionState
from .signals import (approval_action, disallowed_request, first_reading, human_requested, lexicon_words, small_talk,
                      stated_durations, stated_facets, without_facet_phrases)

if TYPE_CHECKING:  # the engine creates sessions; a session only calls back into it
    from .engine import Engine


class AsrSignal(BaseModel):
    """What the recogniser knew about its own transcript."""

    avg_logprob: float | None = None
    no_speech_prob: float | None = None
    low_confidence: bool = False
    raw_text: str = ""
    repair: str = ""  # how the first hearing became this text, when it did (a second decode, sound-alikes)
    weighed: list[str] = Field(default_factory=list)  # other hearings previewed and not taken, and as what


class TurnOutcome(BaseModel):
    model_config = {"arbitrary_types_allowed": True}

    decision: Decision
    question: str  # what the caller said this turn (the transcript, as recognised)
    said: str = ""  # the same after normalization (fillers dropped, mishearings repaired)
    normalized_question: str  # the question the policy decided on (a clarify's answer merged in)
    audit_id: str
    timings_ms: dict[str, float] = Field(default_factory=dict)
    retrieval: RetrievalResult | None = None
    gate: str = ""
    graded: list[GradedHit] = Field(default_factory=list)  # per hit: p and features
    evidence: list[str] = Field(default_factory=list)  # sections the decision rests on: quoted, asked from, handed over


@dataclass
class _Heard:
    """One turn as read: what was said, what is asked, and what kind of turn it is."""

    text: str
    low_conf: bool
    said: str
    social: str | None
    question: str
    context_only: dict[str, str]
    normalized: str
    query: str
    changes: list[str] = field(default_factory=list)
    avg_logprob: float | None = None  # how sure the recogniser was of a spoken turn (None: typed)

    @property
    def searched(self) -> bool:
        return not (self.low_conf or self.context_only or self.social)


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000


class Session:
    def __init__(self, engine: "Engine", role: str, facets: dict[str, str], session_id: str, policy: str):
        self.engine = engine
        self.role = role
        self.facets = facets
        self.session_id = session_id
        self.policy = policy
        self.pending_question: str | None = None  # the question a clarify is waiting on
        self.pending_facets: list[str] = []  # what that clarify asked for
        self.clarify_retries = 0  # answers to it that could not be read
        self.facet_retry = 0  # this turn: how many times the clarify's answer could not be read
        self.last_question: str | None = None  # the latest question decided, for context given after it
        self.topic_team: str | None = None  # the team of what the conversation is about, for transfers
        self.transcript: list[str] = []
        self.turns = 0
        self._turn_hits: dict[str, list[Hit]] = {}  # audit id -> this turn's evidence, for the recheck
        self._last_audit_id = ""

    # -- one turn ---------------------------------------------------------------------------
    def turn(self, text: str, *, asr: AsrSignal | None = None, faults: Collection[str] = (),
             timings_ms: dict[str, float] | None = None, record: bool = True) -> TurnOutcome:
        """Decide one caller turn. `record=False` is for `preview`: nothing is written."""
        text = text.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate or stray byte is a "?"
        timings = dict(timings_ms or {})
        t0 = time.perf_counter()
        self.turns += 1
        self.transcript.append(f"caller: {text}")
        heard = self._read(text, asr)
        timings["normalize"] = _ms(t0)
        result, error = self._search(heard, faults, timings)
        outcome, decision = self._decide(heard, result, error, faults, timings)
        audit_id, decision, rc = self._recheck(decision, result, timings)
        if decision.action == Action.transfer and record:
            decision = self._with_handoff(decision, outcome, heard.question, heard.normalized)
        self._remember(heard, decision, outcome)
        timings["total_policy_path"] = _ms(t0)
        if record:
            self.engine.audit.append(audit_line(
                audit_id=audit_id, session=self, text=text, normalized=heard.normalized, asr=asr, faults=faults,
                result=result, error=error, o=outcome, d=decision, rc=rc, timings=timings, changes=heard.changes))
        return TurnOutcome(decision=decision, question=text, said=heard.said, normalized_question=heard.normalized,
                           audit_id=audit_id, timings_ms=timings, retrieval=result,
                           gate=outcome.gate if outcome else self.policy, graded=outcome.graded if outcome else [],
                           evidence=[g.hit.locator for g in outcome.evidence] if outcome else [])

    def _read(self, text: str, asr: AsrSignal | None) -> _Heard:
        """Spoken and typed turns alike: fillers, spoken numbers, misheard KB words; then what the
        turn asks, with a clarify's answer merged into the question it answers."""
        low_conf = bool(asr and asr.low_confidence) or not text.strip()
        norm = None if low_conf else normalize_transcript(text, self.engine.vocabulary(self.role), self.engine.synonyms)
        said = norm.text if norm else text
        social = None if low_conf else small_talk(said)
        # a turn that asks for a person, an action or something refused, or says the caller is in danger,
        # is its own request, never the answer to a pending clarify ("just put me through to a person" is
        # not "personal"; "there's a smell of gas" after "business or residential?" is not asked again)
        logprob = asr.avg_logprob if asr else None  # None: typed
        own_request = not (low_conf or social) and self._is_request(said, text, avg_logprob=logprob)
        self.facet_retry = 0  # set again below only when this turn is an unread answer to our clarify
        question, context_only = (said, {}) if low_conf or social or own_request else self._effective_question(said)
        if social and social != "closing" and self.pending_question:
            social, question = None, self.pending_question  # "okay" while a clarify waits: ask it again
        normalized = normalize_text(question)
        return _Heard(text, low_conf, said, social, question, context_only, normalized, self._query(normalized),
                      norm.changes if norm else [], logprob)

    def _query(self, normalized: str) -> str:
        """The facets the caller states filter the documents; a clause that only states them ("I'm a
        business customer.") is left out of the search, or every business page would look like an
        answer. Within a clause ("the late fee for business accounts") they stay."""
        clauses = sentences(normalized)
        if len(clauses) < 2:
            return normalized
        vocab, idioms = self.engine.facet_phrases(self.role), self.engine.facet_idioms(self.role)
        return " ".join(c for c in clauses if content_terms(without_facet_phrases(c, vocab, idioms))) or normalized

    def _search(self, heard: _Heard, faults: Collection[str],
                timings: dict[str, float]) -> tuple[RetrievalResult | None, str | None]:
        eng = self.engine
        result, error = None, None
        t = time.perf_counter()
        if heard.searched:
            try:
                result = eng.retriever.search(heard.query, role=self.role, facets=self.facets,
                                              on_date=eng.on_date or dt.date.today(), k=eng.config.k, faults=faults)
            except RetrievalUnavailable as exc:
                error = exc.reason
        timings["retrieve"] = _ms(t)
        if result is not None and not result.lexical_only and result.hits:
            t = time.perf_counter()
            eng.soft_matcher().annotate(heard.normalized, result.hits)
            eng.focus_scores(heard.query, result.hits)
            timings["soft_match"] = _ms(t)
        return result, error

    def _decide(self, heard: _Heard, result: RetrievalResult | None, error: str | None, faults: Collection[str],
                timings: dict[str, float]) -> tuple[GateOutcome | None, Decision]:
        eng, cfg = self.engine, self.engine.config
        t = time.perf_counter()
        if self.policy != "gated":
            decision = BASELINES[self.policy](heard.normalized, result, cfg, {"text": heard.question})
            timings["policy"] = _ms(t)
            return None, decision.model_copy(update={"policy_version": f"{self.policy}-baseline",
                                                     "kb_version": eng.kb_version})
        outcome = decide(self._facts(heard, result, error, faults), cfg, eng.scorer)
        timings["policy"] = _ms(t)
        t = time.perf_counter()
        message, citations = compose(outcome, heard.question, cfg)
        decision = Decision(action=outcome.action, message=message, citations=citations,
                            missing_information=outcome.missing_information, reasons=outcome.reasons,
                            evidence_status=outcome.evidence_status, risk_level=outcome.risk_level,
                            confidence=round(outcome.confidence, 3), policy_version=eng.policy_version,
                            kb_version=eng.kb_version)
        timings["compose"] = _ms(t)
        return outcome, decision

    def _facts(self, heard: _Heard, result: RetrievalResult | None, error: str | None,
               faults: Collection[str]) -> TurnFacts:
        eng = self.engine
        action_hits: list[Hit] = []
        if result is not None and (m := first_reading(approval_action, (heard.normalized, heard.text), eng.config)):
            # route the action by its own words: "I'm going to sue" is closest in meaning to
            # whatever the caller was upset about, but the legal page names legal action
            try:
                action_hits = eng.retriever.search(lexicon_words(m), role=self.role, facets=self.facets,
                                                   on_date=eng.on_date or dt.date.today(), k=3, faults=faults).hits
            except RetrievalUnavailable:
                pass
        quiet = heard.low_conf or bool(heard.social)
        quiet_turn = bool(heard.social or heard.context_only or not heard.normalized.strip())  # nothing to read
        return TurnFacts(question=heard.normalized, result=result, retrieval_error=error,
                         caller_facets=dict(self.facets), kb_facets=eng.kb_facets(self.role),
                         teams=eng.teams(self.role), action_hits=action_hits, asr_low_confidence=heard.low_conf,
                         context_only=heard.context_only, small_talk=heard.social,
                         facet_retry=0 if quiet else self.facet_retry, pending_facets=list(self.pending_facets),
                         intents={} if quiet_turn else self._intents(heard.normalized, heard.avg_logprob),
                         urgency=None if quiet_turn else eng.urgency(heard.normalized),
                         conversation_team=self.topic_team, caller_words=heard.text,
                         today=eng.on_date or dt.date.today(),
                         unit_similarity=eng.retriever.units.similarity if eng.retriever.units else None)

    def _recheck(self, decision: Decision, result: RetrievalResult | None,
                 timings: dict[str, float]) -> tuple[str, Decision, recheck.RecheckResult]:
        audit_id = uuid.uuid4().hex[:16]
        hits = result.hits if result else []
        self._turn_hits[audit_id] = hits
        self._last_audit_id = audit_id
        for old in list(self._turn_hits)[:-4]:  # a recheck only ever concerns the latest turns
            del self._turn_hits[old]
        t = time.perf_counter()
        if self.policy == "gated":
            decision, rc = recheck.enforce(decision, hits, self.engine.kb_version)
        else:  # the naive baselines are measured as they are: without our recheck
            rc = recheck.RecheckResult(True, ["recheck skipped for baseline"])
        timings["recheck"] = _ms(t)
        return audit_id, decision, rc

    def _remember(self, heard: _Heard, decision: Decision, outcome: GateOutcome | None) -> None:
        # The clarify's question stays pending until the caller supplies what was missing.
        if decision.action == Action.clarify and Reason.missing_facet in decision.reasons:
            if heard.question != self.pending_question:
                self.clarify_retries = 0
            self.pending_question, self.pending_facets = heard.question, list(decision.missing_information)
        elif not heard.low_conf:
            self.pending_question, self.pending_facets, self.clarify_retries = None, [], 0
        # Context given later narrows the evidence; it cannot help a question nothing related to.
        if heard.searched and not (outcome and outcome.gate == "e_no_evidence"):
            self.last_question = heard.question
        if outcome is not None and (team := _topic_team(outcome, self.engine.config.thresholds.related_p)):
            self.topic_team = team
        self.transcript.append(f"agent: {decision.message}")

    # -- reading the caller -----------------------------------------------------------------
    def _read_facets(self, text: str) -> dict[str, str]:
        """Facets this turn states: the KB's words for them, else their meaning. Our clarifying
        question's keys are read more readily than facets the caller volunteers."""
        eng = self.engine
        new = stated_facets(text, eng.facet_phrases(self.role), eng.facet_idioms(self.role))
        asked = [k for k in self.pending_facets if k not in new] if self.pending_question else []
        new.update(stated_durations(text, {k: v for k, v in eng.kb_facets(self.role).items() if k in asked}))
        asked = [k for k in asked if k not in new]
        reader = eng.facet_reader(self.role)
        if reader is None:
            return new
        if asked:
            new.update(reader.read(text, asked, prompted=True))
        unasked = [k for k in eng.kb_facets(self.role) if k not in new and k not in self.facets and k not in asked]
        if unasked:
            new.update(reader.read(text, unasked, prompted=False))
        return new

    def _intents(self, text: str, avg_logprob: float | None) -> dict[str, float]:
        return heard_intents(self.engine.intents(text), text, avg_logprob)

    def _is_request(self, *texts: str, avg_logprob: float | None = None) -> bool:
        """Whether the turn, as repaired or as said, asks for a person, an action or something refused,
        or reads as a caller in danger or distress."""
        cfg, texts = self.engine.config, tuple(dict.fromkeys(texts))
        own = DANGER_INTENTS | {"human_request"}
        return any(first_reading(read, texts, cfg) for read in (human_requested, approval_action, disallowed_request)) \
            or any(own & set(self._intents(t, avg_logprob)) for t in texts)

    def _effective_question(self, text: str) -> tuple[str, dict[str, str]]:
        """Fill facets the caller states; a reply to a clarify continues the pending question, and
        context given after any other reply ("it's a personal account") re-asks the last question.
        Returns the question to decide, and the facets stated when the turn is context with no
        question yet to apply it to."""
        new = self._read_facets(text)
        self.facets.update(new)
        vocab, idioms = self.engine.facet_phrases(self.role), self.engine.facet_idioms(self.role)
        left = len(content_terms(without_facet_phrases(text, vocab, idioms)))
        asks = asks_question(text)
        if self.pending_question:
            answered = any(k in new for k in self.pending_facets) if self.pending_facets else bool(new)
            if answered and (not asks or left <= 3):
                return self.pending_question, {}  # "it's for the business": the clarify's answer
            if not new and not asks:  # an answer we could not read: ask once more, then hand over
                self.clarify_retries += 1
                self.facet_retry = self.clarify_retries
                return self.pending_question, {}
        if not new:
            return text, {}
        # Unasked for, context applies to the last question only when it asks nothing itself: "oh
        # wait, I'm on a monthly plan now", "what about prepaid?", but not "I'm on prepaid, how do I top up?"
        if self.last_question and not asks and left <= 3:
            return self.last_question, {}
        return text, (new if not asks and left <= 1 else {})

    # -- around a turn ----------------------------------------------------------------------
    def preview(self, text: str, *, asr: AsrSignal | None = None) -> Decision:
        """What `turn` would decide now, leaving the conversation and the logs untouched.

        The voice path calls it at a pause in the caller's speech to render the reply's first
        sentence early; at the real end of turn it runs `turn` and uses the early audio only if the
        message is identical. A previewed transfer carries no handoff (none is stored)."""
        return self.preview_turn(text, asr=asr).decision

    def preview_turn(self, text: str, *, asr: AsrSignal | None = None) -> TurnOutcome:
        """`preview` with what the decision rests on: weighing another hearing of the same audio."""
        state, hits, last = self.snapshot(), dict(self._turn_hits), self._last_audit_id
        try:
            return self.turn(text, asr=asr, record=False)
        finally:
            self.restore(state)
            self._turn_hits, self._last_audit_id = hits, last

    def snapshot(self) -> SessionState:
        """The conversation state as data: for `restore`, a session file, a call's checkpoint."""
        return SessionState(session_id=self.session_id, role=self.role, facets=self.facets,
                            pending_question=self.pending_question, pending_facets=self.pending_facets,
                            clarify_retries=self.clarify_retries, last_question=self.last_question,
                            topic_team=self.topic_team, transcript=self.transcript, turns=self.turns)

    def restore(self, state: SessionState, *, superseded: str | None = None, reason: str = "") -> None:
        """Put the conversation back as `snapshot` found it. With `superseded` (an audit id),
        a turn decided since then is void (the voice path ended it too early and the caller went
        on): its audit line stays, and a `turn_superseded` line says why it no longer counts."""
        if (state.session_id, state.role) != (self.session_id, self.role):
            raise ValueError(f"state of conversation {state.session_id} ({state.role}) given to "
                             f"{self.session_id} ({self.role})")
        self.facets, self.pending_question = dict(state.facets), state.pending_question
        self.pending_facets, self.clarify_retries = list(state.pending_facets), state.clarify_retries
        self.last_question, self.topic_team = state.last_question, state.topic_team
        self.transcript, self.turns = list(state.transcript), state.turns
        if superseded:
            self.engine.audit.append({"kind": "turn_superseded", "audit_id": superseded,
                                      "session": self.session_id, "reason": reason, "ts": now()})

    def recheck_before_speech(self, decision: Decision, audit_id: str | None = None) -> Decision:
        """Run the citation/number recheck again on the final text, right before TTS."""
        hits = self._turn_hits.get(audit_id or self._last_audit_id, [])
        checked, res = recheck.enforce(decision, hits, self.engine.kb_version)
        if not res.ok:
            self.engine.audit.append({"kind": "pre_tts_recheck_failed", "audit_id": audit_id,
                                      "session": self.session_id, "problems": res.problems, "ts": now()})
        return checked

    def degrade_to_transfer(self, decision: Decision, reason: Reason, message: str, question: str) -> Decision:
        """When the turn cannot be spoken as decided (the TTS worker died): hand the caller over,
        with the package stored first. A transfer that already has its package is kept."""
        if decision.action == Action.transfer and decision.handoff is not None:
            return decision.model_copy(update={"message": message})
        d = Decision(action=Action.transfer, message=message, reasons=[reason],
                     evidence_status=decision.evidence_status, risk_level=decision.risk_level,
                     policy_version=decision.policy_version or self.engine.policy_version,
                     kb_version=self.engine.kb_version)
        d = self._with_handoff(d, None, question, normalize_text(question))
        self.engine.audit.append({"kind": "degraded_to_transfer", "session": self.session_id, "reason": reason.value,
                                  "from_action": decision.action.value, "handoff": d.handoff.id if d.handoff else None,
                                  "ts": now()})
        return d

    def record_timings(self, audit_id: str, timings: dict[str, float]) -> None:
        """Late stage timings (ASR, TTS first audio) appended to the turn's audit trail."""
        self.engine.audit.append({"kind": "timings", "audit_id": audit_id, "session": self.session_id,
                                  "timings_ms": {k: round(v, 2) for k, v in timings.items()}})

    def _with_handoff(self, d: Decision, o: GateOutcome | None, question: str, normalized: str) -> Decision:
        """Store the context package durably before the caller hears 'transferring'."""
        handoff = handoff_package(d, o, question=question, normalized=normalized, transcript=self.transcript,
                                  facets=self.facets, role=self.role, default_team=self.engine.config.default_team,
                                  earlier=self.last_question)
        self.engine.handoffs.append({"session": self.session_id, **handoff.model_dump()})
        return d.model_copy(update={"handoff": handoff})


def _topic_team(outcome: GateOutcome, related_p: float) -> str | None:
    """The team of what this turn was about: its evidence, else the section most likely to answer
    it, when that is related at all."""
    about = outcome.evidence or [g for g in outcome.graded[:1] if g.active and g.p >= related_p]
    return next((g.hit.handoff_team for g in about if g.hit.handoff_team), None)
