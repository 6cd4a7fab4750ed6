"""The refusal policy: ordered gates from a caller turn and its retrieval to one of four actions.

Pure and deterministic: no clock, no I/O. The order is the policy (tests pin it):
  a human requested → b disallowed → c high risk / needs approval → d retrieval down →
  e no strong evidence → f only deprecated/draft → g conflicting sources → h missing facet →
  i question not covered → j answer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kb.models import RISK_ORDER, EffectiveStatus, Hit, RetrievalResult
from kb.tokenize import content_terms

from .config import PolicyConfig
from .decision import Action, Reason
from .evidence import FRAME_TERMS, GradedHit, competitors, grade
from .extract import pick_sentences
from .numbers import quantities
from .signals import (GENERIC_VERBS, action_verb, approval_action, asked_terms, disallowed_request,
                      explain_question, fact_kind, heading_fits, human_requested, yes_no_question)


_GENERIC_TERMS = frozenset(t for v in GENERIC_VERBS for t in content_terms(v))


@dataclass
class TurnFacts:
    """Everything the gates look at for one turn."""

    question: str  # the effective question (a clarify's answer is merged into the pending question)
    result: RetrievalResult | None  # None when retrieval is unavailable
    retrieval_error: str | None = None
    caller_facets: dict[str, str] = field(default_factory=dict)
    kb_facets: dict[str, set[str]] = field(default_factory=dict)  # facet values the caller's KB view uses
    teams: set[str] = field(default_factory=set)  # handoff teams of the documents the caller may see
    # sections found for the words of the approval action the caller asked for ("sue" -> the legal
    # page): the team that handles that action, when it is not what the question is closest to
    action_hits: list[Hit] = field(default_factory=list)
    asr_low_confidence: bool = False
    # the turn only told us who the caller is ("it's a personal account") and there is no question
    # yet for it to apply to: the facets it stated
    context_only: dict[str, str] = field(default_factory=dict)
    small_talk: str | None = None  # the turn is only a greeting, thanks or goodbye (signals.small_talk)


@dataclass
class GateOutcome:
    action: Action
    reasons: list[Reason]
    gate: str  # which gate decided, e.g. "c_high_risk"
    evidence_status: str = "missing"
    evidence: list[GradedHit] = field(default_factory=list)  # what the message may quote / hand over
    missing_information: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    team: str | None = None
    risk_level: str = "low"
    confidence: float = 0.0
    signals: dict[str, object] = field(default_factory=dict)
    graded: list[GradedHit] = field(default_factory=list)


def _risk_of(hits: list[GradedHit]) -> str:
    levels = [g.hit.risk for g in hits] or ["low"]
    return max(levels, key=lambda r: RISK_ORDER[r])


def _team(hits: list[GradedHit], cfg: PolicyConfig, prefer_risky: bool = False) -> str:
    """The queue of the best-scoring section (of the best risky one, when risk decided)."""
    risky = [g for g in hits if RISK_ORDER[g.hit.risk] >= RISK_ORDER["high"]]
    ordered = (risky or hits) if prefer_risky else hits
    for g in ordered:
        if g.hit.handoff_team:
            return g.hit.handoff_team
    return cfg.default_team


def _named_team(question: str, teams: set[str]) -> str | None:
    """A team the caller asks for by name ("put me through to tech support")."""
    q = " " + re.sub(r"[^a-z ]", " ", question.lower()) + " "
    for team in sorted(teams, key=len, reverse=True):
        if f" {team.replace('_', ' ').lower()} " in q:
            return team
    return None


def _supersedes(a: GradedHit, b: GradedHit) -> bool:
    return b.doc_id in a.hit.supersedes or a.doc_id in b.hit.supersedes


def _facet_disjoint(a: GradedHit, b: GradedHit) -> bool:
    fa, fb = a.hit.applies_to, b.hit.applies_to
    return any(k in fb and fb[k] != v for k, v in fa.items())


# Which quantity kinds can settle each kind of question (see signals.fact_kind).
_KINDS_FOR_FACT = {"duration": {"time"}, "amount": {"money", "percent"}, "count": {"number", "data"},
                   "date": {"date"}}


def _figures(g: GradedHit, question: str, fact: str) -> dict[str, set[str]]:
    """Quantities by kind in the sentences this section would speak as the answer."""
    wanted = _KINDS_FOR_FACT[fact]
    out: dict[str, set[str]] = {}
    for sent in pick_sentences(g, question, fact):
        for q in quantities(sent):
            if q.kind in wanted:
                out.setdefault(q.kind, set()).add(q.value)
    return out


def _distinct_weight(a: GradedHit, b: GradedHit, weights: dict[str, float]) -> float:
    """Share of the question's weight that one section covers and the other does not: two sections
    only compete as answers to the same question when this is small (Mexico vs EU day passes)."""
    ea, eb = set(a.hit.covered_terms), set(b.hit.covered_terms)
    ca, cb = ea | set(a.hit.soft_covered), eb | set(b.hit.soft_covered)
    terms = ca | cb | set(a.missing_terms)
    total = sum(weights.get(t, 1.0) for t in terms) or 1.0
    # only a term one section names outright and the other does not say at all (a word-similarity
    # match is too weak to tell two topics apart)
    diff = {t for t in (ea - cb) | (eb - ca) if not t[:1].isdigit()}  # the disputed figures themselves
    return sum(weights.get(t, 1.0) for t in diff) / total


def _body_coverage(g: GradedHit, result: RetrievalResult, asked: set[str]) -> float:
    """Weighted share of the question's terms in the section's own heading and text; the thing a
    what/which question asks for counts triple."""
    body = set(content_terms(f"{g.hit.heading} {g.hit.text}"))
    terms = [t for t in result.query_terms if t not in FRAME_TERMS and len(t) > 1]
    w = {t: result.term_weights.get(t, 1.0) * (3.0 if t in asked else 1.0) for t in terms}
    total = sum(w.values()) or 1.0
    return sum(w[t] for t in terms if t in body) / total


def _heading_names(g: GradedHit, result: RetrievalResult, asked: set[str]) -> float:
    """Weighted share of what a what/which question asks for that the section's heading names."""
    if not asked:
        return 0.0
    heading = set(content_terms(g.hit.heading))
    w = {t: result.term_weights.get(t, 1.0) for t in asked}
    return round(sum(v for t, v in w.items() if t in heading) / (sum(w.values()) or 1.0), 2)


