"""Outside trackers: the run's metrics where a team already looks (W&B, TensorBoard).

Each tracker is an event consumer like the store and the headless reporter, and writes on
a thread of its own (`TrackerFeed`), so it never slows a step; one that fails is reported
once and switched off, never fatal. Their packages are optional extras, imported only by a
run that uses them: `missing_package` answers from the installed distributions alone, so
a run asked for a tracker whose package is absent stops before anything starts.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tinker_tui.engine.clock import Clock
from tinker_tui.engine.events import Event
from tinker_tui.engine.trackers.feed import TrackerFeed

#: tracker -> (the module it imports, the extra that installs it)
PACKAGES = {"wandb": ("wandb", "wandb"), "tensorboard": ("tensorboardX", "tensorboard")}


def wanted(config: Any) -> list[str]:
    """The trackers a run's settings turn on ("wandb", "tensorboard")."""
    return [
        name
        for name, on in (("wandb", config.wandb_project), ("tensorboard", config.tensorboard_dir))
        if on
    ]


def missing_package(tracker: str, asked_by: str = "") -> str | None:
    """A one-line error if `tracker`'s package is not installed; None if it is.
    `asked_by` names what asked for it (default: the setting that turns it on)."""
    module, extra = PACKAGES[tracker]
    if importlib.util.find_spec(module) is not None:
        return None
    asked_by = asked_by or (
        "wandb_project (--wandb)" if tracker == "wandb" else "tensorboard_dir (--tensorboard)"
    )
    return (
        f"{asked_by} needs the {module} package, which is not installed: "
        f'pip install "tinker-tui[{extra}]"'
    )


def wandb_run_id_for(run_id: str) -> str:
    """The W&B run id of our run `run_id`: the same id, minus characters W&B refuses."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", run_id)[:64]


def with_tracker_ids(config: Any, run_id: str) -> Any:
    """`config` with the W&B run id filled in when W&B is on and none is set. It is one of
    the run's settings, so the store keeps it and `--resume` continues the same W&B run."""
    if config.wandb_project and not config.wandb_run_id:
        return replace(config, wandb_run_id=wandb_run_id_for(run_id))
    return config


def make_trackers(config: Any, *, store_folder: Path) -> list[Any]:
    """The trackers `config` turns on; nothing is imported until each one starts."""
    trackers: list[Any] = []
    if config.wandb_project:
        from tinker_tui.engine.trackers.wandb_tracker import WandbTracker

        trackers.append(
            WandbTracker(
                project=config.wandb_project,
                entity=config.wandb_entity or None,
                run_name=config.wandb_run_name or None,
                run_id=config.wandb_run_id or None,
                folder=store_folder,
            )
        )
    if config.tensorboard_dir:
        from tinker_tui.engine.trackers.tensorboard_tracker import TensorBoardTracker

        trackers.append(TensorBoardTracker(folder=Path(config.tensorboard_dir)))
    return trackers


class TrackerFeeds:
    """The feeds of one run: subscribe them before `RunStarted`, close them before the
    store closes (their last words are log lines the store records)."""

    def __init__(self, feeds: list[TrackerFeed]) -> None:
        self.feeds = feeds

    @classmethod
    def start(
        cls, config: Any, *, store_folder: Path, publish: Callable[[Event], None], clock: Clock
    ) -> TrackerFeeds:
        samples_every = getattr(config, "wandb_samples_every", 0)
        return cls(
            [
                TrackerFeed(
                    tracker,
                    publish=publish,
                    clock=clock,
                    samples_every=samples_every if tracker.key == "wandb" else 0,
                )
                for tracker in make_trackers(config, store_folder=store_folder)
            ]
        )

    def handlers(self) -> list[Callable[[Event], None]]:
        return [feed.handle for feed in self.feeds]

    async def close(self) -> None:
        for feed in self.feeds:
            await feed.close()
