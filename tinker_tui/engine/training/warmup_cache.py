"""Reuse of a finished format warm-up, on the local backend.

Running a task again with the same seed repeats the same supervised warm-up exactly: the
same Datums drawn in the same order, trained from the same adapter with the same optimizer
settings (on CPU the local backend is deterministic). Its result, the adapter and optimizer
state after the last step, is saved once and loaded instead of recomputed.

Where: ``warmup-cache/<key>/`` in the run store's checkpoint folder (``checkpoints/`` beside
the store), a local-backend checkpoint folder. So it is scoped to the runs it serves and goes
away with them; a fresh store starts cold.

The key is a SHA-256 over everything that decides the result: the training client's
`training_identity()` (base weights, initial adapter and optimizer state, which follow from
the seed and the LoRA settings; the backend's source code; torch's version; the thread
count), the token ids, targets and weights of every example, the examples each step draws,
the number of steps, the learning rate and Adam's settings. Changing any of these gives
another key; nothing is ever invalidated in place, and entries not used recently are deleted
(`KEEP` newest are kept). An entry that fails to load is deleted and the warm-up runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tinker

CACHE_DIR = "warmup-cache"
KEEP = 4


def warmup_key(
    identity: str,
    datums: Sequence[tinker.Datum],
    draws: Sequence[Sequence[int]],
    *,
    learning_rate: float,
    adam: Mapping[str, float],
) -> str:
    digest = hashlib.sha256()
    digest.update(
        json.dumps(
            {
                "identity": identity,
                "loss_fn": "cross_entropy",
                "learning_rate": learning_rate,
                "adam": dict(sorted(adam.items())),
                "draws": [list(d) for d in draws],
            }
        ).encode()
    )
    for datum in datums:
        digest.update(
            json.dumps(
                [
                    datum.model_input.to_ints(),
                    {k: v.to_numpy().tolist() for k, v in sorted(datum.loss_fn_inputs.items())},
                ],
                default=float,
            ).encode()
        )
    return digest.hexdigest()[:32]


class WarmupCache:
    def __init__(self, root: Path, keep: int = KEEP) -> None:
        self.root = Path(root)
        self.keep = keep

    def entry(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str) -> tuple[Path, dict[str, Any]] | None:
        """The entry's folder and its metadata, or None."""
        folder = self.entry(key)
        try:
            meta = json.loads((folder / "meta.json").read_text())
        except (OSError, ValueError):
            return None
        os.utime(folder)  # recently used: kept by `prune`
        return folder, dict(meta.get("user_metadata") or {})

    def put(self, key: str, folder: Path) -> None:
        """Move a saved checkpoint folder in as the entry of `key` (an existing one stays)."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(folder, self.entry(key))
        except OSError:  # an entry already there (another run), or another file system
            shutil.rmtree(folder, ignore_errors=True)
        self.prune()

    def discard(self, key: str) -> None:
        shutil.rmtree(self.entry(key), ignore_errors=True)

    def prune(self) -> None:
        entries = sorted(
            (p for p in self.root.iterdir() if p.is_dir()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for old in entries[self.keep :]:
            shutil.rmtree(old, ignore_errors=True)
