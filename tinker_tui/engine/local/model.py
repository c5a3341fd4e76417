"""Base models of the local backend: the embedded one, and Hugging Face folders on disk.

``tinker-tui/tiny-chat`` (`DEFAULT_BASE_MODEL`) is a two-layer Llama-style transformer (hidden
64, about 295k parameters) with the offline word-level tokenizer. Its weights were pre-trained
by `tinker_tui.engine.local.pretrain` (a reproducible script in this package) on a generated corpus of short
chats in the ``User: ...`` / ``Assistant: ...`` format (pick one of the listed words, repeat,
count, compare, greet), and ship with the package (``weights/tiny-chat.safetensors``, 1.2 MB).
So it follows that format and answers "one word: yes, no or maybe" questions with one of the
options from the start, and LoRA adapters have something worth adapting: on a random-init
model this small, low-rank adapters did not learn at all (the frozen final norm and the tied
random embeddings bound the logits near ±1.3, and adapters cannot raise that scale). It knows no English beyond that corpus.

Any other `base_model` that names a folder (absolute, ``./relative`` or ``~/...``) holding a
Hugging Face causal LM (``config.json``, weights, tokenizer files) is loaded from that folder
only, never from the hub (``local_files_only``; ``HF_HUB_OFFLINE`` is set), with its own
tokenizer and chat template; it runs on CUDA when available (in the checkpoint's dtype), else
on CPU in float32. ``TINKER_TUI_DEVICE=cpu|cuda|cuda:N`` overrides the device for every model
(the embedded one runs on CPU by default: it is too small to gain from a GPU).

A loaded base is frozen and shared: every training client and sampling snapshot on the same
base in a process uses one copy and keeps only its own LoRA adapter (`tinker_tui.engine.local.lora`).
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.engine.local.base_model_names import (
    DEFAULT_BASE_MODEL,
    EMBEDDED_MODELS,
    base_model_problem,
)
from tinker_tui.engine.local.errors import bad_request, not_found
from tinker_tui.engine.local.token_masks import TokenMasks
from tinker_tui.engine.local.tokenizer import WordTokenizer

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PreTrainedModel

    from tinker_tui.engine.local.causal_lm import CausalLM
    from tinker_tui.engine.local.llama import LlamaForCausalLM
    from tinker_tui.engine.local.lora import LoRALinear

DEVICE_ENV = "TINKER_TUI_DEVICE"
MODELS_ENV = "TINKER_TUI_LOCAL_MODELS"
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


@dataclass(frozen=True)
class BaseModelSpec:
    """Everything needed to build an embedded model's architecture."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    max_context_length: int
    init_seed: int
    weights_file: str
    initializer_range: float = 0.02


_SPECS: dict[str, BaseModelSpec] = {  # one per EMBEDDED_MODELS
    DEFAULT_BASE_MODEL: BaseModelSpec(
        name=DEFAULT_BASE_MODEL,
        num_layers=2,
        hidden_size=64,
        num_heads=4,
        intermediate_size=256,
        max_context_length=2048,
        init_seed=20251130,
        weights_file="tiny-chat.safetensors",
    ),
}


def get_spec(base_model: str) -> BaseModelSpec:
    spec = _SPECS.get(base_model)
    if spec is None:
        raise unknown_model(base_model)
    return spec


def unknown_model(base_model: str) -> Exception:
    return bad_request(
        base_model_problem(base_model) or f"Unknown base model {base_model!r}", what="model"
    )


def canonical_name(base_model: str) -> str:
    """The name a base model is known by: embedded names as is, folders as absolute paths."""
    if not isinstance(base_model, str) or not base_model:
        raise bad_request(f"base_model must be a non-empty string, got {base_model!r}")
    problem = base_model_problem(base_model)
    if problem is not None:
        raise bad_request(problem, what="model")
    if base_model in _SPECS:
        return base_model
    return str(Path(base_model).expanduser().resolve())


def ensure_offline() -> None:
    # An accidental hub access then fails fast instead of hanging without network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def choose_device(embedded: bool) -> torch.device:
    import torch

    forced = os.environ.get(DEVICE_ENV, "").strip()
    if forced:
        return torch.device(forced)
    if not embedded and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


# -- tokenizers -------------------------------------------------------------------------------
_tokenizers: dict[str, Any] = {}
_tokenizer_lock = threading.Lock()


def get_tokenizer(base_model: str) -> Any:
    """The tokenizer of a base model (cached per process)."""
    name = canonical_name(base_model)
    if name in _SPECS:
        return WordTokenizer(name_or_path=name)
    with _tokenizer_lock:
        tok = _tokenizers.get(name)
        if tok is None:
            ensure_offline()
            from transformers import AutoTokenizer

            try:
                tok = AutoTokenizer.from_pretrained(name, local_files_only=True)
            except Exception as exc:
                raise not_found(
                    f"Cannot load the tokenizer of model folder {name!r}: {exc}", what="model"
                ) from exc
            _tokenizers[name] = tok
        return tok


