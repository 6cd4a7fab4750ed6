"""The refusal policy: ordered gates from a caller turn and its retrieval to one of four actions.

Pure and deterministic: no clock, no I/O. Explicit gates only for the invariants, in this order:
  a human requested → b disallowed → c high risk / needs approval → d retrieval down →
  e nothing about the question → f only outdated or future material → g current sources disagree →
  h the answer depends on a facet the caller has not given → i no section answers (partial) → j answer.
Whether a section is about the question, whether it answers it and which one to speak are one
calibrated probability (policy/evidence.py), compared with a threshold derived from the costs.
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Callable

from kb.models import RISK_ORDER, EffectiveStatus, Hit, RetrievalResult

from .config import PolicyConfig
from .conflicts import Similarity, find_conflicts, same_fact_units
from .decision import Action, Reason
from .evidence import GradedHit, best_answer, grade
from .language import FactKind, fact_kind
from .periods import asked_periods, in_force_during
from .scorer import Scorer, answer_threshold
from .signals import approval_action, disallowed_request, first_reading, human_requested
from .versions import carry_over


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
    facet_retry: int = 0  # times the caller's answer to our clarify could not be read: ask once more, then hand over
    pending_facets: list[str] = field(default_factory=list)  # what that clarify asked for
    intents: dict[str, float] = field(default_factory=dict)  # intents by meaning (policy/intents.py)
    urgency: float | None = None  # the urgent turn probe's probability (None: no probe)
    unit_similarity: Similarity | None = None  # cosine of two sections' units (kb/units.py), for conflicts
    # the team of what the conversation has been about (the latest question's evidence): where a
    # transfer goes when this turn's own words point nowhere ("can I just talk to a person")
    conversation_team: str | None = None
    # this turn as the caller said it, before the repair toward the KB's words ("money back" may
    # become the KB's "Money-Back"): a request it makes stays a request
    caller_words: str = ""
    today: dt.date | None = None  # the date the KB's statuses were read on; None: dates ahead are not read


# the intents that say the caller is in danger or distress: a written example's meaning, the urgent probe
DANGER_INTENTS = frozenset({"distress", "urgent"})


def _urgent(facts: TurnFacts) -> bool:
    """The caller is in danger or distress, by a written example's meaning or the urgent turn probe."""
    return bool(DANGER_INTENTS & set(facts.intents))


def _said(read: Callable[[str, PolicyConfig], str | None], facts: TurnFacts, cfg: PolicyConfig) -> str | None:
    return first_reading(read, (facts.question, facts.caller_words), cfg)


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


def _high(g: GradedHit) -> bool:
    return RISK_ORDER[g.hit.risk] >= RISK_ORDER["high"]


def _risk_of(hits: list[GradedHit]) -> str:
    return max((g.hit.risk for g in hits), default="low", key=lambda r: RISK_ORDER[r])


def _team(hits: list[GradedHit], cfg: PolicyConfig) -> str:
    """The queue of the first of these sections that names one."""
    return next((g.hit.handoff_team for g in hits if g.hit.handoff_team), cfg.default_team)


def _named_team(question: str, teams: set[str]) -> str | None:
    """A team the caller asks for by name ("put me through to tech support")."""
    q = " " + re.sub(r"[^a-z ]", " ", question.lower()) + " "
    return next((t for t in sorted(teams, key=len, reverse=True) if f" {t.replace('_', ' ').lower()} " in q), None)


def _related_high(active: list[GradedHit], cfg: PolicyConfig) -> list[GradedHit]:
    """High-risk sections at least at the related level."""
    return [g for g in active if _high(g) and g.p >= cfg.thresholds.related_p]


