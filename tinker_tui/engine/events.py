"""Typed events the engine emits, and the bus that carries them.

The engine only *publishes*; the UI, the headless reporter and the store only *subscribe*.
That one-way flow is what lets the same engine run with or without a terminal.
Every event carries the time at which it happened, taken from the injected clock, so a
replayed list of events draws the same dashboard every time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

logger = logging.getLogger(__name__)

DiscardReason = Literal["stale", "zero_variance", "error"]
#: Every `DiscardReason`, in the order panes list them.
DISCARD_REASONS: tuple[DiscardReason, ...] = get_args(DiscardReason)
RunState = Literal["starting", "running", "paused", "stopping", "finished"]
#: How a run ended. The engine records completed, stopped or failed; "interrupted" is what
#: a front end says of a run whose process ended without recording its end (stopped at once
#: by a second signal, killed): `--resume` continues it from its last checkpoint.
RunStatus = Literal["completed", "stopped", "failed", "interrupted"]
#: Why a run ended, typed, so that readers choose their words and exit codes from it and
#: never from the reason's text. "max_steps": it trained them all; "ran_out": the task's
#: scenarios ran out; "no_signal": it ended by itself (either of those) having trained
#: nothing, every group's rewards equal; "user": a person stopped it (dashboard, control
#: endpoint, a signal); "budget": `max_cost_usd`; "health": a health check or a collapse
#: stopped it (`on_health_pause`, `on_collapse`); "error": the engine stopped it for a
#: failure it could finish on (a full disk, the task's scenarios, the rollout loop);
#: "failed": it raised; "interrupted": its process ended without recording its end.
#: "" in stores written before causes were kept.
StopCause = Literal[
    "",
    "max_steps",
    "ran_out",
    "no_signal",
    "user",
    "budget",
    "health",
    "error",
    "failed",
    "interrupted",
]
CheckpointKind = Literal["state", "sampler"]
#: The start-up of a run before its first training step, in order.
StartupPhase = Literal["loading_model", "warmup", "first_rollouts"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """Base of every engine event. `time` is seconds on the engine's clock."""

    time: float


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted(Event):
    run_id: str
    name: str
    backend: str
    base_model: str
    max_steps: int
    start_step: int
    config: Mapping[str, Any] = field(default_factory=dict)
    #: How the command line named the task (a built-in's name, a task file's path), so a
    #: printed `run TASK --resume RUN` can be run as it is ("" when not known).
    task_spec: str = ""
    #: The run's own short name and note (`--name`, `--note`; "" when none was given: a
    #: resumed run keeps what the store has).
    run_name: str = ""
    note: str = ""
    #: The checkpoint a fork started from (`run --init-from`): ``RUN@STEP`` or a
    #: ``tinker://`` path; "" for a run from the base model (and on a resume: the store
    #: keeps what the first start recorded).
    parent: str = ""
    #: The fork took the parent's optimizer state too (`--with-optimizer`): a resume before
    #: the fork's own first checkpoint takes it again.
    parent_optimizer: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class RunLabelled(Event):
    """The run's name or note changed after its start (edited from a dashboard); readers of
    the store see it as the run's row changes."""

    run_name: str
    note: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StartupProgressed(Event):
    """The run moved on in its start-up, so a watcher knows it is not hung.

    `loading_model`: the backend loads the base model (`detail` names it). `warmup`: the
    supervised format warm-up finished step `done` of `total`, with `loss` per example.
    `first_rollouts`: sampling started; the first training step follows. The first
    `StepTrained` ends the start-up.
    """

    phase: StartupPhase
    done: int = 0
    total: int = 0
    loss: float | None = None
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrajectorySummary:
    """One rollout as a person reads it: the conversation, its reward and version stamp.

    `messages` are {"role", "content"} dicts: the rollout's own messages when it gave them,
    otherwise the decoded text the model saw and wrote (role "transcript").
    """

    reward: float
    policy_version: int
    num_tokens: int
    messages: tuple[Mapping[str, Any], ...] = ()
    #: What the rollout reported besides its reward (`Trajectory.metrics`): numbers and
    #: booleans by name.
    metrics: Mapping[str, float | bool] = field(default_factory=dict)
    #: Its advantage in the group (by the run's rule; None: not known, an older record).
    advantage: float | None = None
    #: The length limit (`max_tokens`) cut off one of its turns (finish reason `length`).
    truncated: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupSampled(Event):
    """A group of rollouts of one scenario finished and was queued for training.

    `failed` members raised (or timed out) and were dropped; the group trains with the rest
    (`num_trajectories`); `detail` says why the first of them failed."""

    group_id: int
    scenario_id: str
    policy_version: int
    num_trajectories: int
    num_tokens: int
    reward_mean: float
    trajectories: tuple[TrajectorySummary, ...] = ()
    #: Position of the scenario in the run's scenario stream (-1: not from the stream).
    scenario_index: int = -1
    failed: int = 0
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupDiscarded(Event):
    """A group was dropped instead of trained; `reason` says why."""

    group_id: int
    scenario_id: str
    reason: DiscardReason
    policy_version: int
    trainer_version: int
    num_tokens: int
    detail: str = ""
    #: Position of the scenario in the run's scenario stream (-1: not from the stream).
    scenario_index: int = -1
    #: The step whose batch was being collected when it was dropped (trainer step + 1).
    step: int = -1


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupStarted(Event):
    """A rollout worker drew the scenario at `scenario_index` and started its group."""

    group_id: int
    scenario_index: int
    scenario_id: str
    policy_version: int


