"""Faults the double injects, set per test (or over HTTP, `POST /_double/faults`).

Endpoints are named by their path under `/api/v1/` (`client/config`, `optim_step`,
`asample`, ...); futures by the request that made them (`optim_step`, `sample`, ...).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Burst:
    """Answer `status` to the next `count` requests (None: to every request, for good)."""

    status: int
    count: int | None = None
    retry_after: float | None = None  # seconds, sent as Retry-After
    served: int = 0

    def take(self) -> bool:
        """True if this request gets the error (and counts it)."""
        if self.count is not None and self.served >= self.count:
            return False
        self.served += 1
        return True


@dataclass
class Faults:
    #: Seconds an endpoint waits before it answers (e.g. {"client/config": 30}).
    delay: dict[str, float] = field(default_factory=dict)
    #: Error bursts by endpoint (e.g. {"create_session": Burst(503, 4)}).
    fail: dict[str, Burst] = field(default_factory=dict)
    #: Endpoints that never answer (the connection stays open, no response).
    hang: set[str] = field(default_factory=set)
    #: Futures of these requests answer `try_again` for good (e.g. {"optim_step"}).
    stuck_futures: set[str] = field(default_factory=set)
    #: `get_info`'s tokenizer_id for every model, instead of the model's own.
    tokenizer_id: str | None = None
    #: Billing usage newer than this many seconds is not reported yet (the service's
    #: billing data lags hours).
    billing_lag: float = 0.0
    #: Seconds a recorded sequence (`record_stability_info`) stays trainable after its last
    #: use (the service: one day).
    sequence_ttl: float = 86400.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["hang"], data["stuck_futures"] = sorted(self.hang), sorted(self.stuck_futures)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Faults:
        return cls(
            delay=dict(data.get("delay", {})),
            fail={k: Burst(**v) for k, v in data.get("fail", {}).items()},
            hang=set(data.get("hang", ())),
            stuck_futures=set(data.get("stuck_futures", ())),
            tokenizer_id=data.get("tokenizer_id"),
            billing_lag=float(data.get("billing_lag", 0.0)),
            sequence_ttl=float(data.get("sequence_ttl", 86400.0)),
        )
