"""LoRA adapters in peft's on-disk layout, so other tools load what the local backend trains.

A peft LoRA folder is ``adapter_model.safetensors`` plus ``adapter_config.json``. Its tensor
keys are the adapted module's qualified name inside the causal LM, prefixed by peft's wrapper
(``base_model.model.``) and followed by ``.lora_A.weight`` (``[r, in]``) or ``.lora_B.weight``
(``[out, r]``); the update is ``lora_alpha / r * B A``. Ours (`lora.Adapter`) keys the same
matrices ``<module>.lora_A`` / ``<module>.lora_B`` with the same shapes and the same scale,
so the conversion is a renaming: no arithmetic, nothing lost.

``target_modules`` lists the adapted modules' last name parts (``q_proj``, ``lm_head``...),
the form peft, vLLM and Tinker's own archives use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
_PREFIX = "base_model.model."
_OURS = (".lora_A", ".lora_B")


def to_peft(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``<module>.lora_A`` → ``base_model.model.<module>.lora_A.weight`` (and B)."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if not key.endswith(_OURS):
            raise ValueError(f"not an adapter matrix: {key!r}")
        out[f"{_PREFIX}{key}.weight"] = tensor.detach().to("cpu").contiguous()
    return out


def from_peft(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of `to_peft`; a key of another layout is a ValueError naming it."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        inner = key.removeprefix(_PREFIX).removesuffix(".weight")
        if not key.startswith(_PREFIX) or not key.endswith(".weight") or not inner.endswith(_OURS):
            raise ValueError(f"{WEIGHTS_FILE} holds {key!r}, not a LoRA matrix in peft's layout")
        out[inner] = tensor
    return out


def target_modules(state: Mapping[str, torch.Tensor]) -> list[str]:
    """The adapted modules' last name parts, sorted."""
    return sorted({key.rsplit(".", 2)[-2] for key in state})


def adapter_config(meta: Mapping[str, Any], base_model: str, modules: list[str]) -> dict[str, Any]:
    """peft's ``LoraConfig`` as JSON for an adapter described by a checkpoint's meta."""
    alpha = float(meta.get("lora_alpha", 32.0))
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": int(meta["lora_rank"]),
        "lora_alpha": int(alpha) if alpha.is_integer() else alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": modules,
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "modules_to_save": None,
        "inference_mode": True,
    }


def write_adapter(folder: Path, state: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> None:
    """Both files of a peft adapter into `folder` (which exists), with the base model
    reference taken from ``meta["base_model"]``.

    The tensors are serialised in memory and written in one call, so a full disk fails as
    OSError(ENOSPC) naming the file (an adapter is small next to the base weights)."""
    from safetensors.torch import save

    tensors = to_peft(state)
    config = adapter_config(meta, str(meta.get("base_model", "")), target_modules(state))
    (folder / WEIGHTS_FILE).write_bytes(save(tensors, metadata={"format": "pt"}))
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True))


def read_adapter(folder: Path) -> dict[str, torch.Tensor]:
    """Our adapter state from a peft folder's weights file (on the CPU)."""
    from safetensors.torch import load_file

    return from_peft(load_file(str(folder / WEIGHTS_FILE), device="cpu"))
