"""Which `base_model` names the local backend can load, decided without torch: the command
line checks a run's base model with this before anything heavy is imported, and the backend
(`engine.local.model`) asks the same when it loads one."""

from __future__ import annotations

import os
from pathlib import Path

#: The embedded model a run trains when it names none (defined here, in a module of the
#: standard library only, so the command line's checks import it cheaply).
DEFAULT_BASE_MODEL = "tinker-tui/tiny-chat"
#: The models built into the package (their architectures: `engine.local.model`).
EMBEDDED_MODELS = (DEFAULT_BASE_MODEL,)


def looks_like_path(name: str) -> bool:
    """A folder's path (absolute, ./relative, ~/...; or an existing relative path), not a
    model's name."""
    return name.startswith(("/", "./", "../", "~")) or os.sep in name and Path(name).exists()


def base_model_problem(base_model: str) -> str | None:
    """Why the local backend cannot load `base_model` (one sentence), or None if it can:
    an embedded model, or a folder holding a Hugging Face causal LM's config.json."""
    if base_model in EMBEDDED_MODELS:
        return None
    if looks_like_path(base_model):
        folder = Path(base_model).expanduser().resolve()
        if not (folder / "config.json").is_file():
            return (
                f"Base model folder {base_model!r} is not a Hugging Face model folder: "
                f"{folder / 'config.json'} does not exist"
            )
        return None
    return (
        f"Unknown base model {base_model!r} for the local backend: it embeds "
        f"{', '.join(repr(n) for n in EMBEDDED_MODELS)}, and also loads a Hugging Face "
        "causal-LM folder given by its path (a directory with config.json and weights). "
        "Models by hub name need the Tinker service (set TINKER_API_KEY)."
    )
