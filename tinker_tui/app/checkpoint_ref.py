"""A checkpoint named on the command line: ``RUN@STEP``, ``RUN`` (its newest checkpoint) or
a ``tinker://`` path, resolved against the run store.

One rule for every command that takes one (`export-model`, `run --init-from`), so the same
words name the same weights everywhere. RUN is a run id or a unique prefix, as for `show`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tinker_tui.engine.checkpoint_paths import SCHEME, run_checkpoint_dir
from tinker_tui.engine.errors import UsageError


@dataclass(frozen=True)
class CheckpointRef:
    """Where a named checkpoint is, and what it came from."""

    #: The ``tinker://`` path (the local backend's, or the service's).
    path: str
    #: Its kind as the store records it: "state" (weights + optimizer), "sampler", or ""
    #: (a path given as is).
    kind: str
    #: The run and step it was saved by ("" and None for a path given as is).
    run_id: str
    step: int | None
    #: The backend that saved it ("" when not known) and the folder local ones live in.
    backend: str
    base_model: str
    checkpoint_dir: Path
    #: The LoRA rank of the run that saved it (None when not known).
    lora_rank: int | None = None

    @property
    def label(self) -> str:
        """How lineage shows it: ``RUN@STEP``, or the path."""
        return f"{self.run_id}@{self.step}" if self.run_id else self.path


def parse_spec(spec: str) -> tuple[str, int | None]:
    """``RUN@STEP`` → (RUN, STEP); ``RUN`` → (RUN, None). A bad step is a UsageError."""
    run, at, step = spec.partition("@")
    if not at:
        return run, None
    if not step.isdigit():
        raise UsageError(f"{spec!r}: expected RUN@STEP with a step number, e.g. {run}@20")
    return run, int(step)


async def resolve(db: Path, spec: str, *, need_state: bool = False) -> CheckpointRef:
    """The checkpoint `spec` names. `need_state`: only a full state (with optimizer)."""
    if spec.startswith(SCHEME):
        return CheckpointRef(
            path=spec,
            kind="",
            run_id="",
            step=None,
            backend="",
            base_model="",
            checkpoint_dir=run_checkpoint_dir(db),
        )
    from tinker_tui.engine.store.reader import StoreReader

    wanted, step = parse_spec(spec)
    if not wanted:
        raise UsageError(f"{spec!r}: name a run (RUN@STEP, RUN, or a tinker:// path)")
    if not Path(db).is_file():
        raise UsageError(f"no run store at {db} (pass --db)")
    async with await StoreReader.open_readonly(db) as store:
        run = await store.find_run(wanted)
        saved = await store.kept_checkpoints(run.run_id)
    kept = [c for c in saved if c.kind == "state" or not need_state]
    if not kept:
        what = "full checkpoint (with optimizer state)" if need_state else "checkpoint"
        raise UsageError(f"run {run.run_id} has no {what} left")
    if step is None:
        step = max(c.step for c in kept)
    at_step = [c for c in kept if c.step == step]
    if not at_step:
        steps = ", ".join(str(s) for s in sorted({c.step for c in kept}))
        raise UsageError(f"run {run.run_id} has no checkpoint at step {step}; it has: {steps}")
    # A full state where there is one (it also serves weights-only uses).
    chosen = next((c for c in at_step if c.kind == "state"), at_step[-1])
    return CheckpointRef(
        path=chosen.path,
        kind=chosen.kind,
        run_id=run.run_id,
        step=step,
        backend=run.backend,
        base_model=run.base_model,
        checkpoint_dir=run_checkpoint_dir(db),
        lora_rank=_int_or_none(run.config.get("lora_rank")),
    )


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
