"""Gold evaluation cases (CONTRACT §3): the typed model and a loader for YAML or JSONL files.

A case is one conversation: a single `question` or several caller `turns`, a caller (role + known
facets), faults to inject, and what a careful human agent would do (`expect`)."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from policy.decision import Action, parse_action


class CasesError(ValueError):
    """A cases file that cannot be used; the message names the path (and case) and the reason."""


def _actions(value: object) -> list[Action]:
    items = value if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ValueError("empty list of actions")
    return [_action(v) for v in items]


def _action(v: object) -> Action:
    return v if isinstance(v, Action) else parse_action(v)


class Expect(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Action | None = None
    action_any: list[Action] | None = None
    # One entry per caller turn; an entry may itself be a list of acceptable actions.
    actions: list[list[Action]] | None = None
    cite_any: list[str] = Field(default_factory=list)
    missing_any: list[str] = Field(default_factory=list)
    team: str | None = None
    contains_all: list[str] = Field(default_factory=list)
    not_contains: list[str] = Field(default_factory=list)
    # conflicting figures: the message may name none of them or all of them, never only some
    not_contains_any_alone: list[str] = Field(default_factory=list)

    @field_validator("action", mode="before")
    @classmethod
    def _one(cls, v: object) -> object:
        return _action(v) if isinstance(v, str) else v

    @field_validator("action_any", mode="before")
    @classmethod
    def _any(cls, v: object) -> object:
        return None if v is None else _actions(v)

    @field_validator("actions", mode="before")
    @classmethod
    def _per_turn(cls, v: object) -> object:
        if v is None:
            return None
        if not isinstance(v, list) or not v:
            raise ValueError("actions must be a non-empty list, one entry per turn")
        return [_actions(x) for x in v]

    @field_validator("cite_any", "missing_any", "contains_all", "not_contains", "not_contains_any_alone",
                     mode="before")
    @classmethod
    def _listify(cls, v: object) -> object:
        if v is None:
            return []
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _some_action(self) -> "Expect":
        given = [x for x in (self.action, self.action_any, self.actions) if x is not None]
        if not given:
            raise ValueError("expect needs one of action, action_any or actions")
        if self.action is not None and self.action_any is not None:
            raise ValueError("give either action or action_any, not both")
        return self


class Caller(BaseModel):
    """The caller's role (for ACLs) and any facets known up front. Facets may be given as extra keys
    (`caller: {role: public, customer_type: business}`) or under `facets:`."""

    model_config = ConfigDict(extra="allow")

    role: str | None = None
    facets: dict[str, str] = Field(default_factory=dict)

    def all_facets(self) -> dict[str, str]:
        extra = {k: str(v) for k, v in (self.model_extra or {}).items() if v is not None}
        return {**extra, **{k: str(v) for k, v in self.facets.items()}}


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    bucket: str = "default"
    question: str | None = None
    turns: list[str] | None = None
    caller: Caller = Field(default_factory=Caller)
    faults: list[str] = Field(default_factory=list)
    expect: Expect
    notes: str | None = None

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, v: object) -> object:
        return str(v) if isinstance(v, int) else v

    @field_validator("faults", mode="before")
    @classmethod
    def _faults(cls, v: object) -> object:
        if v is None:
            return []
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _shape(self) -> "Case":
        if (self.question is None) == (self.turns is None):
            raise ValueError("give exactly one of question or turns")
        if self.turns is not None and not self.turns:
            raise ValueError("turns is empty")
        if any(not str(t).strip() for t in self.caller_turns):
            raise ValueError("empty question text")
        n = len(self.caller_turns)
        if self.expect.actions is not None and len(self.expect.actions) != n:
            raise ValueError(f"expect.actions has {len(self.expect.actions)} entries for {n} turn(s)")
        return self

    @property
    def caller_turns(self) -> list[str]:
        return list(self.turns) if self.turns is not None else [self.question or ""]

    def role(self, default: str = "public") -> str:
        return self.caller.role or default

    def expected_per_turn(self) -> list[list[Action] | None]:
        """Acceptable actions for each turn; None where the case says nothing about a turn.

        `action`/`action_any` on a multi-turn case constrain its last turn only: the earlier turns
        are the conversation that leads there."""
        n = len(self.caller_turns)
        if self.expect.actions is not None:
            return [list(a) for a in self.expect.actions]
        final = [self.expect.action] if self.expect.action is not None else list(self.expect.action_any or [])
        return [None] * (n - 1) + [final]


def _raw_cases(path: Path) -> tuple[list[object], object]:
    """The raw case mappings and the file's `today` (None when it gives none)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CasesError(f"{path}: cannot read cases file: {exc.strerror or exc}") from exc
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise CasesError(f"{path}:{n}: invalid JSON: {exc.msg}") from exc
        return rows, None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CasesError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from exc
    except ValueError as exc:  # a date YAML reads but the calendar lacks ("2026-13-01")
        raise CasesError(f"{path}: today: expected a date like 2026-11-30 ({exc})") from exc
    today = None
    if isinstance(data, dict) and isinstance(data.get("cases"), list):
        today = data.get("today")  # {today: 2026-11-30, cases: [...]}: the date the cases were written for
        data = data["cases"]
    if not isinstance(data, list):
        raise CasesError(f"{path}: expected a list of cases, got {type(data).__name__}")
    return data, today


def _as_date(value: object, path: Path) -> dt.date | None:
    if value is None or isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError as exc:
        raise CasesError(f"{path}: today: expected a date like 2026-11-30, got {value!r}") from exc


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg


class CaseFile(list):
    """The cases of one file (a list of Case), with the date they were written for (`today`)."""

    today: dt.date | None = None


def load_cases(path: str | Path) -> CaseFile:
    """Read and validate a YAML or JSONL cases file. Raises CasesError naming the path, the case id
    (or position) and the reason; case ids must be unique. The result's `today` is the file's date."""
    p = Path(path)
    if not p.is_file():
        raise CasesError(f"{p}: cases file not found")
    cases = CaseFile()
    seen: set[str] = set()
    raws, today = _raw_cases(p)
    cases.today = _as_date(today, p)
    for n, raw in enumerate(raws, 1):
        label = f"case #{n}"
        if isinstance(raw, dict) and raw.get("id") is not None:
            label = f"case {raw['id']!r}"
        if not isinstance(raw, dict):
            raise CasesError(f"{p}: {label}: expected a mapping, got {type(raw).__name__}")
        try:
            case = Case.model_validate(raw)
        except ValidationError as exc:
            raise CasesError(f"{p}: {label}: {_first_error(exc)}") from exc
        if case.id in seen:
            raise CasesError(f"{p}: {label}: duplicate case id")
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise CasesError(f"{p}: no cases in file")
    return cases
