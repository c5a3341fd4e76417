"""A step's distributions, not only its means: the share of groups without signal, the
response lengths and the share cut off by the length limit, the reward's named components,
and the reward and advantage histograms.

Length drift and truncation are the classic silent failures of an RL run: the mean reward
holds while the answers grow until the limit cuts them. A reward built of parts (format,
correctness, a length penalty) can move because one part alone moved; a task names its
parts (`Task.reward_components`, keys of `Trajectory.metrics`) and each gets its own series.
Pure functions of the step's batch, so a test can check them on known inputs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.rollouts.trajectory import Trajectory, TrajectoryGroup

#: Bins of a step's reward and advantage histograms.
HISTOGRAM_BINS = 10
#: A reward component dominates when its spread across the step's rollouts is at least this
#: share of all components' spread together: the advantages then follow it alone.
DOMINANT_SHARE = 0.8
#: What the sampler says when the length limit ended a completion.
FINISH_LENGTH = "length"


def truncated(trajectory: Trajectory) -> bool:
    """True when the length limit (`max_tokens`) cut off any of the trajectory's turns."""
    return any(turn.finish_reason == FINISH_LENGTH for turn in trajectory.turns)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile `q` (0..100) of `values` (sorted or not); nan if none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def histogram(values: Iterable[float], bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
    """Counts of `values` in `bins` equal bins from their min to their max (the last bin
    holds the max): {"lo", "hi", "counts"}. All values equal: one bin holds them all."""
    data = [float(v) for v in values if math.isfinite(v)]
    if not data:
        return {"lo": 0.0, "hi": 0.0, "counts": [0] * bins}
    lo, hi = min(data), max(data)
    counts = [0] * bins
    width = (hi - lo) / bins
    for value in data:
        index = bins - 1 if width == 0 else min(bins - 1, int((value - lo) / width))
        counts[index] += 1
    return {"lo": lo, "hi": hi, "counts": counts}


def step_distributions(
    batch: Sequence[TrajectoryGroup], components: Sequence[str] = ()
) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """The step metrics (`env/zero_variance_frac`, `env/truncated_frac`,
    `tokens/response_len_*`, `reward/component/<name>` and its `/std`) and the histograms
    (`reward`, `advantage`) of a step's batch."""
    metrics: dict[str, float] = {}
    histograms: dict[str, dict[str, Any]] = {}
    trajectories = [t for g in batch for t in g.trajectories]
    if not batch or not trajectories:
        return metrics, histograms
    metrics[keys.ZERO_VARIANCE_FRAC] = sum(not g.has_variance() for g in batch) / len(batch)
    metrics[keys.TRUNCATED_FRAC] = sum(map(truncated, trajectories)) / len(trajectories)
    lengths = [float(t.num_tokens) for t in trajectories]
    metrics[keys.RESPONSE_LEN_MEAN] = sum(lengths) / len(lengths)
    metrics[keys.RESPONSE_LEN_P50] = percentile(lengths, 50)
    metrics[keys.RESPONSE_LEN_P90] = percentile(lengths, 90)
    metrics[keys.RESPONSE_LEN_MAX] = max(lengths)
    for name in components:
        seen = [float(t.metrics[name]) for t in trajectories if name in t.metrics]
        if not seen:
            continue
        mean = sum(seen) / len(seen)
        metrics[keys.reward_component(name)] = mean
        metrics[keys.reward_component(name, "std")] = math.sqrt(
            sum((v - mean) ** 2 for v in seen) / len(seen)
        )
    histograms["reward"] = histogram(t.reward for t in trajectories)
    histograms["advantage"] = histogram(a for g in batch for a in g.advantages())
    return metrics, histograms


def components_of(metrics: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """The reward components a step reported: name -> (mean, std)."""
    prefix = keys.REWARD_COMPONENT_PREFIX
    out: dict[str, tuple[float, float]] = {}
    for key, value in metrics.items():
        if key.startswith(prefix) and not key.endswith("/std"):
            name = key[len(prefix) :]
            out[name] = (float(value), float(metrics.get(keys.reward_component(name, "std"), 0.0)))
    return out


def dominant_component(metrics: Mapping[str, float], share: float = DOMINANT_SHARE) -> str | None:
    """The component whose spread is at least `share` of all components' spread together
    (two or more components, some spread at all); None when none dominates."""
    spreads = {name: std for name, (_, std) in components_of(metrics).items() if math.isfinite(std)}
    total = sum(spreads.values())
    if len(spreads) < 2 or total <= 0:
        return None
    name, top = max(spreads.items(), key=lambda item: item[1])
    return name if top / total >= share else None