@dataclass(frozen=True, kw_only=True, slots=True)
class StepTrained(Event):
    """One optimizer step finished; `policy_version` is the version it produced."""

    step: int
    policy_version: int
    metrics: Mapping[str, float]
    #: The groups the step's batch took (trained, or counted with zero variance).
    group_ids: tuple[int, ...] = ()
    #: The step's reward and advantage histograms (`engine.rollouts.distributions`):
    #: name -> {"lo", "hi", "counts"}.
    histograms: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class TrajectoryTokens:
    """One trained trajectory token by token, from its first sampled token on (the prompt
    before it left out; the context between turns kept, with mask 0). Arrays of one length:
    `tokens` (ids), `sampled` and `trainer` logprobs (the trainer's before the step),
    `advantage`, `mask` (1: sampled and trained), `version` (the policy that sampled the
    token, -1 for context) and `entropy` (the trainer's; empty where the backend has none).
    Numpy arrays: a step holds thousands of tokens, kept as bytes by the store."""

    group_id: int
    index: int
    tokens: Any
    sampled: Any
    trainer: Any
    advantage: Any
    mask: Any
    version: Any
    entropy: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TokensTrained(Event):
    """The tokens a step trained (`TrajectoryTokens` per trajectory), after its
    `StepTrained`. `pieces`: the text of token ids this run had not recorded before (the
    tokenizer's own pieces), so a stored run shows its tokens without its tokenizer.
    `keep_steps`: the store keeps the tokens of this many latest steps (0: all)."""

    step: int
    trajectories: tuple[TrajectoryTokens, ...] = ()
    pieces: Mapping[int, str] = field(default_factory=dict)
    keep_steps: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointStarted(Event):
    """A checkpoint is being written; it counts only once `CheckpointSaved` follows."""

    step: int
    kind: CheckpointKind
    name: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointSaved(Event):
    step: int
    kind: CheckpointKind
    name: str
    path: str
    #: What a resumed run needs beside the weights: step, scenario position, the positions
    #: drawn but not yet trained, the next group id, the scenario generator's random state.
    resume_state: Mapping[str, Any] = field(default_factory=dict)
    #: A person asked for it (`c`, the control endpoint): the retention policy keeps it. A
    #: checkpoint saved before it was asked for is published again with this set.
    requested: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointDeleted(Event):
    """The retention policy (`keep_last_checkpoints`, `keep_every_checkpoints`) removed an
    older checkpoint from the backend: its path no longer loads, and no resume uses it."""

    step: int
    kind: CheckpointKind
    name: str
    path: str