def risky_sections(active: list[GradedHit], cfg: PolicyConfig, urgency: float | None = None) -> list[GradedHit]:
    """High-risk sections the question is about: one likely to answer it, the likeliest even when
    only weakly, and a critical topic (an emergency) close to it among the first few. The weak
    readings hold only for a turn that reads as urgent (`urgency`, the urgent probe's probability;
    None: no probe, and they always hold): a weak match alone sent "how do I get more data" to the
    data-deletion page's team."""
    th = cfg.thresholds
    # a high-risk page is what the question is about only when no page of lower risk is likelier to
    # answer it: "when is my bill due" (0.93) also fits the billing-disputes page (0.36)
    lower = max((g.p for g in active if not _high(g)), default=0.0)
    out = [g for g in _related_high(active, cfg) if g.p >= lower]
    if urgency is not None and urgency < th.weak_risk_urgency:
        return out
    # the section most likely to answer is a high-risk one, though weakly: the caller's words are
    # rarely the page's ("thinking about ending it all" for the crisis page)
    out += [g for g in active[:1] if _high(g) and g.p >= th.related_p / 2]
    out += [g for g in active[:3] if g.hit.risk == "critical" and g.p >= th.related_p / 3]
    if out or any(g.p >= th.related_p for g in active):
        return list({g.hit.locator: g for g in out}.values())
    # Nothing is likely to answer: an emergency goes to a person when its page is as close in meaning
    # as any other. A merely high-risk page that is only closest in meaning routes nothing: over the
    # 19 domains each such transfer was a question about something else (an out-of-office reply sent
    # to the phishing team, a staff discount to insurance claims).
    by_topic = sorted(active, key=lambda g: -g.topic)
    safest = next((g.topic for g in by_topic if not _high(g)), 0.0)  # the closest section of no risk
    out += [g for g in by_topic[:3] if g.hit.risk == "critical" and g.topic >= max(th.risk_min_dense, safest)]
    return list({g.hit.locator: g for g in out}.values())


def missing_facets(cands: list[GradedHit], facts: TurnFacts, cfg: PolicyConfig) -> list[str]:
    """Facet keys the caller has not given on which the likely answers depend: they split on the
    key, or one is scoped to a value while the KB knows others (answering with it would apply, say,
    the personal rule to a business caller)."""
    keys: list[str] = []
    for g in cands:
        for key, value in g.hit.applies_to.items():
            if key in facts.caller_facets or key in keys:
                continue
            values = {c.hit.applies_to.get(key) for c in cands}
            if len(values - {None}) > 1 or facts.kb_facets.get(key, set()) - {value}:
                keys.append(key)
    return keys[: cfg.thresholds.max_clarify_facets]


def decide(facts: TurnFacts, cfg: PolicyConfig, scorer: Scorer) -> GateOutcome:
    q = facts.question
    kind = fact_kind(q)
    answer_p = answer_threshold(cfg.costs.answer_instead_of_refuse_or_transfer,
                                cfg.costs.refuse_or_transfer_instead_of_answer)
    graded = carry_over(grade(facts.result, scorer, kind), kind, facts.unit_similarity,
                        lambda p: scorer.answer_probability(p) >= answer_p) if facts.result else []
    signals: dict[str, object] = {"fact_kind": kind}

    def out(action: Action, reasons: list[Reason], gate: str, **kw: object) -> GateOutcome:
        kw.setdefault("risk_level", _risk_of(graded[:1]))
        if action == Action.transfer and not kw.get("team"):
            kw["team"] = facts.conversation_team or cfg.default_team
        return GateOutcome(action, reasons, gate, signals=signals, graded=graded, **kw)  # type: ignore[arg-type]

    if early := _conversation_gates(facts, cfg, signals, out):
        return early
    if early := _intent_gates(facts, graded, cfg, signals, out):
        return early
    if facts.context_only:  # context without a question: ask for the question, keep the context
        signals["context"] = dict(facts.context_only)
        return out(Action.clarify, [Reason.question_needed], "context_only", missing_information=["question"],
                   risk_level="low")
    if facts.result is None:  # d. retrieval down: a system limitation, never "we have no information"
        signals["retrieval_error"] = facts.retrieval_error
        return out(Action.refuse, [Reason.retrieval_unavailable], "d_retrieval_down")
    if facts.result.lexical_only:
        signals["lexical_only"] = facts.result.degraded_reason
    return _evidence_gates(facts, graded, cfg, scorer, answer_p, signals, out)