def find_conflicts(cands: list[GradedHit], cfg: PolicyConfig, weights: dict[str, float], question: str,
                   fact: str) -> list[tuple[GradedHit, GradedHit, str]]:
    """Pairs of current, same-scope sections, each strong enough to answer, whose answers give
    different figures of the kind the question asks for."""
    if fact not in _KINDS_FOR_FACT:
        return []  # only a question asking for a figure can be answered two ways by figures
    pairs = []
    strong: list[GradedHit] = []
    for g in cands:  # each document speaks through its best section only
        if g.active and g.has_fact and (g.dense or 0) >= cfg.thresholds.conflict_min_dense \
                and all(x.doc_id != g.doc_id for x in strong):
            strong.append(g)
    for i, a in enumerate(strong):
        for b in strong[i + 1:]:
            if a.doc_id == b.doc_id or _supersedes(a, b) or _facet_disjoint(a, b) or not (a.answers or b.answers):
                continue
            # both must be equally about the question: a dispute page that mentions late fees
            # does not contradict the late-fee page
            if _distinct_weight(a, b, weights) > 0.4 or abs((a.dense or 0) - (b.dense or 0)) > 0.1:
                continue
            fa, fb = _figures(a, question, fact), _figures(b, question, fact)
            for kind in sorted(set(fa) & set(fb)):
                if fa[kind].isdisjoint(fb[kind]):
                    pairs.append((a, b, kind))
                    break
    return pairs


