"""Per-caller limits as pure bookkeeping, no I/O: a token bucket of requests per caller and a count of
each caller's requests in flight. The clock is passed in, so tests need no sleeping.

A caller's bucket holds up to ``burst`` requests and refills at ``rate`` per second; a request takes
one. A full bucket is the same as no bucket, so buckets that have refilled are dropped when the table
grows (:attr:`RateLimiter.max_idle_keys`), which bounds memory by the number of callers active within
one refill time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """The limits of the HTTP API (``KS_GATEWAY_…`` settings of the same names; see ``api/limits.py``)."""

    max_body_bytes: int = 4 * MIB
    max_upload_bytes: int = 1024 * MIB
    max_upload_files: int = 100
    body_idle_timeout_seconds: float = 30.0
    body_min_bytes_per_second: int = 1024
    caller_rate_limit_per_second: float = 20.0
    caller_rate_limit_burst: int = 100
    caller_max_concurrent_requests: int = 32


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Refusal:
    """A request over a limit: which limit, and when a retry may succeed."""

    limit: str
    retry_after_seconds: float

    @property
    def retry_after_header(self) -> str:
        """``Retry-After`` in whole seconds, at least 1."""
        return str(max(1, math.ceil(self.retry_after_seconds)))


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class RateLimiter:
    """A token bucket per key: ``rate`` requests per second on average, up to ``burst`` at once."""

    rate: float
    burst: int
    clock: Callable[[], float]
    max_idle_keys: int = 10_000
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.burst < 1:
            raise ValueError(f"a rate limit needs rate > 0 and burst >= 1 (got {self.rate}, {self.burst})")

    def take(self, key: str) -> Refusal | None:
        """Takes one request from ``key``'s bucket; a :class:`Refusal` when it is empty."""
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_idle_keys:
                self._drop_full(now)
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        else:
            bucket.tokens = self._refilled(bucket, now)
            bucket.updated = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return None
        return Refusal("rate", (1 - bucket.tokens) / self.rate)

    def _refilled(self, bucket: _Bucket, now: float) -> float:
        return min(float(self.burst), bucket.tokens + max(0.0, now - bucket.updated) * self.rate)

    def _drop_full(self, now: float) -> None:
        for key in [k for k, b in self._buckets.items() if self._refilled(b, now) >= self.burst]:
            del self._buckets[key]

    def __len__(self) -> int:
        return len(self._buckets)


@dataclass
class KeyedRateLimiter:
    """A token bucket per key whose rate and burst come with each request (an application's own limit,
    which its admin may change): a key whose limit changed starts over with a full bucket. Holds one
    bucket per key seen, so its keys must be bounded (applications are)."""

    clock: Callable[[], float]
    _limiters: dict[str, RateLimiter] = field(default_factory=dict)

    def take(self, key: str, rate: float, burst: int) -> Refusal | None:
        limiter = self._limiters.get(key)
        if limiter is None or (limiter.rate, limiter.burst) != (rate, burst):
            limiter = self._limiters[key] = RateLimiter(rate, burst, self.clock, max_idle_keys=1)
        return limiter.take(key)


@dataclass
class ConcurrencyLimiter:
    """At most ``limit`` requests in flight per key; :meth:`acquire` and :meth:`release` in pairs."""

    limit: int
    retry_after_seconds: float = 1.0
    _in_flight: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"a concurrency limit needs limit >= 1 (got {self.limit})")

    def acquire(self, key: str) -> Refusal | None:
        count = self._in_flight.get(key, 0)
        if count >= self.limit:
            return Refusal("concurrency", self.retry_after_seconds)
        self._in_flight[key] = count + 1
        return None

    def release(self, key: str) -> None:
        count = self._in_flight.get(key, 0) - 1
        if count > 0:
            self._in_flight[key] = count
        else:
            self._in_flight.pop(key, None)

    def in_flight(self, key: str) -> int:
        return self._in_flight.get(key, 0)


__all__ = ["DEFAULT_LIMITS", "ConcurrencyLimiter", "KeyedRateLimiter", "Limits", "RateLimiter", "Refusal"]
