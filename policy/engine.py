"""One turn, top to bottom: normalize → retrieve → gates → compose → recheck → record.

`Engine` holds what is shared (KB, indexes, policy config, durable stores); `Session` holds one
conversation (role, facets, the question a clarify is waiting on, the transcript). Every entry
point (ask, eval, replay, mic, the websocket server) drives a Session."""
from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from pathlib import Path
from typing import Any, Collection

from pydantic import BaseModel, Field

from kb.loader import KnowledgeBase, load_kb, visible_to
from kb.models import Hit, RetrievalResult, RetrievalUnavailable
from kb.retrieve import Retriever
from kb.soft_match import SoftMatcher
from kb.tokenize import content_terms

from . import recheck
from .compose import compose
from .config import PolicyConfig, load_policy_config
from .decision import Action, Decision, EvidenceQuote, Handoff, Reason
from .facets import FacetReader, scoped_context
from .intents import IntentReader
from .gates import GateOutcome, TurnFacts, decide
from .language import asks_question, normalize_text, question_focus
from .scorer import Scorer, load_scorer
from .normalize import normalize_transcript
from .signals import (approval_action, disallowed_request, facet_idioms, facet_vocabulary, human_requested,
                      lexicon_words, small_talk, stated_facets, without_facet_phrases)
from .store import JsonlStore

POLICIES = ("gated", "threshold", "minimal")


class UnknownRole(ValueError):
    pass


class AsrSignal(BaseModel):
    """What the recogniser knew about its own transcript."""

    avg_logprob: float | None = None
    no_speech_prob: float | None = None
    low_confidence: bool = False
    raw_text: str = ""


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
    graded: list[Any] = Field(default_factory=list)  # evidence.GradedHit per hit: p and features


