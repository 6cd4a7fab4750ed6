"""Prometheus metrics of one server process (`GET /metrics`): calls active and admitted, busy
rejections, decided turns by action and by reason, call errors by code, Twilio transfers by outcome,
and stage latencies from each decision's timings. One registry per server, so tests and several
servers never share one."""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from policy.decision import Decision

__all__ = ["ServerMetrics", "CONTENT_TYPE_LATEST"]

# decision timing (ms) -> stage label; the turn-end stages exist on spoken turns only, the checkpoint
# write on native calls
STAGES = {"asr": "asr", "retrieve": "retrieve", "policy": "policy", "total_policy_path": "policy_path",
          "turn_end_to_decision": "turn_end_to_decision", "tts_first_audio": "tts_first_audio",
          "turn_end_to_first_audio": "turn_end_to_first_audio", "checkpoint": "checkpoint"}
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0)


class ServerMetrics:
    def __init__(self, active: Callable[[], float], tts_restarts: Callable[[], float] = lambda: 0.0):
        r = self.registry = CollectorRegistry()
        Gauge("voice_agent_calls_active", "Calls in progress", registry=r).set_function(active)
        # the TTS worker is a child process: each death or hang restarts it (ASR runs in-process)
        Gauge("voice_agent_tts_worker_restarts", "TTS worker restarts since the server started",
              registry=r).set_function(tts_restarts)
        self.calls = Counter("voice_agent_calls", "Calls admitted", ["endpoint"], registry=r)
        self.busy = Counter("voice_agent_busy_rejections", "Calls refused at the concurrent-call limit",
                            ["endpoint"], registry=r)
        self.refused = Counter("voice_agent_address_refusals", "Connections refused by a per-address limit",
                               ["code"], registry=r)
        self.webhooks = Counter("voice_agent_webhook_deliveries", "Handoff webhook deliveries by outcome",
                                ["outcome"], registry=r)
        self.turns = Counter("voice_agent_turns", "Decided turns by action", ["action"], registry=r)
        self.reasons = Counter("voice_agent_turn_reasons", "Reason codes of decided turns", ["reason"], registry=r)
        self.errors = Counter("voice_agent_call_errors", "Errors a call reported, by code", ["code"], registry=r)
        self.redirects = Counter("voice_agent_transfer_redirects", "Twilio transfers by outcome (redirected, "
                                 "failed, stream_ended, not_configured)", ["outcome"], registry=r)
        self.stage = Histogram("voice_agent_stage_seconds", "Latency of each stage of a turn", ["stage"],
                               buckets=BUCKETS, registry=r)

    def decision(self, d: Decision, timings_ms: dict[str, float]) -> None:
        self.turns.labels(d.action.value).inc()
        for reason in d.reasons:
            self.reasons.labels(reason.value).inc()
        for key, stage in STAGES.items():
            if (ms := timings_ms.get(key)) is not None and ms >= 0:
                self.stage.labels(stage).observe(ms / 1000.0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
