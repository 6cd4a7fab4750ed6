"""Per-address admission: concurrent calls, connection rate, and backoff after wrong tokens.

The global `max_calls` alone lets one client hold every slot or guess tokens as fast as the
network allows; these limits are kept per remote address, on a clock the tests can move.
Behind a proxy every client shares the proxy's address, so the per-address call and rate limits
are off by default (Twilio, too, connects from a few addresses); the token backoff is on, since
no honest client sends a wrong token twice in a row."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from voice_agent.interfaces import Clock, MonotonicClock

__all__ = ["AddressLimits", "AddressGuard", "Refusal"]

_SWEEP_AT = 4096  # addresses remembered before idle ones are swept out


@dataclass(frozen=True)
class AddressLimits:
    max_calls: int = 0  # concurrent calls from one address; 0: no limit
    connects_per_minute: int = 0  # new connections from one address per 60 s; 0: no limit
    token_failures_free: int = 3  # wrong tokens allowed before the backoff starts
    token_backoff_max_s: float = 300.0  # the backoff doubles from 1 s up to this


@dataclass(frozen=True)
class Refusal:
    code: str  # the protocol error code the client gets
    message: str


@dataclass
class _Address:
    calls: int = 0
    connects: deque[float] = field(default_factory=deque)
    token_failures: int = 0
    last_failure: float = 0.0
    blocked_until: float = 0.0


class AddressGuard:
    """Decides per remote address whether a new connection may start a call."""

    def __init__(self, limits: AddressLimits, clock: Clock | None = None):
        self.limits = limits
        self.clock = clock or MonotonicClock()
        self._by_addr: dict[str, _Address] = {}

    def admit(self, addr: str) -> Refusal | None:
        """Count a new connection from `addr`; a Refusal if it may not go on (no slot is taken)."""
        now = self.clock.now()
        if len(self._by_addr) > _SWEEP_AT:
            self._sweep(now)
        a = self._by_addr.setdefault(addr, _Address())
        if a.blocked_until > now:
            return Refusal("rate_limited", f"too many wrong tokens from this address; try again in "
                                           f"{a.blocked_until - now:.0f}s")
        lim = self.limits
        if lim.connects_per_minute:
            while a.connects and a.connects[0] <= now - 60.0:
                a.connects.popleft()
            if len(a.connects) >= lim.connects_per_minute:
                return Refusal("rate_limited", f"more than {lim.connects_per_minute} connections a minute "
                                               "from this address")
            a.connects.append(now)
        if lim.max_calls and a.calls >= lim.max_calls:
            return Refusal("busy", f"this address already has {a.calls} calls open (limit {lim.max_calls})")
        a.calls += 1
        return None

    def release(self, addr: str) -> None:
        """The call admitted for `addr` has ended."""
        a = self._by_addr.get(addr)
        if a is not None:
            a.calls = max(0, a.calls - 1)
            self._forget_if_idle(addr, a)

    def token_failed(self, addr: str) -> float:
        """Record a wrong token; returns the seconds `addr` is now blocked (0 while still free)."""
        a = self._by_addr.setdefault(addr, _Address())
        now = self.clock.now()
        if now - a.last_failure > 2 * self.limits.token_backoff_max_s:
            a.token_failures = 0  # an old streak of typos is forgiven
        a.token_failures += 1
        a.last_failure = now
        over = a.token_failures - self.limits.token_failures_free
        if over <= 0:
            return 0.0
        wait = min(self.limits.token_backoff_max_s, 2.0 ** (over - 1))
        a.blocked_until = now + wait
        return wait

    def token_ok(self, addr: str) -> None:
        a = self._by_addr.get(addr)
        if a is not None:
            a.token_failures = 0

    def _forget_if_idle(self, addr: str, a: _Address) -> None:
        """Drop an address with nothing to remember, so the table does not grow with every client."""
        if self._idle(a, self.clock.now()):
            del self._by_addr[addr]

    def _idle(self, a: _Address, now: float) -> bool:
        recent_failures = a.token_failures and now - a.last_failure <= 2 * self.limits.token_backoff_max_s
        recent_connects = self.limits.connects_per_minute and a.connects and a.connects[-1] > now - 60.0
        return a.calls == 0 and not recent_failures and a.blocked_until <= now and not recent_connects

    def _sweep(self, now: float) -> None:
        for addr in [k for k, a in self._by_addr.items() if self._idle(a, now)]:
            del self._by_addr[addr]

    def tracked(self) -> int:
        return len(self._by_addr)