def _conversation_gates(facts: TurnFacts, cfg: PolicyConfig, signals: dict[str, object],
                        out) -> GateOutcome | None:  # noqa: ANN001
    # a doubtful hearing is asked again, unless it asks for a person or reads as a caller in danger:
    # those are never second to anything
    if facts.asr_low_confidence and not (_said(human_requested, facts, cfg) or "human_request" in facts.intents
                                         or _urgent(facts)):
        return out(Action.clarify, [Reason.asr_low_confidence], "asr")
    if facts.small_talk:  # greetings, thanks, goodbyes ask nothing: a social reply
        signals["small_talk"] = facts.small_talk
        return out(Action.clarify, [Reason.question_needed], "small_talk", missing_information=["question"],
                   risk_level="low")
    signals["options"] = {k: sorted(v) for k, v in facts.kb_facets.items()}
    if facts.facet_retry == 1:  # the answer to our clarify could not be read: ask again, options spelled out
        signals["retry"] = True
        return out(Action.clarify, [Reason.missing_facet], "h_facet_retry", missing_information=facts.pending_facets,
                   evidence_status="partial")
    if facts.facet_retry > 1:  # never loop: a person takes it from here
        return out(Action.transfer, [Reason.missing_facet], "h_facet_unread", missing_information=facts.pending_facets,
                   evidence_status="partial")
    return None


def _intent_gates(facts: TurnFacts, graded: list[GradedHit], cfg: PolicyConfig, signals: dict[str, object],
                  out) -> GateOutcome | None:  # noqa: ANN001
    q = facts.question
    active = [g for g in graded if g.active]
    # a. An explicit request for a human wins over everything, even a perfect answer.
    if m := _said(human_requested, facts, cfg) or (f"by meaning {facts.intents['human_request']:.2f}"
                                                   if "human_request" in facts.intents else None):
        signals["human_request"] = m
        related = [g for g in active[:3] if g.p >= cfg.thresholds.related_p]  # this turn also asks something
        team = _named_team(q, facts.teams) or (_team(related, cfg) if related else facts.conversation_team)
        return out(Action.transfer, [Reason.human_requested], "a_human", team=team, evidence=related,
                   evidence_status="direct" if related else "missing")
    # b. Requests to bypass rules, reveal internal material, or commit fraud: refuse, no detail.
    # Read by meaning too: a request like those the domains' cases refuse (another person's details,
    # getting round a check, internal material) in words no pattern names; a caller in danger or
    # distress is not refused on that reading, but goes on to a person (c).
    if m := _said(disallowed_request, facts, cfg) or (f"by meaning {facts.intents['disallowed']:.2f}"
                                                      if "disallowed" in facts.intents and not _urgent(facts) else None):
        signals["disallowed"] = m
        return out(Action.refuse, [Reason.disallowed_request], "b_disallowed", risk_level="high")
    # c. High-risk topics (from KB metadata) and actions a human must approve.
    if facts.urgency is not None:
        signals["urgency"] = round(facts.urgency, 3)  # what the weak high-risk readings were held to
    risky = risky_sections(active, cfg, facts.urgency)
    if m := _said(approval_action, facts, cfg):
        signals["approval_action"] = m
        named = [h for h in facts.action_hits if h.lexical_score > 0 and h.handoff_team
                 and (h.dense_score is None or h.dense_score >= cfg.thresholds.min_dense)
                 and RISK_ORDER[h.risk] >= RISK_ORDER["high"] and h.status == EffectiveStatus.active]
        if named:
            signals["action_section"] = named[0].locator
        # an action on a high-risk topic goes to that topic's team, though a safer page fits better
        topical = risky or _related_high(active, cfg)
        team = named[0].handoff_team if named else _team(topical or active[:3], cfg)
        return out(Action.transfer, [Reason.action_requires_approval], "c_approval", team=team,
                   evidence=(topical or active)[:3], risk_level=max(_risk_of(topical), "high", key=lambda r: RISK_ORDER[r]),
                   evidence_status="partial" if active else "missing")
    if risky:
        return out(Action.transfer, [Reason.high_risk_topic], "c_high_risk", team=_team(risky, cfg),
                   evidence=risky[:3], risk_level=_risk_of(risky), evidence_status="partial")
    # A caller in distress (hurt, threatened, frightened; read by meaning, or by the urgent turn probe) goes
    # to a person, whatever the KB says: to the KB's distress team when it names one, else to the team of
    # the closest high-risk page among the hits, else the default queue.
    if _urgent(facts):
        signals.update({k: round(facts.intents[k], 3) for k in ("distress", "urgent") if k in facts.intents})
        high = sorted((g for g in active if _high(g)), key=lambda g: -g.topic)[:3]
        return out(Action.transfer, [Reason.high_risk_topic], "c_distress", team=cfg.distress_team or _team(high, cfg),
                   evidence=high, risk_level=max(_risk_of(high), "high", key=lambda r: RISK_ORDER[r]),
                   evidence_status="partial" if high else "missing")
    return None


