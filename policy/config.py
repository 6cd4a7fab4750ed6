"""The versioned policy file (YAML) and its per-KB override."""
from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

DEFAULT_POLICY_FILE = Path(__file__).with_name("default_policy.yaml")
KB_OVERRIDE_NAME = "_policy.yaml"  # not *.md, so the KB loader never reads it as a document


class Thresholds(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a mistyped setting must not fall back silently
    # The answer threshold is not here: it follows from the costs (scorer.answer_threshold).
    related_p: float = 0.35  # below this probability of answering, a section is not about the question
    conflict_p: float = 0.5  # sections at least this likely to answer are compared for conflicting figures
    facet_margin: float = 0.3  # likely answers within this of the best decide whether a facet matters
    facet_floor: float = 0.35  # ... if at least this likely
    clarified_p: float = 0.5  # a page scoped to who the caller said they are (asked or unasked) answers this likely
    min_dense: float = 0.30  # an approval action's own section must be at least this close in meaning
    # a turn the turn probes (policy/turn_probes.py) put at least this likely to be urgent goes to a
    # person; at least this likely to be a disallowed request, it is refused
    urgent_p: float = 0.8
    disallowed_p: float = 0.8
    human_request_p: float = 0.7  # ... at least this likely to ask for a person, it is transferred
    risk_min_dense: float = 0.40  # a critical section must be at least this close to route a transfer
    # a high-risk page only weakly likely to answer routes a transfer only when the urgent probe reads
    # the turn as more likely urgent than not (without the probe, it always does)
    weak_risk_urgency: float = 0.5
    threshold_baseline: float = 0.020  # `--policy threshold`: top fused score needed to answer
    answer_coverage: float = 0.60  # `--policy minimal`: key-term coverage needed to answer
    max_clarify_facets: int = 2
    soft_match: float = 0.6  # word cosine at which a section's word counts as saying the caller's word

    def probe_p(self, head: str) -> float:
        """The probability at which a turn probe's head counts: `<head>_p` (`urgent_p`, `disallowed_p`,
        `human_request_p`)."""
        return float(getattr(self, f"{head}_p"))


class Costs(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a mistyped setting must not fall back silently
    answer_instead_of_refuse_or_transfer: float = 10
    answer_instead_of_clarify: float = 6
    refuse_or_transfer_instead_of_answer: float = 3
    clarify_instead_of_answer: float = 2
    other_mismatch: float = 1


class Lexicons(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a mistyped setting must not fall back silently
    human_request: list[str] = Field(default_factory=list)
    disallowed: list[str] = Field(default_factory=list)
    approval_actions: list[str] = Field(default_factory=list)


class Intent(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a mistyped setting must not fall back silently
    threshold: float = 0.72
    examples: list[str] = Field(default_factory=list)
    # Short forms as said down a phone line: examples for meaning too, and the phrases a short turn's
    # audio is weighed against (voice_agent/stages/asr_fit.py)
    spoken: list[str] = Field(default_factory=list)


class PolicyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a mistyped setting must not fall back silently
    version: str
    retrieval: dict[str, object] = Field(default_factory=lambda: {"k": cast(object, 8)})  # as the YAML has it
    thresholds: Thresholds = Field(default_factory=Thresholds)
    costs: Costs = Field(default_factory=Costs)
    lexicons: Lexicons = Field(default_factory=Lexicons)
    intents: dict[str, Intent] = Field(default_factory=dict)
    facet_synonyms: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    facet_questions: dict[str, str] = Field(default_factory=dict)
    # {KB phrase: [callers' phrases]}: "vacation days" is read as "annual leave" (policy/normalize.py)
    synonyms: dict[str, list[str]] = Field(default_factory=dict)
    default_team: str = "customer_care"
    # Where a caller in danger or distress goes (a welfare or safeguarding desk); None: the team of
    # the closest high-risk page among the hits, else default_team.
    distress_team: str | None = None
    sources: list[str] = Field(default_factory=list)  # files merged into this config, for the audit

    @property
    def k(self) -> int:
        return int(cast("int | float | str", self.retrieval.get("k", 8)))  # a YAML number; int() rejects the rest

    def fingerprint(self) -> str:
        """Version plus a hash of the effective settings: two configs that decide alike share it."""
        body = self.model_dump(exclude={"sources"})
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:8]
        return f"{self.version}+{digest}"

    def with_thresholds(self, **changes: float) -> "PolicyConfig":
        return self.model_copy(update={"thresholds": self.thresholds.model_copy(update=changes)})


class PolicyConfigError(ValueError):
    pass


def _read_yaml(path: Path) -> dict[str, object]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyConfigError(f"{path}: cannot read policy file: {exc}".splitlines()[0]) from exc
    if not isinstance(data, dict):
        raise PolicyConfigError(f"{path}: policy file must be a YAML mapping")
    return data


def _merge(base: dict[str, object], over: dict[str, object]) -> dict[str, object]:
    out = dict(base)
    for key, value in over.items():
        current = out.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            out[key] = _merge(current, value)
        else:
            out[key] = value
    return out


def load_policy_config(path: str | Path | None = None, kb_dir: str | Path | None = None) -> PolicyConfig:
    """Default policy, then `path` (a full or partial policy file), then the KB's own override."""
    files = [DEFAULT_POLICY_FILE]
    if path:
        files.append(Path(path))
    if kb_dir and (Path(kb_dir) / KB_OVERRIDE_NAME).is_file():
        files.append(Path(kb_dir) / KB_OVERRIDE_NAME)
    data: dict[str, object] = {}
    for f in files:
        data = _merge(data, _read_yaml(f))
    data["sources"] = [str(f) for f in files]
    try:
        return PolicyConfig.model_validate(data)
    except ValidationError as exc:
        raise PolicyConfigError(f"{files[-1]}: invalid policy settings: {_explain(exc.errors()[0])}") from exc


def _explain(err: ErrorDetails) -> str:
    """One validation error in the file's own terms: the dotted key, and a did-you-mean for a typo."""
    where = ".".join(str(p) for p in err["loc"])
    if err["type"] != "extra_forbidden":
        return f"{where}: {err['msg']}"
    model: type[BaseModel] = PolicyConfig
    for part in err["loc"][:-1]:
        field = model.model_fields.get(str(part))
        inner = field.annotation if field else None
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            break
        model = inner
    hint = difflib.get_close_matches(str(err["loc"][-1]), list(model.model_fields), n=1)
    return f"unknown setting {where!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
