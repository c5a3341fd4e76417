"""Where a run's checkpoints live: the one home of the rule, for the engine that writes
them and for the dashboards that show where (without importing the backend).

A run keeps its checkpoints in `checkpoints/` beside its store. The local backend names
them Tinker-style, ``tinker://<model_id>/weights/<name>`` (full state) and
``tinker://<model_id>/sampler_weights/<name>``, and keeps each in the folder
``<checkpoint_dir>/<model_id>/<kind>/<name>/``; the Tinker service keeps its own remotely.
"""

from __future__ import annotations

from pathlib import Path

#: The checkpoints' folder, beside the run store.
CHECKPOINTS_FOLDER = "checkpoints"
#: The two kinds of saved weights, as the paths name them.
KINDS = ("weights", "sampler_weights")
SCHEME = "tinker://"


def run_checkpoint_dir(db_path: str | Path) -> Path:
    """The folder a run whose store is `db_path` keeps its (local) checkpoints in."""
    return Path(db_path).parent / CHECKPOINTS_FOLDER


def local_folder(checkpoint_dir: str | Path, path: str) -> Path | None:
    """The folder of the local backend's checkpoint `path` (``tinker://...``) under
    `checkpoint_dir`; None when `path` is not one (the parts are not checked further)."""
    if not path.startswith(SCHEME):
        return None
    parts = path[len(SCHEME) :].split("/")
    if len(parts) != 3 or parts[1] not in KINDS or not all(parts):
        return None
    model_id, kind, name = parts
    return Path(checkpoint_dir) / model_id / kind / name


def is_full_state(path: str) -> bool:
    """Whether `path` names a full checkpoint (``tinker://<model_id>/weights/<name>``): it
    resumes training, while a sampler loads only sampler weights."""
    parts = path[len(SCHEME) :].split("/") if path.startswith(SCHEME) else []
    return len(parts) == 3 and parts[1] == "weights"
