"""The local backend: the Tinker client interface, in-process on torch (CPU, or CUDA).

`LocalServiceClient` stands in for `tinker.ServiceClient`; its training and sampling clients
use the SDK's own types (`tinker.Datum`, `tinker.SampleResponse`, ...), errors
(`tinker.BadRequestError`, ...) and awaitable futures, so engine code (or tinker-cookbook
code) written against the tinker SDK runs on it unchanged. Training is LoRA of the requested
rank on a frozen base: the embedded `DEFAULT_BASE_MODEL` (a tiny pre-trained chat model with a
word-level tokenizer, shipped with the package) or a Hugging Face model folder on disk.

Modules: `model` (base models), `llama` (the embedded models in plain torch), `lora` (adapters), `generation` (batched sampling with a KV
cache), `losses`, `checkpoints`, `pretrain` (rebuilds the embedded weights), and the three
clients.

Imports are lazy: `import tinker_tui.engine.local` stays cheap (no torch/transformers) until a client or
the tokenizer is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinker_tui.engine.local.base_model_names import DEFAULT_BASE_MODEL

__all__ = [
    "DEFAULT_BASE_MODEL",
    "LocalSamplingClient",
    "LocalServiceClient",
    "LocalTrainingClient",
    "WordTokenizer",
]

if TYPE_CHECKING:
    from tinker_tui.engine.local.sampling_client import LocalSamplingClient
    from tinker_tui.engine.local.service_client import LocalServiceClient
    from tinker_tui.engine.local.tokenizer import WordTokenizer
    from tinker_tui.engine.local.training_client import LocalTrainingClient

_LAZY = {
    "LocalServiceClient": "tinker_tui.engine.local.service_client",
    "LocalTrainingClient": "tinker_tui.engine.local.training_client",
    "LocalSamplingClient": "tinker_tui.engine.local.sampling_client",
    "WordTokenizer": "tinker_tui.engine.local.tokenizer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tinker_tui.engine.local' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
