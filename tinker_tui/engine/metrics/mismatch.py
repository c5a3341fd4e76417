"""How far the trainer's logprobs of the trained tokens are from the sampler's, and the
trainer's entropy there: the per-step signals an RL run is diagnosed by.

`forward_backward` scores every trained token with the weights before the step; the
sampler scored the same tokens when it drew them. On-policy (a group sampled by the version
being trained) the two are the same numbers up to float rounding, so a mismatch there is a
bug in the sampler or the trainer (a tokenization seam, a wrong position, a stale
snapshot). Off-policy groups add the policy's drift since they were sampled. The keys
follow tinker-cookbook's `rl/metrics.py`:

* `optim/kl_sample_train_v1`: mean of (sampled - trainer) logprob, a first-order estimate of
  KL(sampler || trainer); its sign says which side thinks the tokens likelier.
* `optim/kl_sample_train_v2`: half the mean squared difference (second order, never < 0).
* `optim/sample_train_diff_max`: the largest |difference| of one token.
* `optim/sample_train_diff_frac`: the share of tokens whose |difference| is above
  `DIFF_THRESHOLD` nats (their probability ratio beyond e^0.1 ~ 1.105 either way).
* `optim/entropy_sampled`: minus the mean sampled logprob (cookbook's `optim/entropy`, an
  estimate of the sampler's entropy from its own draws; both backends).
* `optim/entropy`: the trainer's mean entropy of the whole next-token distribution at the
  trained positions, where the backend answers it (the local backend, at the tokens whose
  advantage is not 0; the Tinker service returns logprobs only, so this key is absent there).

Only sampled positions count (the mask): context tokens carry no sampled logprob.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from tinker_tui.engine.metrics import metric_keys as keys

#: Nats: a token whose sampled and trained logprobs differ by more counts in
#: `optim/sample_train_diff_frac`.
DIFF_THRESHOLD = 0.1


def sample_train_diffs(
    sampled: Sequence[ArrayLike], trainer: Sequence[ArrayLike], masks: Sequence[ArrayLike]
) -> list[np.ndarray]:
    """Per datum, sampled - trainer logprob at every position (0 where the mask is 0)."""
    out = []
    for s, t, m in zip(sampled, trainer, masks, strict=True):
        s_arr = np.asarray(s, dtype=np.float64)
        t_arr = np.asarray(t, dtype=np.float64)
        if s_arr.shape != t_arr.shape:
            raise ValueError(f"{len(t_arr)} trainer logprobs for {len(s_arr)} sampled ones")
        out.append(np.where(np.asarray(m, dtype=np.float64) > 0, s_arr - t_arr, 0.0))
    return out


def mismatch_metrics(
    sampled: Sequence[ArrayLike],
    trainer: Sequence[ArrayLike],
    masks: Sequence[ArrayLike],
    entropy: Sequence[ArrayLike] | None = None,
    threshold: float = DIFF_THRESHOLD,
) -> dict[str, float]:
    """The step's mismatch and entropy metrics (see the module docstring) over every sampled
    position of its datums; {} when there is none. `entropy` (per datum, per position):
    the trainer's, where the backend gave it."""
    if not sampled:
        return {}
    chosen = [np.asarray(m, dtype=np.float64) > 0 for m in masks]
    count = int(sum(c.sum() for c in chosen))
    if count == 0:
        return {}
    diffs = np.concatenate(
        [d[c] for d, c in zip(sample_train_diffs(sampled, trainer, masks), chosen, strict=True)]
    )
    logprobs = np.concatenate(
        [np.asarray(s, dtype=np.float64)[c] for s, c in zip(sampled, chosen, strict=True)]
    )
    magnitude = np.abs(diffs)
    metrics = {
        keys.KL_SAMPLE_TRAIN_V1: float(diffs.mean()),
        keys.KL_SAMPLE_TRAIN_V2: float(0.5 * (diffs**2).mean()),
        keys.SAMPLE_TRAIN_DIFF_MAX: float(magnitude.max()),
        keys.SAMPLE_TRAIN_DIFF_FRAC: float((magnitude > threshold).mean()),
        keys.ENTROPY_SAMPLED: float(-logprobs.mean()),
    }
    if entropy is not None:
        values = np.concatenate(
            [np.asarray(e, dtype=np.float64)[c] for e, c in zip(entropy, chosen, strict=True)]
        )
        values = values[np.isfinite(values)]  # NaN: a token the backend did not measure
        if len(values):
            metrics[keys.ENTROPY] = float(values.mean())
    return metrics
