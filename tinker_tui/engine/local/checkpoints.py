"""Checkpoints of the local backend on disk, addressed by Tinker-style paths.

``tinker://<model_id>/weights/<name>`` (model + optimizer state, from `save_state`) lives in
``<checkpoint_dir>/<model_id>/weights/<name>/`` and ``tinker://<model_id>/sampler_weights/<name>``
(weights only) in ``.../sampler_weights/<name>/``. Each folder holds ``meta.json`` (base model,
LoRA rank and layers), the LoRA matrices in peft's layout (``adapter_model.safetensors`` and
``adapter_config.json``, see `peft_format`: peft, vLLM and the cookbook's weight tools read
them; the base weights are never copied) and, for training state, ``optimizer.pt``. Folders
of format 2 keep the matrices in ``adapter.pt`` (a torch pickle) and still load. A new process given the same `checkpoint_dir` can
load any of them; a folder base model must still be at the path recorded in ``meta.json``. Folders are written under a temporary name and renamed,
so a crash never leaves a half-written checkpoint behind a valid name.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tinker_tui.engine.checkpoint_paths import local_folder
from tinker_tui.engine.errors import DiskFull, is_disk_full
from tinker_tui.engine.local import peft_format
from tinker_tui.engine.local.errors import bad_request, conflict, not_found

FORMAT_VERSION = 3
#: Formats this version loads: 2 (``adapter.pt``) and 3 (peft layout).
READABLE_FORMATS = (2, 3)
OLD_MODEL_FILE = "adapter.pt"
KINDS = ("weights", "sampler_weights")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
CHECKPOINT_DIR_ENV = "TINKER_TUI_CHECKPOINT_DIR"


def default_checkpoint_dir() -> Path:
    """$TINKER_TUI_CHECKPOINT_DIR, else $XDG_DATA_HOME/tinker-tui/checkpoints."""
    env = os.environ.get(CHECKPOINT_DIR_ENV)
    if env:
        return Path(env).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "tinker-tui" / "checkpoints"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or ".." in name:
        raise bad_request(
            f"Invalid checkpoint name {name!r}: use letters, digits, '.', '_' and '-' "
            "(no '/'), starting with a letter or digit, at most 200 characters"
        )
    return name


def tinker_path(model_id: str, kind: str, name: str) -> str:
    assert kind in KINDS
    return f"tinker://{model_id}/{kind}/{name}"


def resolve(checkpoint_dir: Path, path: str) -> Path:
    """The folder of a ``tinker://`` path (or an existing local checkpoint folder)."""
    if not isinstance(path, str) or not path:
        raise bad_request(f"Checkpoint path must be a non-empty string, got {path!r}")
    if path.startswith("tinker://"):
        parts = path[len("tinker://") :].split("/")
        if len(parts) != 3 or parts[1] not in KINDS or not all(parts):
            raise bad_request(
                f"Invalid checkpoint path {path!r}: expected "
                "tinker://<model_id>/weights/<name> or tinker://<model_id>/sampler_weights/<name>"
            )
        model_id, kind, name = parts
        check_name(name)
        if "/" in model_id or model_id in (".", ".."):
            raise bad_request(f"Invalid model id in checkpoint path {path!r}")
        folder = local_folder(checkpoint_dir, path) or Path(checkpoint_dir)  # laid out there
    else:
        folder = Path(path).expanduser()
    if not (folder / "meta.json").is_file():
        raise not_found(
            f"Checkpoint {path!r} not found: no readable checkpoint at {folder} "
            f"(checkpoint_dir is {checkpoint_dir})"
        )
    return folder


def save(
    folder: Path,
    *,
    meta: dict[str, Any],
    model_state: dict[str, Any],
    optimizer_state: dict[str, Any] | None,
    overwrite: bool = False,
) -> None:
    folder = Path(folder)
    if folder.exists() and not overwrite:
        raise conflict(
            f"Checkpoint {meta.get('path', folder)!r} already exists; "
            "pass overwrite=True or choose another name"
        )
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFull.writing("checkpoint", folder) from exc
        raise
    try:
        meta = {**meta, "format": FORMAT_VERSION, "created_unix": time.time()}
        meta["has_optimizer"] = optimizer_state is not None
        peft_format.write_adapter(tmp, model_state, meta)
        if optimizer_state is not None:
            _torch_save(optimizer_state, tmp / "optimizer.pt")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
        if folder.exists():
            old = folder.with_name(f".{folder.name}.old-{os.getpid()}-{time.time_ns()}")
            folder.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        tmp.rename(folder)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(exc):
            raise DiskFull.writing("checkpoint", folder) from exc
        raise


