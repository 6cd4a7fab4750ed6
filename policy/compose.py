"""Spoken messages for the four actions. Answers are extractive: sentences lifted from the cited
section, never generated. Nothing here names a document the caller may not see: every title and
quote comes from this turn's hits, which are already filtered by the caller's role."""
from __future__ import annotations

import unicodedata

from .config import PolicyConfig
from .decision import Action, Citation, Reason
from .evidence import GradedHit, best_units
from .gates import GateOutcome
from .language import without_openers
from .normalize import common_words

def _speakable_source(g: GradedHit) -> str:
    title = g.hit.title.rstrip(".")
    first, _, rest = title.partition(" ")
    # "Early cancellation refunds" -> "early …", but names stay as written ("Northbeam Hub 3", and
    # "Family Safe parental controls", where the capital on the next word marks a two-word name)
    if first.lower() in common_words() and not rest[:1].isupper():
        title = f"{first.lower()} {rest}".strip()
    version = f", version {g.hit.version}" if g.hit.version else ""
    return f"According to our {title}{version}"


def topic_phrase(question: str) -> str:
    """The caller's own question, trimmed, to name what could not be confirmed (never a KB title)."""
    q = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in question[:2000])  # control, format
    q = " ".join(q.split()).rstrip("?.! ")
    q = without_openers(q)
    words = [w if len(w) <= 30 else w[:30] + "..." for w in q.split()]  # a "word" may be a pasted blob
    return f"\"{' '.join(words[:14])}{'...' if len(words) > 14 else ''}\""


_ASKED = {"amount": "what it costs", "duration": "how long it takes", "when": "when", "count": "how many",
          "contact": "which number or address to use"}


def _what_is_asked(kind: str, topic: str) -> str:
    """What the found page does not say, in plain words: the asked kind of fact, else the question."""
    return _ASKED.get(kind, f"anything that answers {topic}")


_SOCIAL_REPLIES = {
    "greeting": "Hello! What can I help you with today?",
    "thanks": "You're welcome. Is there anything else I can help you with?",
    "ack": "Is there anything else I can help you with?",
    "closing": "Thank you for calling. Goodbye!",
}


def _options(values: list[str]) -> str:
    words = [v.replace("_", " ") for v in values]
    return " or ".join(words) if len(words) <= 2 else f"{', '.join(words[:-1])} or {words[-1]}"


def _clarify_question(o: GateOutcome, cfg: PolicyConfig) -> str:
    """One short question for the missing facet, naming the options; on a second try, only the options."""
    raw = o.signals.get("options")
    options: dict[str, list[str]] = raw if isinstance(raw, dict) else {}
    asks = []
    for key in o.missing_information:
        values = list(options.get(key, []))
        name = key.replace("_", " ")
        plain = f"Is that {_options(values)}?" if len(values) > 1 else f"Could you tell me your {name}?"
        if o.signals.get("retry"):
            asks.append(f"Sorry, I didn't catch your {name}. Is it {_options(values)}?" if len(values) > 1 else plain)
        else:
            asks.append(cfg.facet_questions.get(key) or f"It depends on your {name}. {plain}")
    if len(asks) > 1:
        return f"To answer that correctly I need two things. {asks[0]}"
    return asks[0]


def _clarify_message(o: GateOutcome, cfg: PolicyConfig) -> str:
    if Reason.asr_low_confidence in o.reasons:
        return "Sorry, I didn't catch that. Could you say it again, a little more slowly?"
    if talk := o.signals.get("small_talk"):
        return _SOCIAL_REPLIES[str(talk)]
    if Reason.question_needed in o.reasons:
        ctx = o.signals.get("context")
        facets = ctx.items() if isinstance(ctx, dict) else []
        noted = " and ".join(f"your {k.replace('_', ' ')} is {v}" for k, v in facets)
        return f"Thanks, I've noted that {noted}. What would you like to know?"
    return _clarify_question(o, cfg)


