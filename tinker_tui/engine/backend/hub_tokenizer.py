"""A Tinker model's tokenizer, loaded the way the tinker SDK loads it, or a clear error fast.

The SDK's `TrainingClient.get_tokenizer()` calls `AutoTokenizer.from_pretrained(tokenizer_id)`
with the id `get_info` names (a Hugging Face hub id, or a folder). Without a cached copy and
without the hub, that retries for about a minute before failing. So, before calling it:

* a folder, or a tokenizer in the local Hugging Face cache while the hub answers: load as the
  SDK does;
* cached while the hub does not answer: load the cached copy (`local_files_only`);
* not cached and `HF_HUB_OFFLINE` set, or the hub not answering within `PROBE_TIMEOUT`
  seconds: `TokenizerUnavailable`, naming the model, the hub id, `HF_HUB_OFFLINE`, and how
  to pre-fetch it.

Blocking (file and network IO): call it off the event loop.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.engine.errors import TinkerTuiError

if TYPE_CHECKING:
    from tinker_tui.engine.backend.capabilities import TrainingClient

#: Seconds the hub may take to answer before it counts as unreachable.
PROBE_TIMEOUT = 5.0
_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


class TokenizerUnavailable(TinkerTuiError, RuntimeError):
    """The tokenizer cannot be loaded here; the message says how to make it loadable."""


def tokenizer_repo(model_name: str, tokenizer_id: str | None) -> str:
    """The id the SDK loads (its rules, tinker 0.38: `tokenizer_id`, else from the name)."""
    if tokenizer_id:
        return tokenizer_id
    name = model_name.split(":")[0]
    if name.startswith("meta-llama/Llama-3"):
        return "thinkingmachineslabinc/meta-llama-3-instruct-tokenizer"
    if name.count("/") == 2:
        org, model, _ = name.split("/", 2)
        return f"{org}/{model}"
    return name


def is_cached(repo: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return any(isinstance(try_to_load_from_cache(repo, name), str) for name in _TOKENIZER_FILES)


def hub_problem(endpoint: str, repo: str, timeout: float = PROBE_TIMEOUT) -> str:
    """ "" if the hub answers (any HTTP status will do), else what went wrong."""
    import httpx

    try:
        httpx.head(f"{endpoint.rstrip('/')}/api/models/{repo}", timeout=timeout)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {str(exc) or 'no answer'}"
    return ""


def _prefetch_advice(repo: str, cache: str) -> str:
    return (
        f"pre-fetch it where the hub is reachable (`hf download {repo} --include "
        f"'*token*' '*.json'`, into the cache {cache}, or the same on another machine and "
        f"copy the cache here), then run with HF_HUB_OFFLINE=1"
    )


def load_tokenizer(training_client: TrainingClient) -> Any:
    """The tokenizer of a tinker `TrainingClient`'s model (see the module docstring)."""
    from huggingface_hub import constants

    data = training_client.get_info().model_data
    model = data.model_name or "the model"
    repo = tokenizer_repo(data.model_name or "", data.tokenizer_id)
    if Path(repo).expanduser().is_dir():
        return training_client.get_tokenizer()
    cached = is_cached(repo)
    if constants.HF_HUB_OFFLINE:
        if not cached:
            switch = (
                "TRANSFORMERS_OFFLINE"
                if os.environ.get("TRANSFORMERS_OFFLINE") and not os.environ.get("HF_HUB_OFFLINE")
                else "HF_HUB_OFFLINE"
            )
            raise TokenizerUnavailable(
                f"the tokenizer of {model} ({repo}) is not in the local Hugging Face cache "
                f"and {switch}=1 forbids downloading it: "
                f"{_prefetch_advice(repo, constants.HF_HUB_CACHE)}"
            )
        return training_client.get_tokenizer()
    problem = hub_problem(constants.ENDPOINT, repo)
    if not problem:
        return training_client.get_tokenizer()
    if cached:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(repo, local_files_only=True)
    raise TokenizerUnavailable(
        f"the tokenizer of {model} ({repo}) is not in the local Hugging Face cache and the "
        f"hub ({constants.ENDPOINT}) does not answer ({problem}); HF_HUB_OFFLINE is not set: "
        f"{_prefetch_advice(repo, constants.HF_HUB_CACHE)}"
    )
