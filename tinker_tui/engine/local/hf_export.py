"""A local checkpoint as a Hugging Face folder that `transformers` (+ `peft`) load.

Two forms. The adapter (default): peft's two files (`peft_format`), whose
``base_model_name_or_path`` names the base: the model folder the run trained on, or, for the
embedded model (which no hub knows), a ``base/`` folder written beside the adapter with its
config, weights and tokenizer (the embedded model is a transformers Llama with the same
parameter names). Merged (`merge=True`): one standalone model folder whose adapted weights
are ``W + alpha / r * B A``, with the base's tokenizer and generation config; a trained
``lm_head`` unties it from the input embeddings (the merged head differs from them).

Runs in the calling thread (a command line tool, not the engine's loop): it loads the base
with transformers, which takes seconds and the base's size in memory.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_tui.engine.local import checkpoints, peft_format
from tinker_tui.engine.local.errors import bad_request

#: Files of a model folder that travel with it (besides weights and config.json).
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "generation_config.json",
)
BASE_SUBFOLDER = "base"


@dataclass(frozen=True)
class Exported:
    """What `export` wrote: the folder, its form, and the base model it refers to."""

    folder: Path
    merged: bool
    base_model: str
    files: tuple[str, ...]


def export(checkpoint_dir: Path, path: str, out: Path, *, merge: bool) -> Exported:
    """Write checkpoint `path` (``tinker://...`` of the local backend, or its folder) to `out`
    (created; an existing non-empty folder is refused)."""
    folder = checkpoints.resolve(checkpoint_dir, path)
    meta, state, _ = checkpoints.load(folder, with_optimizer=False, path=path)
    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise bad_request(f"{out} exists and is not an empty folder; choose a new one")
    base_name = str(meta["base_model"])
    module = base_module(base_name)
    out.mkdir(parents=True, exist_ok=True)
    if merge:
        merge_into(module, state, meta)
        module.save_pretrained(out)
        _copy_tokenizer(base_name, out)
        base_ref = base_name
    else:
        if _embedded(base_name):
            base_dir = out / BASE_SUBFOLDER
            module.save_pretrained(base_dir)
            _copy_tokenizer(base_name, base_dir)
            base_ref = str(base_dir.resolve())
        else:
            base_ref = base_name
        peft_format.write_adapter(out, state, {**meta, "base_model": base_ref})
    provenance = {
        "checkpoint": meta.get("path", path),
        "base_model": base_name,
        "base_fingerprint": meta.get("base_fingerprint"),
        "merged": merge,
        "user_metadata": meta.get("user_metadata", {}),
    }
    (out / "tinker_tui_export.json").write_text(json.dumps(provenance, indent=2, sort_keys=True))
    files = tuple(sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()))
    return Exported(folder=out, merged=merge, base_model=base_ref, files=files)


def _embedded(base_name: str) -> bool:
    from tinker_tui.engine.local.base_model_names import EMBEDDED_MODELS

    return base_name in EMBEDDED_MODELS


def base_module(base_name: str) -> Any:
    """The base as a transformers model, on the CPU in its saved dtype."""
    from tinker_tui.engine.local.model import build_tiny_module, ensure_offline

    if _embedded(base_name):
        return build_tiny_module(base_name)
    ensure_offline()
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(base_name, local_files_only=True, dtype="auto")
    except Exception as exc:
        raise bad_request(f"Cannot load the base model folder {base_name!r}: {exc}") from exc


def merge_into(module: Any, state: dict[str, Any], meta: dict[str, Any]) -> None:
    """Add ``alpha / r * B A`` to each adapted weight of `module` (in place)."""
    import torch

    scale = float(meta.get("lora_alpha", 32.0)) / int(meta["lora_rank"])
    names = sorted({key.rsplit(".", 1)[0] for key in state})
    output = module.get_output_embeddings()
    with torch.no_grad():
        for name in names:
            layer = module.get_submodule(name)
            a, b = state[f"{name}.lora_A"].float(), state[f"{name}.lora_B"].float()
            weight = layer.weight
            merged = (weight.float() + scale * (b @ a)).to(weight.dtype)
            if layer is output and module.config.get_text_config().tie_word_embeddings:
                module.config.tie_word_embeddings = False
                module.config.get_text_config().tie_word_embeddings = False
                layer.weight = torch.nn.Parameter(merged)
            else:
                weight.copy_(merged)


def _copy_tokenizer(base_name: str, out: Path) -> None:
    if _embedded(base_name):
        from tinker_tui.engine.local.hf_tokenizer import TOKENIZER_DIR

        source = TOKENIZER_DIR
    else:
        source = Path(base_name)
    for name in _TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, out / name)