def team_phrase(team: str) -> str:
    """A queue as the caller hears it: "billing" and "billing_team" are both "billing team"."""
    name = team.replace("_", " ")
    return name if name.split()[-1:] == ["team"] else f"{name} team"


def _transfer_message(o: GateOutcome, cfg: PolicyConfig) -> str:
    if o.gate == "c_distress":
        # A caller in danger or distress hears care first, never "a specialist", and no queue's name: on
        # a KB without a crisis page the nearest high-risk team may be complaints (the handoff keeps it).
        return ("I'm sorry you're going through this. Please stay on the line: I'm putting you through to a "
                "person now, with what you've told me, so you won't need to repeat yourself. If you are in "
                "danger right now, call the emergency services.")
    team = team_phrase(o.team or cfg.default_team)
    if Reason.human_requested in o.reasons:
        lead = "Of course."
    elif Reason.conflicting_sources in o.reasons:
        lead = "Our current documents disagree on this, so I won't guess."
    elif Reason.tts_unavailable in o.reasons:
        lead = "I'm having trouble with my voice system."
    else:
        lead = "This is something a specialist needs to handle."
    return (f"{lead} I'm transferring you to our {team} now. I'm passing along your question and "
            "what I found, so you won't need to repeat yourself.")


def _refusal(o: GateOutcome, kind: str, topic: str) -> str:
    """Why the agent will not answer, specific to the first reason that applies."""
    r = set(o.reasons)
    if Reason.disallowed_request in r:
        return "I'm sorry, I can't help with that request. If there is something about your own account I can check, I'm happy to."
    if Reason.retrieval_unavailable in r:
        return ("I'm sorry, I can't look that up right now because our information system is not responding. "
                "Please try again in a few minutes, or ask for an agent and I'll transfer you.")
    if Reason.deprecated_only in r:
        return (f"I can't confirm the current rule for {topic}. The only material I found on it is outdated, "
                "so I won't quote it as the rule. An agent can confirm the current policy if you'd like.")
    if Reason.draft_only in r and "asked_ahead" in o.signals:
        return ("I can't confirm that for the time you're asking about. What will apply then is not final yet, "
                "so I won't give you today's details as if they still hold. An agent can tell you more if you'd like.")
    if Reason.draft_only in r:
        return (f"I can't confirm that yet. The only material I found for {topic} describes something that is "
                "not in force yet, so I can't give it to you as the rule. An agent can tell you more if you'd like.")
    if Reason.conflicting_sources in r:
        titles = " and ".join(g.hit.title for g in o.evidence[:2])
        return (f"I can't confirm that. Two of our current documents, {titles}, give different figures on this, "
                "and I won't pick one for you. An agent can confirm which applies.")
    if Reason.required_fact_not_covered in r and o.evidence:
        g = o.evidence[0]
        return (f"I can't confirm that. I found our {g.hit.title}, but it doesn't say {_what_is_asked(kind, topic)}. "
                "I'd rather not guess. An agent can help with this if you'd like.")
    return (f"I'm sorry, I can't confirm that. Nothing in our help information answers {topic}, "
            "and I don't want to guess. You can ask for an agent and I'll transfer you.")


def compose(o: GateOutcome, question: str, cfg: PolicyConfig) -> tuple[str, list[Citation]]:
    """The spoken message and its citations for a gate outcome."""
    kind = str(o.signals.get("fact_kind", "any"))
    topic = topic_phrase(question)
    if o.action == Action.answer:
        g = o.evidence[0]
        body = " ".join(best_units(g, kind))  # type: ignore[arg-type]
        cite = Citation(doc_id=g.doc_id, section=g.hit.section, version=g.hit.version)
        return f"{_speakable_source(g)}: {body}", [cite]
    if o.action == Action.clarify:
        return _clarify_message(o, cfg), []
    if o.action == Action.transfer:
        return _transfer_message(o, cfg), []
    return _refusal(o, kind, topic), []