def _scoped_to_caller(best: GradedHit, facts: TurnFacts, floor: float) -> dict[str, str] | None:
    """The facets on which the best section is scoped to who the caller says they are, when it is
    more likely than not to answer (`floor`); else None. Either the caller has just told us what our
    clarify asked (those keys), or they said it unasked ("we own our house", an account type known
    from the call) on a key whose variants the KB keeps apart. Either way the page is written for
    this caller, and only which variant applies was open. Its variant may not have been retrieved
    when we asked (the cat's page, when we asked "cat, dog or rabbit?" from the dog's and the
    rabbit's). Refusing it would make our question, or the caller's words, count for nothing.
    Over the 19 development domains, leave-one-domain-out, 7 of the 9 pages so scoped that this
    answered unasked between 0.5 and the answer threshold answered rightly (one spoke the wrong
    sentence; one answered a neighbouring fact)."""
    keys = facts.pending_facets or [k for k in best.hit.applies_to if len(facts.kb_facets.get(k, ())) > 1]
    if not keys or best.p < floor or any(
            k not in facts.caller_facets or best.hit.applies_to.get(k) != facts.caller_facets[k] for k in keys):
        return None
    return {k: facts.caller_facets[k] for k in keys}


def _evidence_gates(facts: TurnFacts, graded: list[GradedHit], cfg: PolicyConfig, scorer: Scorer,
                    answer_p: float, signals: dict[str, object], out) -> GateOutcome:  # noqa: ANN001
    """`answer_p`: the answer threshold the costs give (answer when a section's calibrated
    probability is above it)."""
    th = cfg.thresholds
    signals["answer_p"] = round(answer_p, 3)
    active = [g for g in graded if g.active]
    kind = signals["fact_kind"]
    chosen = best_answer(active, kind)  # type: ignore[arg-type]
    best, doc_p = chosen if chosen else (None, 0.0)
    if best is not None and facts.result is not None and not facts.result.lexical_only:
        best.why = scorer.explain(best.features)  # the audit says why, for the section that decides
    signals["best"] = {"locator": best.hit.locator, "p": round(best.p, 3), "document_p": round(doc_p, 3),
                       "why": best.why} if best else None
    # The likely answers depend on who the caller is (h, asked early: a question put in general
    # words, "how much notice do you need", fits each facet's page only loosely): ask for it.
    near = [g for g in active[:3] if g.p >= th.facet_floor and g.p >= active[0].p - th.facet_margin]
    # A page and its variants for other callers hold each other back; once the caller says which
    # applies, the one left would answer.
    near += [g for g in active if g not in near and g.p_scoped is not None
             and g.p_scoped >= max(th.facet_floor, active[0].p - th.facet_margin)]
    if near and (missing := missing_facets(near, facts, cfg)):
        return out(Action.clarify, [Reason.missing_facet], "h_facet", missing_information=missing,
                   evidence=near, evidence_status="partial")
    # e. Nothing retrieved is about the question.
    if not graded or graded[0].p < th.related_p:
        reason = Reason.low_retrieval_score if graded else Reason.no_relevant_evidence
        return out(Action.refuse, [reason], "e_no_evidence")
    # f. Only outdated or future material answers, or the caller asks about a time a draft covers.
    unsure = scorer.answer_probability(doc_p) < answer_p
    if stale := _not_in_force(graded, best, facts, kind, unsure, signals):  # type: ignore[arg-type]
        return out(Action.refuse, [stale[1]], "f_version", evidence=[stale[0]], evidence_status="background")
    assert best is not None
    # g. Current sources disagree on the asked fact: expose it, never pick a side.
    others = [g for g in active if g is not best]
    if pairs := find_conflicts(best, others, kind, th.conflict_p, facts.unit_similarity):  # type: ignore[arg-type]
        a, b = pairs[0][0], pairs[0][1]
        signals["conflicts"] = [{"with": o.hit.locator, "p": round(o.p, 3), "topic": round(o.topic, 3), "says": d}
                                for _, o, d in pairs]
        high = RISK_ORDER[_risk_of([a, b])] >= RISK_ORDER["high"]
        return out(Action.transfer if high else Action.refuse, [Reason.conflicting_sources], "g_conflict",
                   evidence=[a, b], conflicts=[p[2] for p in pairs], evidence_status="conflicting",
                   team=_team([a, b], cfg))
    # i. Something is about the question but no section answers it: say what is missing.
    confidence = scorer.answer_probability(doc_p)
    signals["answer_probability"] = round(confidence, 3)
    if confidence < answer_p and (scope := _scoped_to_caller(best, facts, th.clarified_p)):
        signals["scoped_to_caller"] = {"facets": scope, "asked": bool(facts.pending_facets)}
    elif confidence < answer_p:
        signals["missing_terms"] = best.missing
        return out(Action.refuse, [Reason.required_fact_not_covered, Reason.partial_evidence], "i_not_covered",
                   evidence=[best], missing_information=best.missing[:3] or [str(signals["fact_kind"])],
                   evidence_status="partial")
    # j. Grounded answer from the current, in-scope section most likely to answer.
    reasons = [Reason.grounded_answer] + ([Reason.embedding_unavailable] if facts.result is not None and facts.result.lexical_only else [])
    return out(Action.answer, reasons, "j_answer", evidence=[best], evidence_status="direct",
               confidence=confidence)


