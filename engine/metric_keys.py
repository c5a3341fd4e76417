"""The metric keys the engine writes and its clients read, in one place.

`StepTrained.metrics` and `EvalCompleted.metrics` are plain dicts so a run can record any
metric; these are the keys the engine itself writes (tinker-cookbook style, with slashes),
and the ones the dashboard, the headless reporter and the store read back. Exports and the
JSONL metrics file carry them unchanged.
"""

from __future__ import annotations

from tinker_tui.engine.events import DiscardReason

# Rewards of the groups trained in the step.
REWARD_MEAN = "reward/mean"
REWARD_MIN = "reward/min"
REWARD_MAX = "reward/max"

# Staleness: versions between sampling and training (in flight: while sampled; queued: after).
STALENESS_MEAN = "async/staleness_mean"
STALENESS_MAX = "async/staleness_max"
STALENESS_IN_FLIGHT_MEAN = "async/staleness_in_flight_mean"
STALENESS_QUEUED_MEAN = "async/staleness_queued_mean"
QUEUE_DEPTH = "async/queue_depth"

# Seconds.
STEP_TIME = "time/step"
WAIT_BATCH_TIME = "time/wait_batch"
TRAIN_TIME = "time/train"
FORWARD_BACKWARD_TIME = "time/forward_backward"
OPTIM_STEP_TIME = "time/optim_step"
PUBLISH_WEIGHTS_TIME = "time/publish_weights"

ROLLOUTS_PER_S = "throughput/rollouts_per_s"
LEARNING_RATE = "optim/lr"

# The training call.
TRAIN_LOSS_SUM = "train/loss_sum"
TRAIN_NUM_DATUMS = "train/num_datums"
TRAIN_TOKENS = "train/tokens"
TRAIN_TURNS = "train/turns"
TRAIN_PREFIX_MISMATCH = "train/prefix_mismatch"
#: 1.0 when every group of the step had equal rewards: no gradient, no new policy version.
TRAIN_SKIPPED = "train/skipped"

# Evaluations (`EvalCompleted.metrics`).
EVAL_REWARD_MEAN = "eval/reward_mean"
EVAL_NUM_SCENARIOS = "eval/num_scenarios"
EVAL_ERRORS = "eval/errors"


def discarded(reason: DiscardReason) -> str:
    """Groups discarded for `reason` during the step: `discarded/stale`, ..."""
    return f"discarded/{reason}"
