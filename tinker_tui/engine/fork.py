"""A run started from another run's weights (`run --init-from`): what the engine needs to
start it, in a module of its own so the command line names it without importing the engine.

A fork trains from the parent's checkpoint at its own step 0, skips the format warm-up (the
parent's weights already have it) and is recorded with its parent (`RunStarted.parent`,
the store's ``runs.parent``), which `runs` and `compare` show as lineage.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InitFrom:
    #: The checkpoint's ``tinker://`` path.
    path: str
    #: How lineage names the parent: ``RUN@STEP``, or the path when no run of the store saved it.
    parent: str
    #: Also take the checkpoint's optimizer state (a full checkpoint), not only its weights.
    with_optimizer: bool = False