def _not_in_force(graded: list[GradedHit], best: GradedHit | None, facts: TurnFacts, kind: FactKind,
                  unsure: bool, signals: dict[str, object]) -> tuple[GradedHit, Reason] | None:
    """The page that makes this a version refusal, and why: the likeliest page is outdated or not yet
    in force and no current one is sure to answer (`unsure`), or a draft covers the time asked."""
    old = graded[0]
    if not old.active and (best is None or unsure):
        return old, Reason.deprecated_only if old.hit.status == EffectiveStatus.deprecated else Reason.draft_only
    later = _draft_then(best, graded, facts, kind, signals) if best is not None else None
    return (later, Reason.draft_only) if later else None


def _draft_then(best: GradedHit, graded: list[GradedHit], facts: TurnFacts, kind: FactKind,
                signals: dict[str, object]) -> GradedHit | None:
    """A retrieved page not yet in force that will be in force during a time ahead the caller names
    and says the same thing as the sentence `best` would speak (its figure is what would change):
    today's page does not answer for then. The draft's own probability is not asked: beside the
    current page it repeats, it looks unlikely to answer however close it is."""
    periods = asked_periods(facts.question, facts.today) if facts.today else []
    for g in graded if periods else []:
        h = g.hit
        if h.status == EffectiveStatus.draft \
                and any(in_force_during(h.effective_from, h.effective_until, p) for p in periods) \
                and same_fact_units(best, g, kind, facts.unit_similarity):
            signals["asked_ahead"] = {"page": h.locator, "from": str(h.effective_from)}
            return g
    return None
