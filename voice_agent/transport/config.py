"""Websocket server settings: token → role map and per-connection / global limits.

Loaded from a small YAML file (`fixtures/server.yaml` is the committed example):

    tokens:
      secret-agent-token: agent
    max_calls: 4
    max_frame_bytes: 65536
    twilio: {...}            # optional: where transfers ring (see twilio_config.py)

Every field has a documented default, so an empty file (or no file) is a valid config with no
tokens: every caller is `public`, and any token a client sends is rejected as unknown.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from .twilio_config import TwilioConfig, with_environment

__all__ = ["ServerConfig", "ServerConfigError", "load_server_config", "DEFAULT_CONFIG_FILE"]

DEFAULT_CONFIG_FILE = "server.yaml"  # read from the working directory when present


class ServerConfigError(ValueError):
    """A server config that cannot be used; the message names the file and the reason."""


class ServerConfig(BaseModel):
    model_config = {"extra": "forbid"}  # a typo in a limit must not silently fall back to a default

    tokens: dict[str, str] = Field(default_factory=dict, description="bearer token -> caller role")
    # Two cores run ASR for everybody; past this many calls new callers get `busy` (close 1013)
    # instead of every call slowing down.
    max_calls: int = Field(4, ge=1, le=256)
    max_frame_bytes: int = Field(64 * 1024, ge=1024, description="largest websocket message accepted")
    max_text_chars: int = Field(1000, ge=1, description="longest typed turn")
    max_turn_s: float = Field(30.0, gt=0, description="longest caller turn (audio) before it is cut")
    max_session_s: float = Field(1800.0, gt=0, description="longest call, wall clock")
    start_timeout_s: float = Field(10.0, gt=0, description="time a client has to send `start`")
    idle_timeout_s: float = Field(60.0, gt=0, description="a call that sends nothing for this long, with no "
                                  "reply in flight, is closed (a squatter holding a call slot)")
    # Per remote address (see admission.py). Behind a proxy list it in trusted_proxies so the
    # client's own address is read from X-Forwarded-For.
    max_calls_per_address: int = Field(0, ge=0, description="concurrent calls from one address; 0: no limit")
    connects_per_minute_per_address: int = Field(0, ge=0, description="new connections a minute from one "
                                                 "address; 0: no limit")
    token_failures_free: int = Field(3, ge=0, description="wrong tokens from one address before backoff")
    token_backoff_max_s: float = Field(300.0, gt=0, description="longest backoff after wrong tokens "
                                       "(it doubles from 1 s)")
    trusted_proxies: list[str] = Field(default_factory=list, description="addresses whose X-Forwarded-For "
                                       "is believed")
    desk_roles: list[str] = Field(default_factory=lambda: ["agent"], description="token roles that may read "
                                  "GET /v1/handoffs")
    webhook_url: str | None = Field(None, description="POSTed a JSON body for each new handoff")
    webhook_secret: str | None = Field(None, description="HMAC-SHA256 key signing the webhook body "
                                       "(env VOICE_AGENT_WEBHOOK_SECRET wins)")
    webhook_retries: int = Field(3, ge=0, le=10, description="retries of a failed webhook delivery")
    max_protocol_errors: int = Field(20, ge=1, description="bad events tolerated before closing")
    end_silence_ms: int = Field(500, ge=100, le=5000)
    sample_rates: list[int] = Field(default_factory=lambda: [8000, 16000, 22050, 24000, 32000, 44100, 48000])
    drain_timeout_s: float = Field(20.0, gt=0, description="how long shutdown waits for in-flight turns")
    twilio: TwilioConfig | None = Field(None, description="REST credentials and team destinations; without "
                                        "it a Twilio transfer is only a mark and the call is not redirected")

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("webhook_url must be an http:// or https:// URL")
        return v

    @field_validator("tokens")
    @classmethod
    def _tokens_nonempty(cls, v: dict[str, str]) -> dict[str, str]:
        for token, role in v.items():
            if not str(token).strip() or not str(role).strip():
                raise ValueError("tokens and roles must be non-empty strings")
        return {str(k): str(r) for k, r in v.items()}

    def role_for(self, token: str | None) -> str | None:
        """The role a token grants: `public` without a token, None for an unknown token."""
        if token is None or token == "":
            return "public"
        return self.tokens.get(token)


def load_server_config(path: str | Path | None, env: Mapping[str, str] | None = None) -> ServerConfig:
    """Read a server config. `path=None` reads `server.yaml` if it exists, else the defaults.
    `env` (default: the process environment) supplies the Twilio credentials; it wins over the file."""
    if path is None:
        p = Path(DEFAULT_CONFIG_FILE)
        if not p.exists():
            return ServerConfig()
    else:
        p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ServerConfigError(f"{p}: no such server config file") from None
    except OSError as e:
        raise ServerConfigError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ServerConfigError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ServerConfigError(f"{p}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        cfg = ServerConfig.model_validate(data)
    except ValidationError as e:
        raise ServerConfigError(f"{p}: {_first_error(e)}") from None
    if cfg.twilio is not None:
        try:
            cfg.twilio = with_environment(cfg.twilio, os.environ if env is None else env)
        except ValidationError as e:  # a value the environment gave
            raise ServerConfigError(f"{p}: twilio (with the environment's TWILIO_*): {_first_error(e)}") from None
        except ValueError as e:  # credentials missing from both the file and the environment
            raise ServerConfigError(f"{p}: twilio: {e}") from None
    return cfg


def _first_error(e: ValidationError) -> str:
    first = e.errors()[0]
    where = ".".join(str(x) for x in first["loc"]) or "(top level)"
    return f"{where}: {_message(first['msg'])}"


def _message(msg: str) -> str:
    return msg.removeprefix("Value error, ")  # pydantic's prefix for a validator's own message