@dataclass(frozen=True, kw_only=True, slots=True)
class BackendSessionOpened(Event):
    """The backend opened its session (a Tinker session id): the service bills usage by
    it, so `tinker-tui cost` reconciles a run against each of its sessions (a resumed run
    has one per process)."""

    session_id: str
    base_model: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStateChanged(Event):
    """The pipeline moved to a new state (paused by the user, stopping, ...)."""

    state: RunState
    reason: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class LogEmitted(Event):
    level: str
    message: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TrackerReported(LogEmitted):
    """An outside tracker (W&B, TensorBoard) says where the run's records go, how to upload
    them, or that it failed and is off. A log line everywhere a log line goes (store,
    dashboard); the headless reporter prints it whatever its level."""

    tracker: str


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionStarted(LogEmitted):
    """A process began running the run: its first start, or a `--resume`. A log line
    everywhere a log line goes; its text is made from the fields (any `message` given is
    replaced), so nothing needs to read it back."""

    backend: str
    base_model: str
    level: str = "info"
    message: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "message", f"starting {self.backend} backend, base model {self.base_model}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RunResumed(LogEmitted):
    """A `--resume` went back to the checkpoint at `step` (0 with no `checkpoint`: the
    start) and deleted the stored rows after it: a reader following the run forgets the
    later steps, as at a rollback. Written right after the deletion. Its text is made from
    the fields, as `SessionStarted`'s."""

    run_id: str
    #: The step the run goes on from.
    step: int
    #: The checkpoint's name; "" when the run starts over (no confirmed checkpoint).
    checkpoint: str = ""
    #: What the resume redoes: the steps recorded after `step`, the groups to run again,
    #: the scenarios drawn but not trained at the checkpoint.
    steps_undone: int = 0
    groups_requeued: int = 0
    scenarios_pending: int = 0
    #: Seconds the run was down before this session: from the last thing its previous
    #: session recorded to this session's start (not counted in its duration).
    down_seconds: float = 0.0
    level: str = "info"
    message: str = ""

    def __post_init__(self) -> None:
        where = (
            f"checkpoint {self.checkpoint} (step {self.step})"
            if self.checkpoint
            else "the start (no confirmed checkpoint)"
        )
        object.__setattr__(
            self,
            "message",
            (
                f"resuming run {self.run_id} from {where}: {self.steps_undone} later step(s) "
                f"undone, {self.groups_requeued} group(s) to run again "
                f"({self.scenarios_pending} scenario(s) drawn but untrained)"
            ),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished(Event):
    status: RunStatus
    final_step: int
    reason: str = ""
    cause: StopCause = ""


#: `CommandReceived.source` of what the run asked of itself.
SOURCE_ENGINE = "engine"


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandReceived(Event):
    """A control command reached the engine (from the UI, a signal, or another process).

    `command` is one of pause, resume, checkpoint, eval, stop, set; `args` holds e.g.
    {"name": "learning_rate", "value": 1e-3} for set. `source` says who asked: "user" (the
    dashboard, a signal, another process), "engine" (the run itself: a budget, a failed
    task, a full disk), "on_collapse" or "on_health_pause" (the health reactions).
    """

    command: str
    args: Mapping[str, Any] = field(default_factory=dict)
    source: str = "user"


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalCompleted(Event):
    """An evaluation of the policy at `policy_version` finished."""

    step: int
    policy_version: int
    metrics: Mapping[str, float]
    #: The rollouts that succeeded, in scenario order, and each one's scenario id (same
    #: length): kept so that `export` lists an evaluation's samples beside training's.
    trajectories: tuple[TrajectorySummary, ...] = ()
    scenario_ids: tuple[str, ...] = ()
    #: How it sampled (`engine.training.eval_protocol.EvalProtocol.as_dict`): its numbers
    #: compare with another evaluation's only under an equal protocol. {} when unknown
    #: (stored by an older tinker-tui).
    protocol: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class StalledRollout:
    """A group's rollouts in flight for longer than the pipeline's stall threshold (30 s):
    shown with its age and where in the task's code it waits, long before `rollout_timeout`
    cancels it."""

    group_id: int
    scenario_id: str
    #: Seconds since the group's rollouts started.
    age: float
    #: "it is waiting at FILE:LINE (code)": the deepest line of the task's file it awaits
    #: (else the file its rollout is in).
    waiting_at: str
    #: That line, typed ("" and 0 when no frame of the task's file is awaited).
    file: str = ""
    line: int = 0
    code: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ThroughputMeasured(Event):
    """Pipeline accounting over the last `window` seconds, published about once a second.

    Busy fractions are 0..1. Staleness histograms map "versions behind" to a count of the
    groups trained in the window, split into versions that passed while the group was being
    sampled (in flight) and while it waited in the queue.
    """

    window: float
    rollouts_per_s: float
    sampled_tokens_per_s: float
    trained_tokens_per_s: float
    queue_depth: int
    in_flight: int
    trainer_busy: float
    sampler_busy: float
    verdict: str
    staleness_in_flight: Mapping[int, int] = field(default_factory=dict)
    staleness_queued: Mapping[int, int] = field(default_factory=dict)
    #: 99th percentile of the event loop's wake-up lag, seconds (real time).
    loop_lag_p99: float = 0.0
    #: Groups whose rollouts have run past the stall threshold, oldest first.
    stalled: tuple[StalledRollout, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class BackendWaited(Event):
    """A backend call is waiting: rate limited, queued for capacity, or retrying an error.

    `reason` names the backend and the cause ("Tinker: 503 Service Unavailable",
    "local backend: no answer yet"); `operation` is the call (or, for the tinker SDK's own
    retries, the endpoint: "create_session"); `attempt` is the try the call is on; `delay`
    is the backoff about to be slept before a retry, or the seconds waited so far.
    """

    operation: str
    reason: str
    attempt: int
    delay: float


Handler = Callable[[Event], None]


class EventBus:
    """Synchronous fan-out of events to subscribers, on the event loop's thread.

    Handlers must be quick (append to a model, put on a queue). A handler that raises is
    logged and skipped so one broken consumer cannot stop training.
    """

    def __init__(self) -> None:
        # Replaced, never changed in place: `publish` (several times per group) iterates it
        # without a copy while a handler may subscribe or unsubscribe.
        self._handlers: tuple[Handler, ...] = ()

    def subscribe(self, handler: Handler) -> Callable[[], None]:
        self._handlers = (*self._handlers, handler)

        def unsubscribe() -> None:
            if handler in self._handlers:
                handlers = list(self._handlers)
                handlers.remove(handler)
                self._handlers = tuple(handlers)

        return unsubscribe

    def publish(self, event: Event) -> None:
        for handler in self._handlers:
            try:
                handler(event)
            except Exception:
                logger.exception("event handler %r failed on %s", handler, type(event).__name__)