class Engine:
    def __init__(self, kb: KnowledgeBase, retriever: Retriever, config: PolicyConfig,
                 state_dir: str | Path = "var", on_date: dt.date | None = None, progress: bool = False,
                 scorer: Scorer | None = None):
        self.kb = kb
        self.scorer = scorer or load_scorer(kb.root)  # whether a section answers (evaluation/train.py)
        self.retriever = retriever
        self.config = config
        self.state_dir = Path(state_dir)
        self.on_date = on_date  # None: today, read per turn (tests fix it)
        self.handoffs = JsonlStore(self.state_dir / "handoffs.jsonl")
        self.audit = JsonlStore(self.state_dir / "audit.jsonl")
        self._facets_by_role: dict[str, dict[str, set[str]]] = {}
        self._soft: SoftMatcher | None = None
        self._progress = progress  # progress bars while embedding (CLI use)
        self._vocab: dict[str, list[str]] = {}
        self._roles: set[str] | None = None
        # per role, from the KB and the config, which do not change under a running engine
        self._teams: dict[str, set[str]] = {}
        self._facet_phrases: dict[str, dict[str, dict[str, list[str]]]] = {}
        self._facet_idioms: dict[str, dict[str, set[str]]] = {}
        self._facet_readers: dict[str, FacetReader | None] = {}
        self._intents: IntentReader | None = None
        self._intent_memo: dict[str, dict[str, float]] = {}

    @classmethod
    def load(cls, kb_dir: str | Path, *, policy_file: str | Path | None = None, state_dir: str | Path = "var",
             dense: bool = True, on_date: dt.date | None = None, progress: bool = False) -> "Engine":
        kb = load_kb(kb_dir)
        config = load_policy_config(policy_file, kb_dir=kb_dir)
        retriever = Retriever(kb, dense=dense, progress=progress)
        retriever.attach_units(progress)
        return cls(kb, retriever, config, state_dir, on_date, progress)

    @property
    def kb_version(self) -> str:
        return self.kb.kb_version

    @property
    def policy_version(self) -> str:
        return f"{self.config.fingerprint()}/{self.scorer.fingerprint}"

    def soft_matcher(self) -> SoftMatcher:
        """Word-level synonym matching for coverage; shares the retriever's embedding model. The
        KB's own words are embedded once (cached on disk with the KB version)."""
        if self._soft is None:
            soft = SoftMatcher(self.retriever.embed, threshold=self.config.thresholds.soft_match)
            if self.retriever.model_id:
                soft.prime([f"{s.heading} {s.text} {self.kb.docs[s.doc_id].title}" for s in self.kb.sections],
                           self.kb.kb_version, self.retriever.model_id, progress=self._progress)
            self._soft = soft
        return self._soft

    def with_config(self, config: PolicyConfig) -> "Engine":
        other = Engine(self.kb, self.retriever, config, self.state_dir, self.on_date, scorer=self.scorer)
        other._soft = self._soft
        return other

    def vocabulary(self, role: str = "public") -> list[str]:
        """KB terms this role may see: ASR biasing and repair of misheard words."""
        if role not in self._vocab:
            self._vocab[role] = self.retriever.vocabulary(role)
        return self._vocab[role]

    def kb_facets(self, role: str) -> dict[str, set[str]]:
        """Facet values in the documents this role may see (restricted docs reveal nothing)."""
        if role not in self._facets_by_role:
            facets: dict[str, set[str]] = {}
            for doc in self.kb.docs.values():
                if visible_to(doc, role):
                    for k, v in doc.applies_to.items():
                        facets.setdefault(k, set()).add(str(v))
            self._facets_by_role[role] = facets
        return self._facets_by_role[role]

    def roles(self) -> set[str]:
        """Roles this KB knows: `public` plus every role named in a document's acl."""
        if self._roles is None:
            self._roles = {"public"} | {r for d in self.kb.docs.values() for r in d.acl}
        return self._roles

    def teams(self, role: str) -> set[str]:
        """Handoff teams named by the documents this role may see."""
        if role not in self._teams:
            self._teams[role] = {d.handoff_team for d in self.kb.docs.values()
                                 if d.handoff_team and visible_to(d, role)}
        return self._teams[role]

    def facet_phrases(self, role: str) -> dict[str, dict[str, list[str]]]:
        """How a caller of this role may state each facet value (KB values + policy synonyms)."""
        if role not in self._facet_phrases:
            self._facet_phrases[role] = facet_vocabulary(self.config, self.kb_facets(role))
        return self._facet_phrases[role]

    def facet_idioms(self, role: str) -> dict[str, set[str]]:
        """One-word facet phrases in the KB's own compounds ("business days"): not caller context."""
        if role not in self._facet_idioms:
            texts = [(self.kb.docs[s.doc_id].applies_to, f"{s.heading}. {s.text}") for s in self.kb.sections
                     if visible_to(self.kb.docs[s.doc_id], role)]
            self._facet_idioms[role] = facet_idioms(self.facet_phrases(role), texts)
        return self._facet_idioms[role]

    def facet_reader(self, role: str) -> FacetReader | None:
        """Reads facets stated in everyday words (needs the dense model; None without it)."""
        if role not in self._facet_readers:
            reader = None
            if self.retriever.model_id and self.kb_facets(role):
                docs = [(self.kb.docs[s.doc_id].applies_to, f"{self.kb.docs[s.doc_id].title}. {s.heading}")
                        for s in self.kb.sections if visible_to(self.kb.docs[s.doc_id], role)]
                reader = FacetReader(self.facet_phrases(role), scoped_context(docs), self.retriever.embed)
            self._facet_readers[role] = reader
        return self._facet_readers[role]

    def focus_scores(self, question: str, hits: list[Hit]) -> None:
        """Score each hit's units against the clause that asks, when the turn says more than that."""
        units = self.retriever.units
        focus = question_focus(question)
        if units is None or focus is None:
            return
        vec = self.retriever.embed([focus])[0]
        for h in hits:
            h.focus_scores = units.scores(h.locator, vec)

    def intents(self, text: str) -> dict[str, float]:
        """Intents this turn has by meaning (policy file `intents`); none without the dense model."""
        if not self.retriever.model_id or not self.config.intents:
            return {}
        if self._intents is None:
            self._intents = IntentReader(self.config.intents, self.retriever.embed)
        if text not in self._intent_memo:  # a turn asks twice: before and after its facets are read
            if len(self._intent_memo) > 256:
                self._intent_memo.clear()
            self._intent_memo[text] = self._intents.detect(text)
        return self._intent_memo[text]

    def session(self, role: str = "public", facets: dict[str, str] | None = None,
                session_id: str | None = None, policy: str = "gated") -> "Session":
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
        if role not in self.roles():
            # A typo must not silently become public access (or look like "no information").
            raise UnknownRole(f"unknown role {role!r}; this knowledge base knows: {', '.join(sorted(self.roles()))}")
        return Session(self, role, dict(facets or {}), session_id or uuid.uuid4().hex[:12], policy)


