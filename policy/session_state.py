"""A conversation's state as plain data: what `Session.snapshot()` returns and what a session is
rebuilt from (`Engine.session(state=...)`). It outlives the process that made it: `run.py ask
--session FILE` keeps it in a file between invocations, and the server checkpoints it after every
turn so that another server can resume the call."""
from __future__ import annotations

import uuid

from pydantic import BaseModel, Field


def new_session_id() -> str:
    return uuid.uuid4().hex[:12]


class SessionState(BaseModel):
    """Everything a conversation remembers between turns (the evidence a turn retrieved is not
    kept: the pre-speech recheck only ever concerns the turn just decided, in its own process)."""

    model_config = {"extra": "ignore"}  # a file written by a newer version still loads

    session_id: str = Field(default_factory=new_session_id)
    role: str = "public"
    facets: dict[str, str] = Field(default_factory=dict)
    pending_question: str | None = None  # the question a clarify waits on
    pending_facets: list[str] = Field(default_factory=list)  # what that clarify asked for
    clarify_retries: int = 0  # answers to it that could not be read
    last_question: str | None = None  # the latest question decided, for context given after it
    topic_team: str | None = None  # the team of what the conversation is about, for transfers
    transcript: list[str] = Field(default_factory=list)
    turns: int = 0