def register_cookbook_tokenizers() -> None:
    """Make `tinker_cookbook.tokenizer_utils.get_tokenizer(name)` return our tokenizer for the
    embedded models instead of trying the Hugging Face hub (imports the cookbook: ~3 s); a
    renderer unpickled in another process looks its tokenizer up that way."""
    from tinker_cookbook.tokenizer_utils import register_tokenizer

    for name in _SPECS:
        register_tokenizer(name, functools.partial(WordTokenizer, name_or_path=name))


# -- the loaded base --------------------------------------------------------------------------
class BaseModel:
    """A frozen base model with LoRA-ready layers, its tokenizer and the facts callers need."""

    def __init__(
        self,
        name: str,
        module: CausalLM,
        tokenizer: Any,
        *,
        max_context: int,
        embedded: bool,
    ) -> None:
        from torch import nn

        import tinker_tui.engine.local.lora as lora

        self.name = name
        self.module = module
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.embedded = embedded
        module.eval()
        module.requires_grad_(False)
        self.layers: dict[str, LoRALinear] = lora.install(module)
        self._weight_bytes: int | None = None
        self._fingerprint: str | None = None
        output = module.get_output_embeddings()  # a linear layer, wrapped by lora.install
        if not isinstance(output, nn.Linear | lora.LoRALinear):
            raise bad_request(
                f"model {name!r}: its output embeddings are a "
                f"{type(output).__name__}, not a linear layer",
                what="model",
            )
        self.vocab_size = int(output.out_features)
        self.device = next(module.parameters()).device
        self.dtype = next(module.parameters()).dtype
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos_token_id: int | None = None if eos is None else int(eos)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad if pad is not None else (eos if eos is not None else 0))
        eos_ids = {self.eos_token_id} if self.eos_token_id is not None else set()
        generation_eos = getattr(getattr(module, "generation_config", None), "eos_token_id", None)
        if isinstance(generation_eos, int):
            eos_ids.add(generation_eos)
        elif isinstance(generation_eos, (list, tuple)):
            eos_ids.update(int(t) for t in generation_eos)
        self.eos_ids = frozenset(eos_ids)
        self.arch = str(getattr(module.config, "model_type", "unknown"))
        # Built on first use: a forced tool call's grammar masks over this tokenizer.
        self.token_masks = TokenMasks(tokenizer, self.vocab_size)

    @property
    def facts(self) -> Any:
        """What sampling needs to know (`generation.ModelFacts`)."""
        from tinker_tui.engine.local.generation import ModelFacts

        return ModelFacts(
            tokenizer=self.tokenizer,
            vocab_size=self.vocab_size,
            max_context=self.max_context,
            pad_token_id=self.pad_token_id,
            eos_ids=self.eos_ids,
            device=self.device,
            masks=self.token_masks,
        )

    @property
    def backbone(self) -> nn.Module:
        """The transformer without its output projection (returns hidden states)."""
        return self.module.base_model

    @property
    def lm_head(self) -> nn.Module:
        return self.module.get_output_embeddings()

    @property
    def fingerprint(self) -> str:
        """Identifies the base weights, so an adapter is never applied to other weights: the
        hash of the shipped file, or of a folder's config.json and weight file sizes."""
        if self._fingerprint is None:
            import hashlib

            digest = hashlib.sha256()
            if self.embedded:
                digest.update((WEIGHTS_DIR / get_spec(self.name).weights_file).read_bytes())
            else:
                folder = Path(self.name)
                digest.update((folder / "config.json").read_bytes())
                for path in sorted(folder.iterdir()):
                    if path.suffix in (".safetensors", ".bin", ".pt"):
                        digest.update(f"{path.name}:{path.stat().st_size};".encode())
            self._fingerprint = digest.hexdigest()[:16]
        return self._fingerprint

    def weight_bytes(self) -> int:
        if self._weight_bytes is None:
            self._weight_bytes = sum(p.numel() * p.element_size() for p in self.module.parameters())
        return self._weight_bytes

    def __repr__(self) -> str:
        return f"BaseModel({self.name!r}, {self.arch}, device={self.device})"


_cache: weakref.WeakValueDictionary[str, BaseModel] = weakref.WeakValueDictionary()
_cache_lock = threading.Lock()
_seen_folders: dict[str, None] = {}  # insertion-ordered set of folders loaded in this process


def load_base(base_model: str) -> BaseModel:
    """The shared, frozen base for `base_model` (loaded once per process while in use)."""
    name = canonical_name(base_model)
    with _cache_lock:
        base = _cache.get(name)
        if base is None:
            base = _build_embedded(name) if name in _SPECS else _load_folder(name)
            _cache[name] = base
            if name not in _SPECS:
                _seen_folders[name] = None
        return base


