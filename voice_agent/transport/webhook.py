"""A POST to the desk's webhook for each new handoff, so a person is told without polling.

Delivery runs on a worker task and never holds up a call. Each handoff is tried up to
`retries + 1` times, backing off 0.5 s, 1 s, 2 s, ...; a 2xx answer is delivery. With a secret the
body is signed (`X-Voice-Agent-Signature: sha256=<hex HMAC of the body>`), so the receiver can
tell the server from anyone else. Every outcome is logged and counted in /metrics."""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import urllib.error
import urllib.request
from collections.abc import Callable

from policy.decision import Handoff

__all__ = ["WebhookSender"]


class WebhookSender:
    def __init__(self, url: str, *, secret: str | None = None, retries: int = 3, timeout_s: float = 5.0,
                 backoff_s: float = 0.5, on_outcome: Callable[[str], None] | None = None,
                 log: Callable[..., None] | None = None):
        self.url, self.secret, self.retries = url, secret, retries
        self.timeout_s, self.backoff_s = timeout_s, backoff_s
        self.on_outcome = on_outcome  # "delivered" | "failed": for the metrics
        self.log = log or (lambda event, **fields: None)  # the server's one-JSON-line event log
        self._queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(maxsize=1000)  # (handoff id, body)
        self._task: asyncio.Task | None = None

    def notify(self, handoff: Handoff, session: str) -> None:
        """Queue one delivery; a full queue (the desk down for a long time) drops it, logged."""
        body = json.dumps({"event": "handoff.created", "session": session,
                           "handoff": handoff.model_dump(mode="json")}, ensure_ascii=False).encode()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._worker(), name="webhook")
        try:
            self._queue.put_nowait((handoff.id, body))
        except asyncio.QueueFull:
            self.log("webhook_dropped", handoff=handoff.id, reason="queue full")
            self._count("failed")

    async def flush(self, timeout: float) -> None:
        """Wait (bounded) for queued deliveries, at shutdown."""
        if self._task is not None:
            try:
                await asyncio.wait_for(self._queue.join(), timeout)
            except asyncio.TimeoutError:
                pass
            self._task.cancel()

    async def _worker(self) -> None:
        while True:
            hid, body = await self._queue.get()
            try:
                await self._deliver(hid, body)
            finally:
                self._queue.task_done()

    async def _deliver(self, hid: str, body: bytes) -> None:
        error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            error = await asyncio.to_thread(self._post, body)
            if not error:
                self.log("webhook_delivered", handoff=hid, attempts=attempt + 1)
                self._count("delivered")
                return
        self.log("webhook_failed", handoff=hid, attempts=self.retries + 1, error=error)
        self._count("failed")

    def _post(self, body: bytes) -> str:
        """One POST; the error in one line, or "" on a 2xx answer."""
        headers = {"Content-Type": "application/json", "User-Agent": "voice-agent-webhook"}
        if self.secret:
            sig = hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
            headers["X-Voice-Agent-Signature"] = f"sha256={sig}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - operator's URL
                return "" if 200 <= resp.status < 300 else f"HTTP {resp.status}"
        except urllib.error.HTTPError as e:
            return f"HTTP {e.code}"
        except (urllib.error.URLError, OSError, ValueError) as e:
            return " ".join(str(getattr(e, "reason", e)).split())[:200]

    def _count(self, outcome: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(outcome)
