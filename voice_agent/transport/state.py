"""Process-wide server state (config, warm runtime, call slots, shutdown flag), the connection-
ending `Fatal` error and the one-JSON-line event log every endpoint writes."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from voice_agent.call import CallConfig

from .config import ServerConfig

LOG = logging.getLogger("voice_agent.server")


class Fatal(Exception):
    """Ends a connection: an `error` event with `code`, then a close with `close_code`."""

    def __init__(self, code: str, message: str, close_code: int = 1008):
        super().__init__(message)
        self.code, self.message, self.close_code = code, message, close_code


def log_event(event: str, **fields: Any) -> None:
    """One JSON line per server event on stderr: easy to grep, easy to ship."""
    LOG.info(json.dumps({"event": event, **fields}, ensure_ascii=False, default=str))


def default_call_config(**kw: Any) -> Any:
    return CallConfig(**kw)


class ServerState:
    """Process-wide: config, warm runtime, the call counter and the shutdown flag."""

    def __init__(self, runtime: Any, config: ServerConfig, *, asr_model: str = "tiny.en",
                 make_call_config: Callable[..., Any] | None = None):
        self.runtime = runtime
        self.config = config
        self.asr_model = asr_model
        self.make_call_config = make_call_config or default_call_config
        self.active = 0
        self.shutting_down = asyncio.Event()
        self.started = time.monotonic()
        self.calls_total = 0
        self.busy_total = 0

    def admit(self) -> bool:
        """Take a call slot; False past `max_calls` or while shutting down."""
        if self.active >= self.config.max_calls or self.shutting_down.is_set():
            self.busy_total += 1
            return False
        self.active += 1
        self.calls_total += 1
        return True

    def release(self) -> None:
        self.active = max(0, self.active - 1)

    def call_config(self, *, input_rate: int, output_rate: int, output_encoding: str) -> Any:
        return self.make_call_config(
            end_silence_ms=self.config.end_silence_ms, max_turn_s=self.config.max_turn_s,
            asr_model=self.asr_model, input_rate=input_rate, output_rate=output_rate,
            output_encoding=output_encoding,
        )
