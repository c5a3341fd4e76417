"""Where a rollback goes and why, in words and in a command's fields.

A rollback goes to the newest full checkpoint of the weights that sampled the best step
(`HealthWindow.rollback_point`), not the best step's own checkpoint, which holds that step's
update: the log, the commands table and the dashboard say so, from the health window alone,
here."""

from __future__ import annotations

from tinker_tui.engine.metrics.health import HealthWindow


def rollback_basis(health: HealthWindow, target: tuple[int, str] | None) -> dict[str, int]:
    """Why a rollback goes where it goes, as a command's fields: the best step, the
    newest policy version that sampled it, and the target checkpoint's version."""
    best, by = health.best_step, health.best_sampled_by
    basis = {} if best is None else {"best_step": best[0]}
    if by is not None:
        basis["best_sampled_by"] = by
    version = None if target is None else health.checkpoint_version(target[0])
    if version is not None:
        basis["checkpoint_version"] = version
    return basis


def target_words(health: HealthWindow, target: tuple[int, str]) -> str:
    """The rollback target and why, in words, for the log."""
    best, by = health.best_step, health.best_sampled_by
    version = health.checkpoint_version(target[0])
    if best is None:
        return f"step {target[0]}"
    if by is None or version is None:
        return f"step {target[0]}, the last checkpoint before best step {best[0]}"
    return (
        f"step {target[0]}, weights version {version}: the newest checkpoint of the "
        f"weights that sampled best step {best[0]} (version {by}); a checkpoint "
        f"after that holds an update the best step's rewards did not see"
    )


def no_rollback_point(health: HealthWindow) -> str:
    """Why there is nothing to roll back to, in words."""
    best, by = health.best_step, health.best_sampled_by
    if best is None:
        return "no step trained yet"
    weights = f"version {by}, " if by is not None else ""
    return (
        f"no full checkpoint of this run holds the weights that sampled its best step "
        f"({weights}step {best[0]}); the checkpoint of the best step itself holds "
        "that step's update"
    )


def best_words(health: HealthWindow, best: tuple[int, float] | None) -> str:
    """The best step a rollback kept (`best`, taken before it), for its log line."""
    if best is None:
        return ""
    by = health.best_sampled_by
    return f"; best step {best[0]}" + ("" if by is None else f" was sampled by version {by}")
