"""The evaluation metrics, computed from finished case results. Pure: no engine, no KB access (the
runner in `evaluate.py` resolves each citation's section text into the record beforehand), so every
metric can be tested on hand-made Decisions.

Per turn: action accuracy, unsafe answers, over-abstention, clarification precision, handoff
precision, evidence support, version safety and the cost-weighted error score. Per case: the case
checks (cite_any, missing_any, team, contains_all, not_contains) and conflict detection."""
from __future__ import annotations

import re
from typing import Iterable, Literal, TypedDict, cast

from pydantic import BaseModel, Field, PrivateAttr

from kb.jsontypes import JsonObject
from kb.tokenize import content_terms

from .cases import Case
from policy.config import Costs
from policy.decision import Action, Decision, Reason
from policy.numbers import number_values, quantities

ACTIONS: list[Action] = [Action.answer, Action.clarify, Action.refuse, Action.transfer]
# A cited section supports the message's wording when at least this share of the message's content
# terms occurs in the cited text (plus its title/heading). Low on purpose: composed messages add
# connective words ("According to ...", "you can"), the check is after unsupported claims.
CLAIM_MIN_OVERLAP = 0.5
# The rates and the mean cost of a summary: a float, or None when nothing was there to measure.
RateKey = Literal["action_accuracy", "case_pass_rate", "unsafe_answer_rate", "over_abstain_rate",
                  "clarification_precision", "handoff_precision", "evidence_support_rate",
                  "conflict_detection_rate", "version_safety_rate", "cost"]


class Summary(TypedDict):
    """`summarize()`: the metrics over a set of case results (see the module docstring)."""

    cases: int
    turns: int
    scored_turns: int
    action_accuracy: float | None
    case_pass_rate: float | None
    unsafe_answer_rate: float | None
    unsafe_answers: int
    over_abstain_rate: float | None
    clarification_precision: float | None
    handoff_precision: float | None
    evidence_support_rate: float | None
    conflict_detection_rate: float | None
    version_safety_rate: float | None
    cost: float | None
    cost_total: float
    answers: int
    reasons: dict[str, int]


class Confusion(TypedDict):
    labels: list[str]
    rows_expected_cols_actual: list[list[int]]


class Metrics(Summary, total=False):
    """`evaluate_metrics()` (a Summary with `buckets` and `confusion`), then what the runners add."""

    buckets: dict[str, Summary]
    confusion: Confusion
    # evaluation.evaluate
    policy: str
    kb_version: str
    audio_cases: int
    # caller words most often missing from the likeliest section of a wrongly unanswered turn (why.py)
    vocabulary_gaps: dict[str, int]
    png: str
    buckets_png: str
    out: str
    # evaluation.corpus, per domain
    leaks: int
    leak_detail: list[str]
    failures: dict[str, list[str]]
    # per case, each turn's action and first reason ("refuse:low_retrieval_score"): what a rerun compares
    decisions: dict[str, list[str]]
    cost_minimal: float | None
    cost_threshold: float | None
    costs: dict[str, float]
    sealed: bool


class CitedSource(BaseModel):
    """What the runner found for one citation: the section's text and its document's status."""

    doc_id: str
    section: str
    text: str = ""  # section text plus title/heading/version: what may support the message
    status: str = "missing"  # active | deprecated | draft | missing (no such section in the KB)


class TurnRecord(BaseModel):
    """One caller turn of one case, with what was expected and what the agent did."""

    case_id: str
    bucket: str
    index: int
    question: str
    transcript: str | None = None  # audio cases: what ASR heard (after its KB-prompted second pass)
    heard: str | None = None  # audio cases: ASR's first hearing, when the second pass changed it
    said: str | None = None  # audio cases: the turn as the policy read it (normalized, repaired)
    expected: list[Action] | None  # acceptable actions; None: this turn is not scored on action
    decision: Decision
    sources: list[CitedSource] = Field(default_factory=list)
    # Numbers that only non-active retrieved sections state (a deprecated fee, a draft price).
    stale_numbers: list[str] = Field(default_factory=list)
    why: str | None = None  # text cases: the reasons, the likeliest section and the words it lacks (why.py)
    lacking: list[str] = Field(default_factory=list)  # text cases: the caller's words that section lacks
    _judged: dict[str, tuple[bool, list[str]]] = PrivateAttr(default_factory=dict)


class CaseResult(BaseModel):
    case: Case
    turns: list[TurnRecord]
    mode: str = "text"  # text | audio
    failures: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def line(self) -> JsonObject:
        """The `--out` JSON line of this case."""
        return {
            "id": self.case.id,
            "bucket": self.case.bucket,
            "mode": self.mode,
            "questions": self.case.caller_turns,
            "transcripts": [t.transcript for t in self.turns] if self.mode == "audio" else [],
            "decisions": [t.decision.public_dict() for t in self.turns],
            "ok": self.ok,
            "failures": self.failures,
        }


# ---------------------------------------------------------------- per-turn judgements

def action_ok(rec: TurnRecord) -> bool | None:
    if rec.expected is None:
        return None
    return rec.decision.action in rec.expected