def _torch_save(state: dict[str, Any], path: Path) -> None:
    """`torch.save` into memory, then one plain write: a full disk fails as OSError(ENOSPC)
    naming the file, where torch's own writer reports only "unexpected pos" (it is handed a
    short write). An adapter's state is small next to the base weights, which are never saved."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    path.write_bytes(buffer.getbuffer())


def load(
    folder: Path, *, with_optimizer: bool, path: str
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """(meta, model_state, optimizer_state or None); clear errors for unreadable files."""
    import torch

    folder = Path(folder)
    try:
        meta = json.loads((folder / "meta.json").read_text())
        if meta.get("format") == 1:
            raise ValueError(
                "it is a full fine-tuning checkpoint of an older tinker-tui (format 1); "
                "this version trains and loads LoRA adapters only"
            )
        if meta.get("format") not in READABLE_FORMATS:
            raise ValueError(f"unsupported checkpoint format {meta.get('format')!r}")
        for key in ("base_model", "lora_rank", "lora_kinds"):
            if key not in meta:
                raise ValueError(f"meta.json lacks {key!r}")
        if meta["format"] == 2:
            model_state = torch.load(folder / OLD_MODEL_FILE, map_location="cpu", weights_only=True)
        else:
            model_state = peft_format.read_adapter(folder)
    except Exception as exc:
        raise not_found(f"Checkpoint {path!r} at {folder} is unreadable: {exc}") from exc
    optimizer_state = None
    if with_optimizer:
        if not meta.get("has_optimizer") or not (folder / "optimizer.pt").is_file():
            raise bad_request(
                f"Checkpoint {path!r} has no optimizer state (sampler weights are saved without "
                "it); use create_training_client_from_state to load the weights only"
            )
        try:
            optimizer_state = torch.load(
                folder / "optimizer.pt", map_location="cpu", weights_only=True
            )
        except Exception as exc:
            raise not_found(
                f"Checkpoint {path!r}: optimizer state at {folder} is unreadable: {exc}"
            ) from exc
    return meta, model_state, optimizer_state


def restore_adapter(meta: dict[str, Any], state: dict[str, Any], base: Any, path: str) -> Any:
    """The LoRA adapter saved in a checkpoint, on `base` (a loaded `model.BaseModel`)."""
    from tinker_tui.engine.local.lora import LORA_ALPHA, Adapter

    check_fingerprint(meta, base, path)
    try:
        rank = int(meta["lora_rank"])
        kinds = tuple(meta["lora_kinds"])
        adapter = Adapter.create(base.layers, rank, kinds, seed=0, device=base.device)
        adapter.alpha = float(meta.get("lora_alpha", LORA_ALPHA))
        adapter.load_state_dict(state)
    except Exception as exc:
        raise bad_request(
            f"Checkpoint {path!r} does not fit base model {base.name!r}: {exc}"
        ) from exc
    return adapter


def check_fingerprint(meta: dict[str, Any], base: Any, path: str) -> None:
    """Refuse an adapter saved on other weights of the same base model name."""
    saved_on = meta.get("base_fingerprint")
    if saved_on is not None and saved_on != base.fingerprint:
        raise bad_request(
            f"Checkpoint {path!r} was trained on other weights of {base.name!r} "
            f"(fingerprint {saved_on}, these are {base.fingerprint}): its adapter would not "
            "mean the same here"
        )


def adapter_meta(adapter: Any) -> dict[str, Any]:
    return {
        "lora_rank": adapter.rank,
        "lora_alpha": adapter.alpha,
        "lora_kinds": list(adapter.kinds),
        "train_attn": "attn" in adapter.kinds,
        "train_mlp": "mlp" in adapter.kinds,
        "train_unembed": "unembed" in adapter.kinds,
    }
