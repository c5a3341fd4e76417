"""The metric keys the engine writes and its clients read, in one place.

`StepTrained.metrics` and `EvalCompleted.metrics` are plain dicts so a run can record any
metric; these are the keys the engine itself writes (tinker-cookbook style, with slashes),
and the ones the dashboard, the headless reporter and the store read back. Exports and the
JSONL metrics file carry them unchanged.
"""

from __future__ import annotations

from typing import Any

from tinker_tui.engine.events import DiscardReason

# Rewards of the groups trained in the step.
REWARD_MEAN = "reward/mean"
REWARD_MIN = "reward/min"
REWARD_MAX = "reward/max"

# Staleness: versions between sampling and training (in flight: while sampled; queued: after).
STALENESS_MEAN = "async/staleness_mean"
STALENESS_MAX = "async/staleness_max"
#: The freshest group's: the newest version that sampled the step is the version before its
#: update minus this (what a rollback goes back to, engine.metrics.health).
STALENESS_MIN = "async/staleness_min"
STALENESS_IN_FLIGHT_MEAN = "async/staleness_in_flight_mean"
STALENESS_QUEUED_MEAN = "async/staleness_queued_mean"
#: 1.0 when the step's versions are lower bounds (sampling = inflight: a sampler moves to
#: newer weights while it runs, so a group sampled from "version >= v" is at most the staleness
#: shown); absent with fixed snapshots, whose staleness is exact.
STALENESS_BOUND = "async/staleness_is_bound"
QUEUE_DEPTH = "async/queue_depth"

# Seconds.
STEP_TIME = "time/step"
WAIT_BATCH_TIME = "time/wait_batch"
TRAIN_TIME = "time/train"
FORWARD_BACKWARD_TIME = "time/forward_backward"
OPTIM_STEP_TIME = "time/optim_step"
PUBLISH_WEIGHTS_TIME = "time/publish_weights"

ROLLOUTS_PER_S = "throughput/rollouts_per_s"
#: The learning rate the step's optimizer used: the live knob times the schedule's factor
#: (engine.training.lr_schedule); with a constant schedule, the knob.
LEARNING_RATE = "optim/lr"
#: The schedule's factor at the step (only when a schedule or a warm-up is set).
LR_FACTOR = "optim/lr_factor"
#: Optimizer steps the step made (only when num_substeps > 1: one per minibatch).
OPTIM_STEPS = "optim/steps"
#: The gradient's global norm before clipping, where the backend's optim_step reports it.
GRAD_NORM = "optim/grad_norm"

# The training call.
TRAIN_LOSS_SUM = "train/loss_sum"
TRAIN_NUM_DATUMS = "train/num_datums"
TRAIN_TOKENS = "train/tokens"
#: Running totals of tokens trained that a step's metrics may carry (the cost metrics):
#: the charts' "trained tokens" axis reads the first present, else sums TRAIN_TOKENS.
TRAINED_TOKENS_TOTAL = ("tokens/trained_total", "tokens/trained", "cost/tokens_trained")
TRAIN_TURNS = "train/turns"
TRAIN_PREFIX_MISMATCH = "train/prefix_mismatch"
#: 1.0 when every group of the step had equal rewards: no gradient, no new policy version.
TRAIN_SKIPPED = "train/skipped"

# Tokens the backend processed during the step (sampling counted as it happens, the
# trainer's forward_backward as it is sent) and since the run began (`_total`; a resumed
# run carries its earlier processes' totals), and their cost at the user's prices
# (engine.metrics.cost; only when a price is set).
TOKENS_PREFILL = "tokens/prefill"
TOKENS_PREFILL_CACHED = "tokens/prefill_cached"
TOKENS_SAMPLED = "tokens/sampled"
TOKENS_TRAINED = "tokens/trained"
TOKENS_PREFILL_TOTAL = "tokens/prefill_total"
TOKENS_PREFILL_CACHED_TOTAL = "tokens/prefill_cached_total"
TOKENS_SAMPLED_TOTAL = "tokens/sampled_total"
TOKENS_TRAINED_TOTAL = "tokens/trained_total"
COST_USD_STEP = "cost/usd_step"
COST_USD_TOTAL = "cost/usd_total"

# The step's rewards' spread, and counts since the run began (a resumed run counts from
# its checkpoint's).
REWARD_STD = "reward/std"
GROUPS_SAMPLED_TOTAL = "groups/sampled_total"
GROUPS_TRAINED_TOTAL = "groups/trained_total"
GROUPS_DISCARDED_TOTAL = "groups/discarded_total"

# The KL penalty against the base model (when kl_penalty_coef > 0): the mean over the
# step's sampled tokens of logp_policy - logp_base (an estimate of KL(policy || base)), and
# the seconds the base model took to score them.
KL_POLICY_BASE = "kl/policy_base"
KL_REFERENCE_TIME = "time/kl_reference"

