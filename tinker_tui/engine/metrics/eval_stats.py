"""The numbers of an evaluation with k samples per scenario: pass@k, mean@k, and how sure
they are.

- pass@k is the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models
  Trained on Code"): per scenario with n samples of which c succeeded,
  1 - C(n-c, k) / C(n, k), averaged over scenarios. A sample succeeds when its reward is at
  least the protocol's `success_threshold`.
- mean@k is the mean reward of all samples (each scenario weighs by its samples).

Intervals are 95 % and say which they are (`Interval.method`): pass@k with n == k is a
proportion of scenarios solved, so it gets the Wilson score interval (it stays inside [0, 1]
and behaves at 0 and 1, where the normal one collapses); pass@1 and mean@k average over
scenarios whose samples are correlated, so they get a percentile bootstrap over scenarios
(resampling whole scenarios keeps that correlation), with a fixed seed so that the same
rewards always give the same interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: z for a two-sided 95 % interval.
Z95 = 1.959963984540054
#: Bootstrap resamples (and its fixed seed: the same rewards give the same interval).
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0

WILSON = "wilson95"
BOOTSTRAP = "bootstrap95"


@dataclass(frozen=True, slots=True)
class Interval:
    value: float
    low: float
    high: float
    #: "wilson95" or "bootstrap95" (see the module docstring).
    method: str

    def as_dict(self) -> dict[str, float | str]:
        return {"value": self.value, "low": self.low, "high": self.high, "method": self.method}

    def text(self, digits: int = 3) -> str:
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one scenario with `n` samples, `c` of them successes."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1..n} (1 - k/i): the ratio of binomials without big numbers.
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def wilson(successes: int, trials: int, z: float = Z95) -> Interval:
    """The Wilson score interval of a proportion."""
    if trials <= 0:
        return Interval(math.nan, math.nan, math.nan, WILSON)
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), WILSON)


def bootstrap_mean(
    groups: Sequence[Sequence[float]],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """The mean of every value, with a percentile bootstrap interval that resamples whole
    groups (scenarios)."""
    values = [v for g in groups for v in g]
    if not values:
        return Interval(math.nan, math.nan, math.nan, BOOTSTRAP)
    mean = sum(values) / len(values)
    sums = [(sum(g), len(g)) for g in groups if g]
    if len(sums) < 2:
        return Interval(mean, mean, mean, BOOTSTRAP)
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        total = count = 0.0
        for _ in range(len(sums)):
            s, n = sums[rng.randrange(len(sums))]
            total += s
            count += n
        means.append(total / count)
    means.sort()
    low = means[int(0.025 * (resamples - 1))]
    high = means[int(math.ceil(0.975 * (resamples - 1)))]
    return Interval(mean, low, high, BOOTSTRAP)


@dataclass(frozen=True, slots=True)
class EvalSummary:
    """What an evaluation's table and JSON show."""

    scenarios: int
    #: Samples that finished with a reward, and those that failed (no reward).
    samples: int
    failed: int
    k: int
    pass_at_1: Interval
    pass_at_k: Interval
    mean: Interval

    def as_dict(self) -> dict[str, object]:
        return {
            "scenarios": self.scenarios,
            "samples": self.samples,
            "failed": self.failed,
            "k": self.k,
            "pass@1": self.pass_at_1.as_dict(),
            f"pass@{self.k}": self.pass_at_k.as_dict(),
            f"mean@{self.k}": self.mean.as_dict(),
        }


def summarize(
    rewards: Mapping[str, Sequence[float]], *, k: int, threshold: float, failed: int = 0
) -> EvalSummary:
    """pass@1, pass@k and mean@k of `rewards` (per scenario id, its samples' rewards).

    A scenario with fewer than k rewards (failed samples) counts pass@k over the samples it
    has (k capped at n): an honest lower bound of what it would be with all k."""
    groups = [list(v) for v in rewards.values() if v]
    per_scenario_k = []
    per_scenario_1 = []
    for g in groups:
        n = len(g)
        c = sum(1 for r in g if r >= threshold)
        per_scenario_k.append(pass_at_k(n, c, min(k, n)))
        per_scenario_1.append([1.0 if r >= threshold else 0.0 for r in g])
    if groups and all(p in (0.0, 1.0) for p in per_scenario_k):  # solved or not: a proportion
        pass_k = wilson(sum(1 for p in per_scenario_k if p == 1.0), len(groups))
    else:  # fractional per-scenario estimates (n > k): bootstrap over scenarios
        pass_k = bootstrap_mean([[p] for p in per_scenario_k])
    return EvalSummary(
        scenarios=len(groups),
        samples=sum(len(g) for g in groups),
        failed=failed,
        k=k,
        pass_at_1=bootstrap_mean(per_scenario_1),
        pass_at_k=pass_k,
        mean=bootstrap_mean(groups),
    )