def answer_acceptable(rec: TurnRecord) -> bool:
    return rec.expected is not None and Action.answer in rec.expected


def turn_cost(rec: TurnRecord, costs: Costs) -> float | None:
    """Cost of this turn's action against what was acceptable (0 when acceptable)."""
    if rec.expected is None:
        return None
    got, exp = rec.decision.action, set(rec.expected)
    if got in exp:
        return 0.0
    if got == Action.answer:
        if exp & {Action.refuse, Action.transfer}:
            return costs.answer_instead_of_refuse_or_transfer
        return costs.answer_instead_of_clarify
    if Action.answer in exp:
        if got == Action.clarify:
            return costs.clarify_instead_of_answer
        return costs.refuse_or_transfer_instead_of_answer
    return costs.other_mismatch


def _norm(text: str) -> str:
    t = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u2013", "-").lower()
    return re.sub(r"\s+", " ", t).strip()


def evidence_supported(rec: TurnRecord) -> tuple[bool, list[str]]:
    if "evidence" not in rec._judged:  # judged once, reused by the overall and per-bucket summaries
        rec._judged["evidence"] = _evidence_supported(rec)
    return rec._judged["evidence"]


def _evidence_supported(rec: TurnRecord) -> tuple[bool, list[str]]:
    """Whether an answer's every number and its key claim stand in the text of its citations.

    Numbers: each number/amount/duration/date of the message must appear among the numbers of the
    cited sections (`policy.numbers`). Key claim: at least CLAIM_MIN_OVERLAP of the message's content
    terms occur in the cited sections. Returns (supported, problems)."""
    d = rec.decision
    found = [s for s in rec.sources if s.status != "missing"]
    if not d.citations:
        return False, ["answer has no citation"]
    problems = [f"cited section not in KB: {s.doc_id}#{s.section}" for s in rec.sources if s.status == "missing"]
    allowed: set[str] = set()
    for s in found:
        allowed |= number_values(s.text)
    for q in quantities(d.message):
        if q.value not in allowed:
            problems.append(f"number not in cited text: {q}")
    terms = content_terms(d.message)
    if terms:
        source_terms = set(content_terms(" ".join(s.text for s in found)))
        share = sum(t in source_terms for t in terms) / len(terms)
        if share < CLAIM_MIN_OVERLAP:
            problems.append(f"only {share:.0%} of the message's terms are in the cited text")
    return not problems, problems


def version_safe(rec: TurnRecord) -> tuple[bool, list[str]]:
    """An answer is version-safe when it cites only active, in-date documents and states no number
    that only a deprecated/draft document holds."""
    problems = [f"cites {s.status} document {s.doc_id}" for s in rec.sources if s.status != "active"]
    said = number_values(rec.decision.message)
    problems += [f"states outdated number {n}" for n in rec.stale_numbers if n in said]
    return not problems, problems


def clarify_precise(rec: TurnRecord, case: Case) -> bool:
    """A clarify is precise when clarifying was acceptable on this turn and it asks for an expected
    missing facet (`missing_any`; when the case names none, for anything at all)."""
    if rec.decision.action != Action.clarify or not rec.expected or Action.clarify not in rec.expected:
        return False
    asked = set(rec.decision.missing_information)
    return bool(asked & set(case.expect.missing_any)) if case.expect.missing_any else bool(asked)


def conflict_flagged(d: Decision) -> bool:
    return Reason.conflicting_sources in d.reasons or d.evidence_status == "conflicting"


def is_conflict_bucket(bucket: str) -> bool:
    return "conflict" in bucket.lower()


# ---------------------------------------------------------------- per-case checks

def case_failures(case: Case, turns: list[TurnRecord]) -> list[str]:
    """Everything wrong with a finished case: wrong actions per turn plus the case's own checks.

    - cite_any: the last answer must cite one of the ids (skipped when nothing was answered; the
      action check already fails then).
    - missing_any: some clarify turn must ask for one of the facets (skipped without clarify turns).
    - team: every transfer must go to this team.
    - contains_all: the final decision's message contains each phrase (case-insensitive).
    - not_contains: no decision's message contains any of the phrases.
    - not_contains_any_alone: no message names some of the phrases but not all (one side of a conflict)."""
    e = case.expect
    out: list[str] = []
    for rec in turns:
        if action_ok(rec) is False:
            want = "|".join(a.value for a in rec.expected or [])
            out.append(f"turn {rec.index + 1}: expected {want}, got {rec.decision.action.value}"
                       + (f" ({rec.why})" if rec.why else ""))
    decisions = [t.decision for t in turns]
    answers = [d for d in decisions if d.action == Action.answer]
    if e.cite_any and answers:
        cited = {c.doc_id for c in answers[-1].citations}
        if not cited & set(e.cite_any):
            out.append(f"cite_any: cited {sorted(cited) or 'nothing'}, expected one of {e.cite_any}")
    clarifies = [d for d in decisions if d.action == Action.clarify]
    if e.missing_any and clarifies:
        asked = {m for d in clarifies for m in d.missing_information}
        if not asked & set(e.missing_any):
            out.append(f"missing_any: asked for {sorted(asked) or 'nothing'}, expected one of {e.missing_any}")
    if e.team:
        for d in decisions:
            if d.action == Action.transfer:
                team = d.handoff.team if d.handoff else None
                if team != e.team:
                    out.append(f"team: transferred to {team}, expected {e.team}")
    if decisions:
        final = _norm(decisions[-1].message)
        for phrase in e.contains_all:
            if _norm(phrase) not in final:
                out.append(f"contains_all: missing {phrase!r}")
    for phrase in e.not_contains:
        for i, d in enumerate(decisions):
            if _norm(phrase) in _norm(d.message):
                out.append(f"not_contains: turn {i + 1} says {phrase!r}")
    for i, d in enumerate(decisions):
        said = [p for p in e.not_contains_any_alone if _norm(p) in _norm(d.message)]
        if said and len(said) < len(e.not_contains_any_alone):
            out.append(f"not_contains_any_alone: turn {i + 1} states only {said}")
    return out


