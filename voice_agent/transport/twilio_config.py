"""The `twilio:` section of the server config: the REST credentials and where each team's
transfers ring (a phone number, a SIP address or a Twilio queue), checked when the file loads.

    twilio:
      account_sid: AC...            # or TWILIO_ACCOUNT_SID
      auth_token: ...               # or TWILIO_AUTH_TOKEN
      teams:
        billing: {dial: "+15550100"}
        tech_support: {sip: "sip:desk@example.com"}
      default: {enqueue: "support"} # any team not listed

The environment wins over the file (`TWILIO_ACCOUNT_SID`, `TWILIO_AUTH_TOKEN`, `TWILIO_API_BASE`),
so a deployment can keep the secret out of the file, and rotate it, without editing it.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator, model_validator

__all__ = ["Destination", "TwilioConfig", "with_environment", "ENV_SID", "ENV_TOKEN", "ENV_API_BASE"]

ENV_SID, ENV_TOKEN, ENV_API_BASE = "TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_API_BASE"
_PHONE = re.compile(r"\+?[0-9]{3,15}")  # E.164 at most 15 digits; short codes and extensions are shorter
_SID = re.compile(r"AC[0-9a-fA-F]{32}")


class Destination(BaseModel):
    """Exactly one of: a number to `<Dial>`, a SIP address to `<Dial><Sip>`, a queue to `<Enqueue>`."""
    model_config = {"extra": "forbid", "frozen": True}

    dial: str | None = None
    sip: str | None = None
    enqueue: str | None = Field(None, min_length=1, max_length=64)  # Twilio's limit on a queue name

    @model_validator(mode="after")
    def _exactly_one(self) -> "Destination":
        given = [k for k in ("dial", "sip", "enqueue") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of dial, sip, enqueue (got {', '.join(given) or 'none'})")
        if self.dial is not None and not _PHONE.fullmatch(self.dial.replace(" ", "")):
            raise ValueError(f"dial {self.dial!r} is not a phone number (+ and 3 to 15 digits)")
        if self.sip is not None and not re.fullmatch(r"sips?:[^@\s]+@[^@\s]+", self.sip):
            raise ValueError(f"sip {self.sip!r} is not a SIP address (sip:user@host)")
        return self

    @property
    def kind(self) -> Literal["dial", "sip", "enqueue"]:
        return "dial" if self.dial is not None else "sip" if self.sip is not None else "enqueue"

    @property
    def target(self) -> str:
        return self.dial or self.sip or self.enqueue or ""

    def describe(self) -> str:
        return f"{self.kind} {self.target}"


class TwilioConfig(BaseModel):
    model_config = {"extra": "forbid"}

    account_sid: str | None = Field(None, description="the account the calls belong to (AC...)")
    auth_token: str | None = Field(None, repr=False, description="the account's auth token")
    api_base: str | None = Field(None, description="REST API base URL; default https://api.twilio.com")
    teams: dict[str, Destination] = Field(default_factory=dict, description="handoff team -> destination")
    default: Destination = Field(description="where a team not in `teams` goes")
    # The transfer message must finish playing before the call leaves the stream: wait for
    # Twilio's echo of the transfer mark, or this long (replies run up to ~2 s ahead of playback).
    mark_wait_s: float = Field(5.0, gt=0, le=60)
    timeout_s: float = Field(10.0, gt=0, le=60, description="limit on the REST call that redirects the call")

    @field_validator("teams")
    @classmethod
    def _team_names(cls, v: dict[str, Destination]) -> dict[str, Destination]:
        if any(not str(name).strip() for name in v):
            raise ValueError("team names must be non-empty")
        return v

    @field_validator("account_sid")
    @classmethod
    def _sid(cls, v: str | None) -> str | None:
        if v is not None and not _SID.fullmatch(v):
            raise ValueError(f"{v!r} is not an account SID (AC and 32 hex digits)")
        return v

    @field_validator("api_base")
    @classmethod
    def _base(cls, v: str | None) -> str | None:
        if v is None:
            return v
        u = urlsplit(v)
        if u.scheme not in ("http", "https") or not u.hostname or u.path not in ("", "/") or u.query:
            raise ValueError(f"{v!r} is not a base URL like https://api.twilio.com")
        return v.rstrip("/")

    def destination(self, team: str | None) -> Destination:
        return self.teams.get(team or "", self.default)


def with_environment(cfg: TwilioConfig, env: Mapping[str, str]) -> TwilioConfig:
    """`cfg` with the environment's credentials and API base in place of the file's; raises
    ValueError when either credential is missing from both."""
    update = {k: env[e] for k, e in (("account_sid", ENV_SID), ("auth_token", ENV_TOKEN), ("api_base", ENV_API_BASE))
              if env.get(e)}
    merged = TwilioConfig.model_validate({**cfg.model_dump(exclude_none=True), **update})
    missing = [e for k, e in (("account_sid", ENV_SID), ("auth_token", ENV_TOKEN)) if not getattr(merged, k)]
    if missing:
        raise ValueError(f"no {' or '.join(k.lower().removeprefix('twilio_') for k in missing)}: give it in the "
                         f"file or in {' / '.join(missing)}")
    return merged
