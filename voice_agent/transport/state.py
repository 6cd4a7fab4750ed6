"""Process-wide server state (config, warm runtime, call slots, shutdown flag, the checkpoint
store), the connection-ending `Fatal` error and the one-JSON-line event log every endpoint writes."""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from typing import Literal, Protocol

from kb.jsontypes import JsonObject
from voice_agent.call import CallConfig
from voice_agent.interfaces import CallRuntime

from policy.store_api import HandoffStore

from .admission import AddressGuard, AddressLimits
from .config import ServerConfig
from ..logs import event_fields
from .metrics import ServerMetrics
from .webhook import WebhookSender

LOG = logging.getLogger("voice_agent.server")


class Fatal(Exception):
    """Ends a connection: an `error` event with `code`, then a close with `close_code`."""

    def __init__(self, code: str, message: str, close_code: int = 1008):
        super().__init__(message)
        self.code, self.message, self.close_code = code, message, close_code


def log_event(event: str, **fields: object) -> None:
    """One JSON line per server event on stderr (see voice_agent/logs.py): easy to grep and ship."""
    LOG.info(event, extra=event_fields(event, fields))


class AuditSink(Protocol):
    """Where server-side outcomes of a call are recorded beside the policy's own audit lines
    (the engine's `audit` JsonlStore in `run.py serve`)."""

    def append(self, record: Mapping[str, object]) -> None: ...


class CheckpointStore(Protocol):
    """The checkpoint half of the handoff store (policy/store_api.py), as transport/resume.py uses it."""

    def put_checkpoint(self, call_id: str, state: Mapping[str, object]) -> bool: ...

    def get_checkpoint(self, call_id: str) -> JsonObject | None: ...

    def swap_checkpoint(self, call_id: str, epoch: int, state: Mapping[str, object]) -> bool: ...


class CallConfigFactory(Protocol):
    """Builds a call's config from the server's settings (`default_call_config`; tests swap it)."""

    def __call__(self, *, end_silence_ms: int, max_turn_s: float, asr_model: str, input_rate: int,
                 output_rate: int, output_encoding: Literal["pcm16", "mulaw"]) -> CallConfig: ...


def default_call_config(*, end_silence_ms: int, max_turn_s: float, asr_model: str, input_rate: int,
                        output_rate: int, output_encoding: Literal["pcm16", "mulaw"]) -> CallConfig:
    return CallConfig(end_silence_ms=end_silence_ms, max_turn_s=max_turn_s, asr_model=asr_model,
                      input_rate=input_rate, output_rate=output_rate, output_encoding=output_encoding)


class ServerState:
    """Process-wide: config, warm runtime, the call counter, the shutdown flag and the audit."""

    def __init__(self, runtime: CallRuntime, config: ServerConfig, *, asr_model: str = "tiny.en",
                 make_call_config: CallConfigFactory | None = None, audit: AuditSink | None = None,
                 store: HandoffStore | None = None, checkpoints: CheckpointStore | None = None):
        self.runtime = runtime
        self.config = config
        self.audit = audit
        self.store = store  # the handoff desk's source (GET /v1/handoffs)
        self.checkpoints = checkpoints  # where native calls are checkpointed, to resume (None: nowhere)
        self.asr_model = asr_model
        self.make_call_config: CallConfigFactory = make_call_config or default_call_config
        self.active = 0
        self.shutting_down = asyncio.Event()
        self.started = time.monotonic()
        self.calls_total = 0
        self.busy_total = 0
        self.metrics = ServerMetrics(active=lambda: self.active,
                                     tts_restarts=lambda: float(getattr(getattr(runtime, "tts", None), "restarts", 0)))
        self.webhook: WebhookSender | None = None
        if config.webhook_url:
            self.webhook = WebhookSender(config.webhook_url, retries=config.webhook_retries,
                                         secret=os.environ.get("VOICE_AGENT_WEBHOOK_SECRET") or config.webhook_secret,
                                         on_outcome=lambda o: self.metrics.webhooks.labels(o).inc(),
                                         log=log_event)
        self.addresses = AddressGuard(AddressLimits(
            max_calls=config.max_calls_per_address, connects_per_minute=config.connects_per_minute_per_address,
            token_failures_free=config.token_failures_free, token_backoff_max_s=config.token_backoff_max_s))

    def admit(self, endpoint: str = "native") -> bool:
        """Take a call slot; False past `max_calls` or while shutting down."""
        if self.active >= self.config.max_calls or self.shutting_down.is_set():
            self.busy_total += 1
            self.metrics.busy.labels(endpoint).inc()
            return False
        self.active += 1
        self.calls_total += 1
        self.metrics.calls.labels(endpoint).inc()
        return True

    def release(self) -> None:
        self.active = max(0, self.active - 1)

    def call_config(self, *, input_rate: int, output_rate: int,
                    output_encoding: Literal["pcm16", "mulaw"]) -> CallConfig:
        return self.make_call_config(
            end_silence_ms=self.config.end_silence_ms, max_turn_s=self.config.max_turn_s,
            asr_model=self.asr_model, input_rate=input_rate, output_rate=output_rate,
            output_encoding=output_encoding,
        )
