"""Stability records: what a sampler created with ``record_stability_info=True`` keeps of each
sampled sequence, so a ``stable_reinforce`` training request can name the sequence instead of
carrying the sampler's numbers.

Tinker's contract (docs, "StableReinforce"): every sample from such a client is recorded under
its ``sequence_id``; a recorded sequence belongs to the session that sampled it and can be
trained on for one day after sampling; each training request that uses it restarts that day.
Here the session is the `LocalServiceClient` (its training and sampling clients share one
`StabilityRecords`), and what is recorded is the sequence's tokens and the sampler's own
logprob of each (the information the local `stable_reinforce` needs; the service does not say
what it keeps).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import tinker

from tinker_tui.engine.local.errors import bad_request

#: How long a recorded sequence stays trainable after its last use (Tinker: one day).
RECORD_TTL_SECONDS = 24 * 3600.0


@dataclass
class Recorded:
    tokens: np.ndarray
    logprobs: np.ndarray
    last_used: float


class StabilityRecords:
    """Recorded sequences of one session, by ``sequence_id``. Thread-safe: samplers record on
    the torch thread while the training client reads there too, and tests age them."""

    def __init__(
        self, ttl: float = RECORD_TTL_SECONDS, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.now = now
        self._records: dict[str, Recorded] = {}
        self._lock = threading.Lock()

    def record(self, sequences: Sequence[tinker.SampledSequence]) -> None:
        at = self.now()
        with self._lock:
            for s in sequences:
                tokens = np.asarray(s.tokens, dtype=np.int64)
                logprobs = np.asarray(s.logprobs or [0.0] * len(tokens), dtype=np.float32)
                self._records[s.sequence_id] = Recorded(tokens, logprobs, at)

    def __len__(self) -> int:
        return len(self._records)

    def expire_all(self) -> None:
        """Age every record past its expiry (what a day without training does)."""
        with self._lock:
            for r in self._records.values():
                r.last_used = self.now() - self.ttl - 1.0

    def sampler_logprobs(
        self, index: int, spans: Sequence[object] | None, targets: np.ndarray
    ) -> np.ndarray:
        """The sampler's recorded logprob at every target position of datum `index`, read
        through its ``loss_fn_input_spans``: sampled runs name recorded sequences (their
        tokens must match the targets); prompt runs get 0 (they are not trained). Raises a
        BadRequest naming what is missing, unknown, expired or inconsistent; a successful
        call restarts the named sequences' day."""
        if spans is None:
            raise bad_request(
                f"Datum {index}: stable_reinforce needs provenance: the datum carries no "
                "loss_fn_input_spans naming the sampled sequences (Datum.with_provenance)"
            )
        out = np.zeros(len(targets), dtype=np.float32)
        used: list[Recorded] = []
        at = 0
        now = self.now()
        sampled = 0
        with self._lock:
            for span in spans:
                length = int(getattr(span, "length", 0))
                if isinstance(span, tinker.SampledProvenanceSpan):
                    rec = self._records.get(span.sequence_id)
                    if rec is None:
                        raise bad_request(
                            f"Datum {index}: sequence_id {span.sequence_id!r} was not recorded "
                            "in this session (sample with record_stability_info=True, and "
                            "train in the session that sampled)"
                        )
                    if now - rec.last_used > self.ttl:
                        raise bad_request(
                            f"Datum {index}: sequence_id {span.sequence_id!r} has expired "
                            f"(recorded sequences are trainable for {self.ttl / 3600:g} h "
                            "after their last use)"
                        )
                    end = span.offset + length
                    if end > len(rec.tokens) or at + length > len(targets):
                        raise bad_request(
                            f"Datum {index}: a span of {span.sequence_id!r} covers "
                            f"[{span.offset}, {end}) but it has {len(rec.tokens)} sampled tokens"
                        )
                    if not np.array_equal(rec.tokens[span.offset : end], targets[at : at + length]):
                        raise bad_request(
                            f"Datum {index}: the targets at [{at}, {at + length}) are not the "
                            f"tokens {span.sequence_id!r} sampled there"
                        )
                    out[at : at + length] = rec.logprobs[span.offset : end]
                    used.append(rec)
                    sampled += length
                at += length
            if at != len(targets):
                raise bad_request(
                    f"Datum {index}: loss_fn_input_spans cover {at} positions but "
                    f"target_tokens has {len(targets)}"
                )
            for rec in used:
                rec.last_used = now
        return out