# A step's distributions (`engine.rollouts.distributions`): the share of its groups whose
# rewards were all equal (no signal), the share of its rollouts the length limit cut off
# (finish reason `length`), and the sampled tokens per rollout.
ZERO_VARIANCE_FRAC = "env/zero_variance_frac"
TRUNCATED_FRAC = "env/truncated_frac"
#: Rollouts of the step whose reward `truncation_policy = cap` lowered (only with it on).
TRUNCATED_CAPPED = "env/truncated_capped"
RESPONSE_LEN_MEAN = "tokens/response_len_mean"
RESPONSE_LEN_P50 = "tokens/response_len_p50"
RESPONSE_LEN_P90 = "tokens/response_len_p90"
RESPONSE_LEN_MAX = "tokens/response_len_max"
#: A named part of the reward (`Task.reward_components`): `reward/component/<name>` (its
#: mean over the step's rollouts) and `reward/component/<name>/std`.
REWARD_COMPONENT_PREFIX = "reward/component/"


def reward_component(name: str, stat: str = "") -> str:
    key = f"{REWARD_COMPONENT_PREFIX}{name}"
    return f"{key}/{stat}" if stat else key


# Sampler/trainer mismatch on the step's sampled tokens, and entropy
# (`engine.metrics.mismatch`, which says what each one means; tinker-cookbook's names).
KL_SAMPLE_TRAIN_V1 = "optim/kl_sample_train_v1"
KL_SAMPLE_TRAIN_V2 = "optim/kl_sample_train_v2"
SAMPLE_TRAIN_DIFF_MAX = "optim/sample_train_diff_max"
SAMPLE_TRAIN_DIFF_FRAC = "optim/sample_train_diff_frac"
#: The trainer's entropy of the whole distribution (only where the backend gives it).
ENTROPY = "optim/entropy"
#: Minus the mean sampled logprob (both backends).
ENTROPY_SAMPLED = "optim/entropy_sampled"

# Evaluations (`EvalCompleted.metrics`).
EVAL_REWARD_MEAN = "eval/reward_mean"
EVAL_NUM_SCENARIOS = "eval/num_scenarios"
EVAL_ERRORS = "eval/errors"
#: The 95 % bootstrap interval of eval/reward_mean over scenarios, the share of samples
#: whose reward reached the success threshold, and with k samples per scenario
#: (`eval_samples` > 1) pass@k (`engine.metrics.eval_stats`).
EVAL_REWARD_LOW = "eval/reward_mean_low"
EVAL_REWARD_HIGH = "eval/reward_mean_high"
EVAL_PASS_AT_1 = "eval/pass@1"
EVAL_PASS_AT_K = "eval/pass@k"


#: Rollouts that failed (raised, timed out) since the previous step, whether their group
#: trained with the rest or was discarded; and all that ended (failed or not) in that time.
#: The one count of failed rollouts: the step line, the JSONL, the dashboard and the
#: summary all read these.
ROLLOUTS_FAILED = "rollouts/failed"
ROLLOUTS_ENDED = "rollouts/ended"


def discarded(reason: DiscardReason) -> str:
    """Groups discarded for `reason` during the step: `discarded/stale`, ..."""
    return f"discarded/{reason}"


# What tasks report. A trajectory's metrics (`Trajectory.metrics`) are averaged over the
# step's trained batch as `task/<name>`, with `task/<name>/min` and `/max` for numbers
# (not for booleans: their mean is a rate); evaluations report `eval/task/<name>`. A mixed
# task (`mix_tasks`) also reports each part under its name: `reward/<part>/mean`,
# `task/<part>/<name>`, `eval/<part>/reward_mean`, `eval/<part>/task/<name>`.
TASK_PREFIX = "task/"


def task_metric(name: str, stat: str = "", part: str = "") -> str:
    """`task/<name>`, `task/<name>/<stat>` (min, max), or the same for one part of a mix."""
    key = f"task/{part}/{name}" if part else f"task/{name}"
    return f"{key}/{stat}" if stat else key


def part_reward_mean(part: str) -> str:
    """The mean reward of one part of a mixed task in the step's batch."""
    return f"reward/{part}/mean"


def eval_task_metric(name: str, part: str = "") -> str:
    """A trajectory metric's mean over an evaluation (of one part of a mix)."""
    return f"eval/{part}/task/{name}" if part else f"eval/task/{name}"


def eval_part_reward_mean(part: str) -> str:
    return f"eval/{part}/reward_mean"


def eval_parts(metrics: dict[str, float] | Any) -> dict[str, float]:
    """The parts of a mixed task an evaluation reported, with their mean rewards."""
    out = {}
    for key, value in metrics.items():
        if key.startswith("eval/") and key.endswith("/reward_mean") and key.count("/") == 2:
            out[key[len("eval/") : -len("/reward_mean")]] = value
    return out