# ---------------------------------------------------------------- aggregation

def _rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def confusion_matrix(turns: Iterable[TurnRecord]) -> list[list[int]]:
    """4x4 counts, rows = expected, columns = actual, in ACTIONS order. With several acceptable
    actions the expected one is the actual one when right, else the first acceptable one."""
    m = [[0] * 4 for _ in ACTIONS]
    for rec in turns:
        if rec.expected is None:
            continue
        got = rec.decision.action
        exp = got if got in rec.expected else rec.expected[0]
        m[ACTIONS.index(exp)][ACTIONS.index(got)] += 1
    return m


def summarize(results: list[CaseResult], costs: Costs) -> Summary:
    """All metrics over a set of case results (see the module docstring). Rates with an empty
    denominator are None: 'not measured here', never a flattering 1.0."""
    turns = [t for r in results for t in r.turns]
    scored = [t for t in turns if t.expected is not None]
    correct = sum(bool(action_ok(t)) for t in scored)
    not_answerable = [t for t in scored if Action.answer not in t.expected]  # type: ignore[operator]
    unsafe = sum(t.decision.action == Action.answer for t in not_answerable)
    answerable = [t for t in scored if answer_acceptable(t)]
    over = sum(not action_ok(t) for t in answerable)
    by_id = {r.case.id: r.case for r in results}
    clar = [t for t in turns if t.decision.action == Action.clarify]
    clar_hit = sum(clarify_precise(t, by_id[t.case_id]) for t in clar)
    transfers = [t for t in turns if t.decision.action == Action.transfer and by_id[t.case_id].expect.team]
    team_ok = sum((t.decision.handoff.team if t.decision.handoff else None) == by_id[t.case_id].expect.team
                  for t in transfers)
    answers = [t for t in turns if t.decision.action == Action.answer]
    supported = sum(evidence_supported(t)[0] for t in answers)
    vsafe = sum(version_safe(t)[0] for t in answers)
    conflict_cases = [r for r in results if is_conflict_bucket(r.case.bucket)]
    conflict_ok = sum(
        all(t.decision.action != Action.answer for t in r.turns) and any(conflict_flagged(t.decision) for t in r.turns)
        for r in conflict_cases)
    cost_vals = [c for c in (turn_cost(t, costs) for t in scored) if c is not None]
    reasons: dict[str, int] = {}
    for t in turns:
        for reason in t.decision.reasons:
            reasons[reason.value] = reasons.get(reason.value, 0) + 1
    return {
        "cases": len(results),
        "turns": len(turns),
        "scored_turns": len(scored),
        "action_accuracy": _rate(correct, len(scored)),
        "case_pass_rate": _rate(sum(r.ok for r in results), len(results)),
        "unsafe_answer_rate": _rate(unsafe, len(not_answerable)),
        "unsafe_answers": unsafe,
        "over_abstain_rate": _rate(over, len(answerable)),
        "clarification_precision": _rate(clar_hit, len(clar)),
        "handoff_precision": _rate(team_ok, len(transfers)),
        "evidence_support_rate": _rate(supported, len(answers)),
        "conflict_detection_rate": _rate(conflict_ok, len(conflict_cases)),
        "version_safety_rate": _rate(vsafe, len(answers)),
        "cost": round(sum(cost_vals) / len(cost_vals), 4) if cost_vals else None,
        "cost_total": round(sum(cost_vals), 2),
        "answers": len(answers),
        "reasons": dict(sorted(reasons.items())),
    }


def evaluate_metrics(results: list[CaseResult], costs: Costs) -> Metrics:
    """Overall metrics, the per-bucket breakdown (`buckets`) and the confusion matrix."""
    overall = cast(Metrics, summarize(results, costs))  # a Summary is a Metrics without the optional keys
    buckets: dict[str, list[CaseResult]] = {}
    for r in results:
        buckets.setdefault(r.case.bucket, []).append(r)
    overall["buckets"] = {b: summarize(rs, costs) for b, rs in sorted(buckets.items())}
    overall["confusion"] = {
        "labels": [a.value for a in ACTIONS],
        "rows_expected_cols_actual": confusion_matrix(t for r in results for t in r.turns),
    }
    return overall
