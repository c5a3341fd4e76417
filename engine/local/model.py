"""The embedded base model(s) of the local backend.

`DEFAULT_BASE_MODEL` is a tiny Llama-style transformer (2 layers, hidden 64) built from a fixed
config and a fixed seed, so every process gets bit-identical initial weights without any file or
download. It is *random-init*: it knows no English. It exists so that the RL loop, the UI and
the tests run offline in seconds; the word-level tokenizer makes the embedded example's answers
single tokens, which is what lets it learn that fast (DESIGN.md, "Local backend facts").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.local.errors import bad_request
from engine.local.tokenizer import WordTokenizer

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM

from engine.local import DEFAULT_BASE_MODEL  # defined in __init__ so importing it is cheap


@dataclass(frozen=True)
class BaseModelSpec:
    """Everything needed to rebuild a base model exactly."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    max_context_length: int
    init_seed: int
    initializer_range: float = 0.02


_SPECS: dict[str, BaseModelSpec] = {
    DEFAULT_BASE_MODEL: BaseModelSpec(
        name=DEFAULT_BASE_MODEL,
        num_layers=2,
        hidden_size=64,
        num_heads=4,
        intermediate_size=256,
        max_context_length=2048,
        init_seed=20251130,
    ),
}


def list_base_models() -> list[str]:
    """Names of the embedded base models, default first."""
    return list(_SPECS)


def get_spec(base_model: str) -> BaseModelSpec:
    spec = _SPECS.get(base_model)
    if spec is None:
        raise bad_request(
            f"Unknown base model {base_model!r} for the local backend; "
            f"it embeds only: {', '.join(repr(n) for n in _SPECS)}. "
            "Other models need the Tinker service (set TINKER_API_KEY)."
        )
    return spec


def get_tokenizer(base_model: str) -> WordTokenizer:
    """The tokenizer of an embedded base model (cheap: tables are shared)."""
    get_spec(base_model)
    return WordTokenizer(name_or_path=base_model)


def register_cookbook_tokenizers() -> None:
    """Make `tinker_cookbook.tokenizer_utils.get_tokenizer(name)` return our tokenizer for the
    embedded models instead of trying the Hugging Face hub (imports the cookbook: ~3 s)."""
    from tinker_cookbook.tokenizer_utils import register_tokenizer

    for name in _SPECS:
        register_tokenizer(name, lambda name=name: WordTokenizer(name_or_path=name))


def _ensure_offline() -> None:
    # Only the local backend sets this, and only when it builds a model: an accidental hub
    # access then fails fast instead of hanging without network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def build_model(base_model: str) -> tuple[LlamaForCausalLM, WordTokenizer]:
    """A fresh copy of `base_model` with its deterministic initial weights, and its tokenizer.

    The global torch RNG is left untouched (the seed is applied inside `fork_rng`).
    """
    spec = get_spec(base_model)
    tokenizer = WordTokenizer(name_or_path=base_model)
    _ensure_offline()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_context_length,
        initializer_range=spec.initializer_range,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
    )
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.init_seed)
        model = LlamaForCausalLM(config)
    model.to(torch.float32)
    return model, tokenizer


def load_base_model(base_model: str) -> tuple[LlamaForCausalLM, WordTokenizer]:
    """Map a base-model name to (model, tokenizer); raises a clear error for an unknown name."""
    return build_model(base_model)


def state_dict_copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of the weights (shared tied tensors stay shared)."""
    copies: dict[int, torch.Tensor] = {}  # by data pointer: tied weights share one
    out: dict[str, torch.Tensor] = {}
    for key, value in model.state_dict().items():
        ident = value.data_ptr()
        if ident not in copies:
            copies[ident] = value.detach().to("cpu", copy=True)
        out[key] = copies[ident]
    return out