def tiny_config(spec: BaseModelSpec, tokenizer: WordTokenizer) -> Any:
    from transformers import LlamaConfig

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
        attn_implementation="sdpa",  # the public spelling of config._attn_implementation
    )
    return config


def build_tiny_module(base_model: str, *, pretrained: bool = True) -> PreTrainedModel:
    """A fresh transformers `LlamaForCausalLM` for an embedded model: shipped weights, or the
    seeded random init (`pretrained=False`, what `tinker_tui.engine.local.pretrain` starts
    from). The reference the weights were trained on; the backend runs `build_runtime_module`.
    The global torch RNG is left untouched."""
    spec = get_spec(base_model)
    ensure_offline()
    import torch
    from transformers import LlamaForCausalLM

    config = tiny_config(spec, WordTokenizer(name_or_path=base_model))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.init_seed)
        module = LlamaForCausalLM(config)
    module.to(torch.float32)
    if pretrained:
        _load_shipped(module, base_model)
    return module


def build_runtime_module(base_model: str) -> LlamaForCausalLM:
    """The embedded model as the backend runs it: `tinker_tui.engine.local.llama` (plain
    torch, no transformers import) holding the shipped weights."""
    spec = get_spec(base_model)
    import torch

    import tinker_tui.engine.local.llama as llama

    tokenizer = WordTokenizer(name_or_path=base_model)
    config = llama.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        max_position_embeddings=spec.max_context_length,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):  # the init is overwritten; keep the RNG as it was
        module = llama.LlamaForCausalLM(config)
    _load_shipped(module, base_model)
    return module


def _load_shipped(module: CausalLM, base_model: str) -> None:
    """Load the shipped weights into `module` (either form) and tie the unembedding."""
    path = WEIGHTS_DIR / get_spec(base_model).weights_file
    try:
        from safetensors.torch import load_file

        state = load_file(str(path))
        missing, unexpected = module.load_state_dict(state, strict=False)
    except Exception as exc:
        raise not_found(
            f"The embedded model {base_model!r} cannot read its shipped weights {path}: "
            f"{exc}. Reinstall the package, or rebuild them with "
            "`python -m tinker_tui.engine.local.pretrain`.",
            what="model",
        ) from exc
    # The unembedding is tied to the embedding, so it is stored once.
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise not_found(
            f"Shipped weights {path} do not fit {base_model!r} "
            f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})",
            what="model",
        )
    module.tie_weights()


def _build_embedded(name: str) -> BaseModel:
    spec = get_spec(name)
    module = build_runtime_module(name)
    module.to(choose_device(embedded=True))
    return BaseModel(
        name,
        module,
        WordTokenizer(name_or_path=name),
        max_context=spec.max_context_length,
        embedded=True,
    )


def _load_folder(name: str) -> BaseModel:
    ensure_offline()
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # it would draw over the dashboard
    tokenizer = get_tokenizer(name)
    device = choose_device(embedded=False)
    dtype: Any = "auto" if device.type == "cuda" else torch.float32
    try:
        module = AutoModelForCausalLM.from_pretrained(
            name, local_files_only=True, dtype=dtype, attn_implementation="sdpa"
        )
    except Exception as exc:
        raise not_found(f"Cannot load model folder {name!r}: {exc}", what="model") from exc
    if module.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        module.to(torch.float32)
    module.to(device)
    config = module.config
    max_context = int(getattr(config, "max_position_embeddings", 0) or 2048)
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < max_context:
        max_context = tok_max
    return BaseModel(name, module, tokenizer, max_context=max_context, embedded=False)


def local_models() -> list[str]:
    """Embedded models, folders loaded in this process, and model folders found under the
    directories in $TINKER_TUI_LOCAL_MODELS (``os.pathsep``-separated)."""
    names = list(_SPECS)
    for folder in _seen_folders:
        if folder not in names:
            names.append(folder)
    for root in filter(None, os.environ.get(MODELS_ENV, "").split(os.pathsep)):
        root_path = Path(root).expanduser()
        candidates = [root_path] + (
            sorted(p for p in root_path.iterdir() if p.is_dir()) if root_path.is_dir() else []
        )
        for candidate in candidates:
            if (candidate / "config.json").is_file():
                resolved = str(candidate.resolve())
                if resolved not in names:
                    names.append(resolved)
    return names


def max_context_of(base_model: str) -> int:
    """Context length without loading weights (config only for folders)."""
    name = canonical_name(base_model)
    if name in _SPECS:
        return _SPECS[name].max_context_length
    base = _cache.get(name)
    if base is not None:
        return base.max_context
    import json

    try:
        config = json.loads((Path(name) / "config.json").read_text())
    except Exception:
        return 2048
    return int(config.get("max_position_embeddings") or 2048)


assert tuple(_SPECS) == EMBEDDED_MODELS, "an embedded model without its architecture"