def missing_facets(cands: list[GradedHit], facts: TurnFacts, cfg: PolicyConfig) -> list[str]:
    """Facet keys on which the competing evidence splits and that the caller has not given.

    Only sections strong enough to answer count: a facet is worth asking about when knowing it
    would let us answer, not when the scoped documents merely share a word with the question."""
    keys: list[str] = []
    cands = [g for g in cands if g.answers]
    for g in cands:
        for key, value in g.hit.applies_to.items():
            if key in facts.caller_facets or key in keys:
                continue
            values = {c.hit.applies_to.get(key) for c in cands}
            # The evidence splits on the key, or it is scoped to one value while the KB knows others:
            # answering with it would apply, say, the personal rule to a business caller.
            if len(values - {None}) > 1 or len(facts.kb_facets.get(key, set()) - {value}) > 0:
                keys.append(key)
    return keys[: cfg.thresholds.max_clarify_facets]


def decide(facts: TurnFacts, cfg: PolicyConfig) -> GateOutcome:
    q = facts.question
    kind = fact_kind(q)
    graded = grade(facts.result, cfg.thresholds, kind) if facts.result else []
    relevant = [g for g in graded if g.relevant]
    signals: dict[str, object] = {"fact_kind": kind}

    def out(action: Action, reasons: list[Reason], gate: str, **kw: object) -> GateOutcome:
        kw.setdefault("risk_level", _risk_of(relevant[:1]))
        return GateOutcome(action, reasons, gate, signals=signals, graded=graded, **kw)  # type: ignore[arg-type]

    if facts.asr_low_confidence:
        return out(Action.clarify, [Reason.asr_low_confidence], "asr")
    # Greetings, thanks and goodbyes ask nothing: a social reply, not "nothing answers 'thanks'".
    if facts.small_talk:
        signals["small_talk"] = facts.small_talk
        return out(Action.clarify, [Reason.question_needed], "small_talk", missing_information=["question"],
                   risk_level="low")
    # Context without a question: searching "a personal account" would answer (or transfer) a
    # question nobody asked. Ask for the question; the context is kept for it.
    if facts.context_only:
        signals["context"] = dict(facts.context_only)
        return out(Action.clarify, [Reason.question_needed], "context_only", missing_information=["question"],
                   risk_level="low")

    # a. An explicit request for a human wins over everything, even a perfect answer.
    if m := human_requested(q, cfg):
        signals["human_request"] = m
        return out(Action.transfer, [Reason.human_requested], "a_human",
                   team=_named_team(q, facts.teams) or _team(relevant[:1], cfg), evidence=relevant[:3],
                   evidence_status="direct" if any(g.answers for g in relevant) else "missing")

    # b. Requests to bypass rules, reveal internal material, or commit fraud: refuse, no detail.
    if m := disallowed_request(q, cfg):
        signals["disallowed"] = m
        return out(Action.refuse, [Reason.disallowed_request], "b_disallowed", risk_level="high")

    # c. High-risk topics (from KB metadata) and actions a human must approve.
    top = competitors(graded, cfg.thresholds.competitor_margin)
    # A high-risk section counts when it is about the question as much as the best current one is:
    # it covers the question's terms at least as well and scores nearly as high (not merely shares a
    # word). Outdated and future documents do not set today's risk.
    top_active = competitors([g for g in graded if g.active], cfg.thresholds.competitor_margin)
    risky = [g for g in top_active if RISK_ORDER[g.hit.risk] >= RISK_ORDER["high"]
             # a critical topic (an emergency) goes to a human on any relevant evidence
             and (g.dense is None or g.dense >= cfg.thresholds.risk_min_dense or g.hit.risk == "critical")
             and (g is top_active[0] or (g.has_fact and g.coverage >= top_active[0].coverage - 1e-9
                                         and g.score >= top_active[0].score - cfg.thresholds.competitor_margin / 2
                                         and (g.dense or 0) >= (top_active[0].dense or 0) - cfg.thresholds.competitor_margin / 2))]
    # High risk with only partial evidence still goes to a human: the section closest in meaning
    # is a high-risk one even though it shares few of the caller's words ("someone hijacked my number").
    by_meaning = sorted((g for g in graded if g.active), key=lambda g: -(g.dense or 0.0))
    if not risky and by_meaning and RISK_ORDER[by_meaning[0].hit.risk] >= RISK_ORDER["high"]:
        closest = by_meaning[0]
        safe = [g for g in by_meaning if RISK_ORDER[g.hit.risk] < RISK_ORDER["high"]]
        runner_up = (safe[0].dense or 0.0) if safe else 0.0
        if (closest.dense or 0) >= cfg.thresholds.answer_dense and closest.coverage >= cfg.thresholds.min_coverage / 2 \
                and (closest.dense or 0) - runner_up >= cfg.thresholds.competitor_margin:
            risky = [closest]
    if m := approval_action(q, cfg):
        signals["approval_action"] = m
        # the action's team: a high-risk section that names the action itself ("legal action" for
        # "I'm going to sue"), else a high-risk section among the closest in meaning, if any
        # (close in meaning to those words too: "sign me up" shares only the word "sign" with the
        # warning-signs page)
        named = [h for h in facts.action_hits if h.lexical_score > 0 and h.handoff_team
                 and (h.dense_score is None or h.dense_score >= cfg.thresholds.min_dense)
                 and RISK_ORDER[h.risk] >= RISK_ORDER["high"] and h.status == EffectiveStatus.active]
        team = named[0].handoff_team if named else _team(risky or by_meaning[:3] or top, cfg, prefer_risky=True)
        if named:
            signals["action_section"] = named[0].locator
        return out(Action.transfer, [Reason.action_requires_approval], "c_approval",
                   team=team, evidence=(risky or top)[:3],
                   risk_level=max(_risk_of(top), "high", key=lambda r: RISK_ORDER[r]),
                   evidence_status="partial" if top else "missing")
    if risky:
        return out(Action.transfer, [Reason.high_risk_topic], "c_high_risk",
                   team=_team(risky, cfg, prefer_risky=True), evidence=top[:3], risk_level=_risk_of(risky),
                   evidence_status="direct" if any(g.answers for g in risky) else "partial")

    # d. Retrieval down: say it is a system limitation, never "we have no information".
    if facts.result is None:
        signals["retrieval_error"] = facts.retrieval_error
        return out(Action.refuse, [Reason.retrieval_unavailable], "d_retrieval_down")
    if facts.result.lexical_only:
        signals["lexical_only"] = facts.result.degraded_reason

    # e. Nothing permitted is strong enough to be about this question.
    if not relevant:
        best = graded[0] if graded else None
        # On topic but sharing too few of the question's terms: background, not an answer. Say what
        # was found and that it does not answer (the seed's renewal-rules page for "cancel auto-renewal").
        if best and best.active and best.coverage > 0 and (best.dense or 0) >= cfg.thresholds.answer_dense:
            signals["missing_terms"] = best.missing_terms
            return out(Action.refuse, [Reason.required_fact_not_covered, Reason.background_only], "e_background",
                       evidence=[best], missing_information=best.missing_terms, evidence_status="background")
        reason = Reason.low_retrieval_score if best and best.coverage > 0 else Reason.no_relevant_evidence
        signals["best_score"] = round(best.score, 3) if best else None
        return out(Action.refuse, [reason], "e_no_evidence")

    # f. Only outdated or not-yet-in-force material is about the question.
    active = [g for g in relevant if g.active]
    if not active:
        statuses = {g.hit.status for g in relevant}
        reason = Reason.deprecated_only if EffectiveStatus.deprecated in statuses else Reason.draft_only
        return out(Action.refuse, [reason], "f_version", evidence=relevant[:2], evidence_status="background")

    # The question is about something only outdated or future material covers (its best section
    # beats every current one, and no current document replaces it): not the current rule.
    lead = max(relevant, key=lambda g: g.dense or 0.0)
    replaced = {d for g in active for d in g.hit.supersedes}
    if (not lead.active and lead.doc_id not in replaced and lead.dense is not None
            and lead.dense - max(g.dense or 0.0 for g in active) > cfg.thresholds.competitor_margin / 2):
        reason = Reason.deprecated_only if lead.hit.status == EffectiveStatus.deprecated else Reason.draft_only
        return out(Action.refuse, [reason], "f_version", evidence=[lead], evidence_status="background")

    cands = competitors(active, cfg.thresholds.competitor_margin)

    # g. Current sources disagree: expose it, never pick a side.
    # (a wider net than the facet check: a disagreeing source need not rank quite as high)
    if conflicts := find_conflicts(competitors(active, 2 * cfg.thresholds.competitor_margin), cfg,
                                   facts.result.term_weights, q, kind):
        a, b, qkind = conflicts[0]
        desc = [f"{x.hit.title} ({x.doc_id}) and {y.hit.title} ({y.doc_id}) give different {k} figures"
                for x, y, k in conflicts]
        high = RISK_ORDER[_risk_of([a, b])] >= RISK_ORDER["high"]
        return out(Action.transfer if high else Action.refuse, [Reason.conflicting_sources], "g_conflict",
                   evidence=[a, b], conflicts=desc, evidence_status="conflicting", team=_team([a, b], cfg))

    # h. The evidence depends on who the caller is: ask, naming the options.
    if missing := missing_facets(cands, facts, cfg):
        return out(Action.clarify, [Reason.missing_facet], "h_facet", missing_information=missing,
                   evidence=cands[:3], evidence_status="partial")

    # i. Key terms or the asked-for fact are not in the evidence. Among the current sections strong
    # enough to answer, prefer the one that holds the kind of fact asked for.
    # Other sections of the same documents may hold the fact ("how long" lives under its own heading).
    # A document that answers may hold the fact in a section that scores lower on its own; among
    # the sections of answering documents, take the one whose own words (not its document's title)
    # hold the question's terms and the kind of fact asked for.
    docs = {g.doc_id for g in cands if g.answers}
    pool = cands + [g for g in active if g.doc_id in docs and g.relevant and g not in cands]
    asked = asked_terms(q)
    # … then one whose condition holds the number the caller gave ("aged 75 or over" for "I'm 78"), then
    # one whose heading says it gives that kind of fact ("How to turn roaming on" rather than "Roaming
    # is off until you turn it on" for "how do I switch on roaming"), then one that answers on its own
    # over one that only repeats the asked words ("Eligibility for a retention offer" for "which
    # retention offer should I try first"), then one whose heading names what a what/which question
    # asks for ("Discount codes" for "what retention discount codes can I offer")
    best = max(pool, key=lambda g: (g.doc_id in docs, g.has_fact, len(g.held),
                                    g.has_fact and heading_fits(kind, g.hit.heading),
                                    g.answers, _heading_names(g, facts.result, asked),
                                    round(_body_coverage(g, facts.result, asked), 2),
                                    g.coverage + (g.dense or 0)))
    verb = action_verb(q)
    # the action must be named outright: word similarity confuses opposites (pause ~ continue)
    verb_missing = verb is not None and verb not in best.hit.covered_terms
    if verb_missing:
        signals["action_verb_missing"] = verb
    # A yes/no question ("does voicemail turn messages into text?") is answered only by a section
    # that speaks to every part of it; a section about the rest would be a confident non-answer.
    # So is a question asking what something the caller describes means ("flashing red").
    unsaid = (yes_no_question(q) or explain_question(q)) and [t for t in best.missing_terms
                                                              if t not in _GENERIC_TERMS]
    if unsaid:
        signals["yes_no_terms_missing"] = unsaid
    if best.doc_id not in docs or not best.has_fact or verb_missing or unsaid:
        reasons = [Reason.required_fact_not_covered]
        if best.doc_id not in docs:
            reasons.append(Reason.partial_evidence if best.coverage >= cfg.thresholds.min_coverage
                           else Reason.background_only)
        signals["missing_terms"] = best.missing_terms
        return out(Action.refuse, reasons, "i_not_covered", evidence=[best],
                   missing_information=best.missing_terms or [kind], evidence_status="partial")

    # j. Grounded answer from the best current, in-scope section.
    reasons = [Reason.grounded_answer]
    if facts.result.lexical_only:
        reasons.append(Reason.embedding_unavailable)
    conf = min(1.0, best.score)
    return out(Action.answer, reasons, "j_answer", evidence=[best], evidence_status="direct", confidence=conf)
