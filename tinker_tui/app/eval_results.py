"""A run's evaluation as `runs` and `compare` show it beside its reward, and whether the
evaluations of several runs can be compared at all.

A run's shown evaluation is its latest `tinker-tui eval` result (mean@k, with its interval),
else its latest evaluation during the run (the mean over its eval scenarios). Each carries
its protocol (`engine.training.eval_protocol`); numbers under different protocols (another
temperature, max_tokens, renderer, split or threshold) are not comparable, so the tables
tag each number with its protocol (P1, P2, ...) when they differ and say which fields do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.store.eval_records import StoredEval
from tinker_tui.engine.training.eval_protocol import EvalProtocol, differences


@dataclass(frozen=True, slots=True)
class ShownEval:
    value: float
    low: float | None
    high: float | None
    #: What the value is: "mean@8" (`tinker-tui eval`), "eval mean" (during the run).
    label: str
    #: "eval" (`tinker-tui eval`) or "run" (an evaluation during the run).
    source: str
    step: int | None
    protocol: EvalProtocol | None

    @property
    def key(self) -> str:
        return self.protocol.key() if self.protocol is not None else "unknown"

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "label": self.label,
            "source": self.source,
            "step": self.step,
            "protocol": None if self.protocol is None else self.protocol.as_dict(),
            "protocol_key": self.key,
        }


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def from_run_eval(
    step: int | None, metrics: Mapping[str, Any], protocol: Mapping[str, Any]
) -> ShownEval | None:
    value = _finite(metrics.get(keys.EVAL_REWARD_MEAN))
    if value is None:
        return None
    return ShownEval(
        value=value,
        low=_finite(metrics.get(keys.EVAL_REWARD_LOW)),
        high=_finite(metrics.get(keys.EVAL_REWARD_HIGH)),
        label="eval mean",
        source="run",
        step=step,
        protocol=EvalProtocol.from_dict(protocol),
    )


def from_command_evals(db_path: Path, run_id: str) -> ShownEval | None:
    """The run's latest `tinker-tui eval` result with a summary, if any."""
    from tinker_tui.engine.store.eval_records import stored_evals

    return latest_command_eval(stored_evals(db_path, run_id))


def latest_command_eval(evals: Sequence[StoredEval]) -> ShownEval | None:
    """The latest of `evals` (oldest first, one run's) that has a summary, as shown."""
    for stored in reversed(evals):
        protocol = EvalProtocol.from_dict(stored.protocol)
        k = protocol.k if protocol is not None else None
        mean = stored.summary.get(f"mean@{k}")
        if not isinstance(mean, dict) or _finite(mean.get("value")) is None:
            continue
        return ShownEval(
            value=float(mean["value"]),
            low=_finite(mean.get("low")),
            high=_finite(mean.get("high")),
            label=f"mean@{k}",
            source="eval",
            step=stored.target.step,
            protocol=protocol,
        )
    return None


def protocol_tags(evals: Sequence[ShownEval | None]) -> dict[str, str]:
    """A tag per distinct protocol key (P1, P2, ... in order of appearance); empty when
    the evaluations shown all share one protocol (nothing to tell apart)."""
    seen: list[str] = []
    for e in evals:
        if e is not None and e.key not in seen:
            seen.append(e.key)
    return {} if len(seen) < 2 else {key: f"P{i + 1}" for i, key in enumerate(seen)}


def protocol_differences(evals: Sequence[ShownEval | None]) -> list[str]:
    """The protocol fields in which the shown evaluations differ ([] when comparable)."""
    shown = [e for e in evals if e is not None]
    fields: list[str] = []
    for e in shown[1:]:
        for name in differences(shown[0].protocol, e.protocol):
            if name not in fields:
                fields.append(name)
    return fields


def eval_cell(e: ShownEval | None, tags: Mapping[str, str]) -> str:
    if e is None:
        return "-"
    tag = tags.get(e.key)
    return f"{e.value:.3f} {e.label}" + (f" {tag}" if tag else "")


def protocol_note(evals: Sequence[ShownEval | None]) -> list[str]:
    """Lines under a table whose evaluations' protocols differ: which tag is which, and
    that those numbers are not comparable."""
    tags = protocol_tags(evals)
    if not tags:
        return []
    fields = protocol_differences(evals)
    lines = [
        "EVAL numbers of different protocols are NOT comparable (they differ in "
        + ", ".join(fields)
        + "):"
    ]
    described: set[str] = set()
    for e in evals:
        if e is None or e.key in described:
            continue
        described.add(e.key)
        text = e.protocol.text() if e.protocol is not None else "not stored (older tinker-tui)"
        lines.append(f"  {tags[e.key]} ({e.key}): {text}")
    return lines