class Session:
    def __init__(self, engine: Engine, role: str, facets: dict[str, str], session_id: str, policy: str):
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
        self.transcript: list[str] = []
        self.turns = 0
        self._turn_hits: dict[str, list[Hit]] = {}  # audit id -> this turn's evidence, for the recheck
        self._last_audit_id = ""

    # -- state ------------------------------------------------------------------------------
    def _read_facets(self, text: str) -> dict[str, str]:
        """Facets this turn states: the KB's words for them, else their meaning. Our clarifying
        question's keys are read more readily than facets the caller volunteers."""
        eng = self.engine
        new = stated_facets(text, eng.facet_phrases(self.role), eng.facet_idioms(self.role))
        reader = eng.facet_reader(self.role)
        if reader is None:
            return new
        asked = [k for k in self.pending_facets if k not in new] if self.pending_question else []
        if asked:
            new.update(reader.read(text, asked, prompted=True))
        unasked = [k for k in eng.kb_facets(self.role) if k not in new and k not in self.facets and k not in asked]
        if unasked:
            new.update(reader.read(text, unasked, prompted=False))
        return new

    def _is_request(self, text: str) -> bool:
        cfg = self.engine.config
        return bool(human_requested(text, cfg) or approval_action(text, cfg) or disallowed_request(text, cfg)
                    or "human_request" in self.engine.intents(text))

    def _effective_question(self, text: str) -> tuple[str, dict[str, str]]:
        """Fill facets the caller states; a reply to a clarify continues the pending question, and
        context given after any other reply ("it's a personal account") re-asks the last question.
        Returns the question to decide, and the facets stated when the turn is context with no
        question yet to apply it to."""
        new = self._read_facets(text)
        self.facets.update(new)
        self.facet_retry = 0
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

    # -- one turn ---------------------------------------------------------------------------
    def turn(self, text: str, *, asr: AsrSignal | None = None, faults: Collection[str] = (),
             timings_ms: dict[str, float] | None = None, record: bool = True) -> TurnOutcome:
        """Decide one caller turn. `record=False` is for `preview`: nothing is written."""
        eng, cfg = self.engine, self.engine.config
        timings = dict(timings_ms or {})
        t0 = time.perf_counter()
        self.turns += 1
        self.transcript.append(f"caller: {text}")
        low_conf = bool(asr and asr.low_confidence) or not text.strip()
        # Spoken and typed turns alike: fillers, spoken numbers, words misheard or mistyped for KB terms.
        norm = None if low_conf else normalize_transcript(text, eng.vocabulary(self.role))
        said = norm.text if norm else text
        social = None if low_conf else small_talk(said)
        # a turn that asks for a person, an action or something refused is its own request, never the
        # answer to a pending clarify ("just put me through to a person" is not "personal")
        own_request = not (low_conf or social) and self._is_request(said)
        question, context_only = (said, {}) if low_conf or social or own_request else self._effective_question(said)
        if social and social != "closing" and self.pending_question:
            # "okay" / "hello?" while a clarify waits for its answer: ask it again
            social, question = None, self.pending_question
        normalized = normalize_text(question)
        # The facets the caller states filter the documents. A clause that only states them ("I'm a
        # business customer.") is left out of the search: its words would make every business page
        # look like an answer to "how many lines can I have?". Within a clause ("my cat is breathing
        # fast", "the late fee for business accounts") they stay part of the question.
        query = normalized
        clauses = [c for c in re.split(r"(?<=[.?!;,])\s+", normalized) if c.strip()]
        if len(clauses) > 1:  # one clause is searched whole either way
            vocab, idioms = self.engine.facet_phrases(self.role), self.engine.facet_idioms(self.role)
            query = " ".join(c for c in clauses if content_terms(without_facet_phrases(c, vocab, idioms))) or query
        timings["normalize"] = (time.perf_counter() - t0) * 1000

        result, error = None, None
        t1 = time.perf_counter()
        if not (low_conf or context_only or social):
            try:
                result = eng.retriever.search(query, role=self.role, facets=self.facets,
                                              on_date=eng.on_date or dt.date.today(), k=cfg.k, faults=faults)
            except RetrievalUnavailable as exc:
                error = exc.reason
        timings["retrieve"] = (time.perf_counter() - t1) * 1000
        if result is not None and not result.lexical_only and result.hits:
            ts = time.perf_counter()
            eng.soft_matcher().annotate(normalized, result.hits)
            eng.focus_scores(query, result.hits)
            timings["soft_match"] = (time.perf_counter() - ts) * 1000

        t2 = time.perf_counter()
        action_hits = []
        if result is not None and self.policy == "gated" and (m := approval_action(normalized, cfg)):
            # route the action by its own words: "I'm going to sue" is closest in meaning to
            # whatever the caller was upset about, but the legal page names legal action
            try:
                action_hits = eng.retriever.search(lexicon_words(m), role=self.role, facets=self.facets,
                                                   on_date=eng.on_date or dt.date.today(), k=3, faults=faults).hits
            except RetrievalUnavailable:
                pass
        facts = TurnFacts(question=normalized, result=result, retrieval_error=error,
                          caller_facets=dict(self.facets), kb_facets=eng.kb_facets(self.role),
                          teams=eng.teams(self.role), action_hits=action_hits,
                          asr_low_confidence=low_conf, context_only=context_only,
                          small_talk=social, facet_retry=0 if low_conf or social else self.facet_retry,
                          pending_facets=list(self.pending_facets),
                          intents={} if low_conf or social or context_only else eng.intents(normalized),
                          unit_similarity=eng.retriever.units.similarity if eng.retriever.units else None)
        if self.policy == "gated":
            outcome = decide(facts, cfg, eng.scorer)
            timings["policy"] = (time.perf_counter() - t2) * 1000
            t3 = time.perf_counter()
            decision = self._decision(outcome, question)
            timings["compose"] = (time.perf_counter() - t3) * 1000
        else:
            from .baselines import BASELINES  # the naive designs, for side-by-side evaluation

            decision = BASELINES[self.policy](normalized, result, cfg, {"text": question})
            decision = decision.model_copy(update={"policy_version": f"{self.policy}-baseline",
                                                   "kb_version": eng.kb_version})
            outcome = None
            timings["policy"] = (time.perf_counter() - t2) * 1000

        audit_id = uuid.uuid4().hex[:16]
        hits = result.hits if result else []
        self._turn_hits[audit_id] = hits
        self._last_audit_id = audit_id
        for old in list(self._turn_hits)[:-4]:  # a recheck only ever concerns the latest turns
            del self._turn_hits[old]
        t4 = time.perf_counter()
        if self.policy == "gated":
            decision, rc = recheck.enforce(decision, hits, eng.kb_version)
        else:  # the naive baselines are measured as they are: without our recheck
            rc = recheck.RecheckResult(True, ["recheck skipped for baseline"])
        timings["recheck"] = (time.perf_counter() - t4) * 1000

        if decision.action == Action.transfer and record:
            decision = self._with_handoff(decision, outcome, question, normalized)
        # The clarify's question stays pending until the caller supplies what was missing.
        if decision.action == Action.clarify and Reason.missing_facet in decision.reasons:
            if question != self.pending_question:
                self.clarify_retries = 0
            self.pending_question, self.pending_facets = question, list(decision.missing_information)
        elif not low_conf:
            self.pending_question, self.pending_facets, self.clarify_retries = None, [], 0
        # Context given later narrows the evidence; it cannot help a question nothing related to.
        if not (low_conf or context_only or social) and not (outcome and outcome.gate == "e_no_evidence"):
            self.last_question = question
        self.transcript.append(f"agent: {decision.message}")
        timings["total_policy_path"] = (time.perf_counter() - t0) * 1000

        if record:
            line = self._audit_record(audit_id, text, normalized, asr, faults, result, error, outcome, decision,
                                      rc, timings)
            line["normalization"] = norm.changes if norm else []
            eng.audit.append(line)
        return TurnOutcome(decision=decision, question=text, said=said, normalized_question=normalized,
                           audit_id=audit_id, timings_ms=timings, retrieval=result,
                           gate=outcome.gate if outcome else self.policy,
                           graded=outcome.graded if outcome else [])

    def preview(self, text: str, *, asr: AsrSignal | None = None) -> Decision:
        """What `turn` would decide now, leaving the conversation and the logs untouched.

        The voice path calls it at a pause in the caller's speech to render the reply's first
        sentence early; at the real end of turn it runs `turn` and uses the early audio only if the
        message is identical. A previewed transfer carries no handoff (none is stored)."""
        state = self.snapshot()
        try:
            return self.turn(text, asr=asr, record=False).decision
        finally:
            self.restore(state)

    def snapshot(self) -> tuple:
        """The conversation state, for `restore`."""
        return (dict(self.facets), self.pending_question, list(self.transcript), self.turns,
                dict(self._turn_hits), self._last_audit_id, self.last_question, list(self.pending_facets),
                self.clarify_retries)

    def restore(self, state: tuple, *, superseded: str | None = None, reason: str = "") -> None:
        """Put the conversation back as `snapshot` found it. With `superseded` (an audit id),
        a turn decided since then is void (the voice path ended it too early and the caller went
        on): its audit line stays, and a `turn_superseded` line says why it no longer counts."""
        (self.facets, self.pending_question, self.transcript, self.turns,
         self._turn_hits, self._last_audit_id, self.last_question, self.pending_facets, self.clarify_retries) = (
            dict(state[0]), state[1], list(state[2]), state[3], dict(state[4]), state[5], state[6],
            list(state[7]), state[8])
        if superseded:
            self.engine.audit.append({"kind": "turn_superseded", "audit_id": superseded,
                                      "session": self.session_id, "reason": reason,
                                      "ts": dt.datetime.now(dt.timezone.utc).isoformat()})

    def recheck_before_speech(self, decision: Decision, audit_id: str | None = None) -> Decision:
        """Run the citation/number recheck again on the final text, right before TTS."""
        hits = self._turn_hits.get(audit_id or self._last_audit_id, [])
        checked, res = recheck.enforce(decision, hits, self.engine.kb_version)
        if not res.ok:
            self.engine.audit.append({"kind": "pre_tts_recheck_failed", "audit_id": audit_id,
                                      "session": self.session_id, "problems": res.problems,
                                      "ts": dt.datetime.now(dt.timezone.utc).isoformat()})
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
                                  "ts": dt.datetime.now(dt.timezone.utc).isoformat()})
        return d

    def record_timings(self, audit_id: str, timings: dict[str, float]) -> None:
        """Late stage timings (ASR, TTS first audio) appended to the turn's audit trail."""
        self.engine.audit.append({"kind": "timings", "audit_id": audit_id, "session": self.session_id,
                                  "timings_ms": {k: round(v, 2) for k, v in timings.items()}})

    # -- helpers ----------------------------------------------------------------------------
    def _decision(self, o: GateOutcome, question: str) -> Decision:
        cfg = self.engine.config
        message, citations = compose(o, question, cfg)
        return Decision(action=o.action, message=message, citations=citations,
                        missing_information=o.missing_information, reasons=o.reasons,
                        evidence_status=o.evidence_status, risk_level=o.risk_level,  # type: ignore[arg-type]
                        confidence=round(o.confidence, 3), policy_version=self.engine.policy_version,
                        kb_version=self.engine.kb_version)

    def _with_handoff(self, d: Decision, o: GateOutcome | None, question: str, normalized: str) -> Decision:
        """Build the context package and store it durably before the caller hears 'transferring'."""
        evidence = []
        for g in (o.evidence if o else []):
            quote = " ".join(g.hit.units[:2])
            evidence.append(EvidenceQuote(doc_id=g.doc_id, section=g.hit.section, version=g.hit.version, quote=quote))
        team = (o.team if o and o.team else None) or (d.handoff.team if d.handoff else self.engine.config.default_team)
        reasons = [r.value for r in d.reasons]
        summary = (f"Caller asked: \"{question.strip()}\". Transferred because: {', '.join(reasons)}."
                   + (f" Missing: {', '.join(d.missing_information)}." if d.missing_information else "")
                   + (f" Caller facets: {self.facets}." if self.facets else ""))
        handoff = Handoff(id=uuid.uuid4().hex[:12], team=team, summary=summary, question=question,
                          normalized_question=normalized, transcript=list(self.transcript), reasons=reasons,
                          evidence=evidence, missing_information=list(d.missing_information),
                          conflicts=list(o.conflicts) if o else [], caller_facets=dict(self.facets),
                          caller_role=self.role, created_at=dt.datetime.now(dt.timezone.utc).isoformat(),
                          policy_version=d.policy_version, kb_version=d.kb_version)
        handoff.transcript.append(f"agent: {d.message}")
        self.engine.handoffs.append({"session": self.session_id, **handoff.model_dump()})
        return d.model_copy(update={"handoff": handoff})

    def _audit_record(self, audit_id: str, text: str, normalized: str, asr: AsrSignal | None,
                      faults: Collection[str], result: RetrievalResult | None, error: str | None,
                      o: GateOutcome | None, d: Decision, rc: recheck.RecheckResult,
                      timings: dict[str, float]) -> dict[str, Any]:
        graded = {g.hit.locator: g for g in (o.graded if o else [])}
        hits = []
        for h in (result.hits if result else []):
            g = graded.get(h.locator)
            hits.append({"locator": h.locator, "status": h.status.value, "lexical": round(h.lexical_score, 4),
                         "dense": None if h.dense_score is None else round(h.dense_score, 4),
                         "fused_rank": h.fused_rank, "covered": h.covered_terms, "missing": h.missing_terms,
                         "p_answers": round(g.p, 3) if g else None, "why": g.why if g else None,
                         "features": {k: round(v, 3) for k, v in g.features.items()} if g else None})
        return {
            "kind": "turn", "audit_id": audit_id, "ts": dt.datetime.now(dt.timezone.utc).isoformat(),
            "session": self.session_id, "turn": self.turns, "role": self.role, "facets": dict(self.facets),
            "policy": self.policy, "question": text, "normalized_question": normalized,
            "asr": asr.model_dump() if asr else None, "faults": list(faults),
            "retrieval": {"error": error, "lexical_only": result.lexical_only if result else None,
                          "degraded_reason": result.degraded_reason if result else None,
                          "visible_sections": result.visible_sections if result else None,
                          "query_terms": result.query_terms if result else None, "hits": hits,
                          "timings_ms": result.timings_ms if result else None},
            "gate": o.gate if o else self.policy, "signals": o.signals if o else {},
            "recheck": {"ok": rc.ok, "problems": rc.problems},
            "decision": d.public_dict(), "policy_version": d.policy_version or self.engine.policy_version,
            "kb_version": self.engine.kb_version, "timings_ms": {k: round(v, 2) for k, v in timings.items()},
        }
