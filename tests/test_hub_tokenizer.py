"""A Tinker model's tokenizer: loaded as the SDK loads it, or a clear error within seconds when
it is not cached and the Hugging Face hub cannot be reached (not a minute of hub retries)."""

from __future__ import annotations

import functools
import socket
import time

import pytest
from huggingface_hub import constants
from tinker import types

from tinker_tui.engine.backend import hub_tokenizer
from tinker_tui.engine.backend.hub_tokenizer import TokenizerUnavailable, load_tokenizer
from tinker_tui.engine.local.hf_tokenizer import TOKENIZER_DIR


class Training:
    """The part of a tinker TrainingClient the loader uses."""

    def __init__(self, model: str, tokenizer_id: str | None) -> None:
        self.info = types.GetInfoResponse(
            model_id="m", model_data=types.ModelData(model_name=model, tokenizer_id=tokenizer_id)
        )
        self.loads = 0

    def get_info(self) -> types.GetInfoResponse:
        return self.info

    def get_tokenizer(self) -> str:
        self.loads += 1
        return "the SDK's tokenizer"


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_a_folder_loads_the_way_the_sdk_does(empty_cache):
    training = Training("tinker-tui/tiny-chat", str(TOKENIZER_DIR))
    assert load_tokenizer(training) == "the SDK's tokenizer"


def test_offline_and_not_cached_is_a_clear_error_at_once(empty_cache, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    training = Training("Qwen/Qwen3-4B-Instruct-2507", None)
    started = time.monotonic()
    with pytest.raises(TokenizerUnavailable) as caught:
        load_tokenizer(training)
    assert time.monotonic() - started < 10 and training.loads == 0
    message = str(caught.value)
    for needed in (
        "Qwen/Qwen3-4B-Instruct-2507",
        "HF_HUB_OFFLINE",
        str(empty_cache),
        "hf download Qwen/Qwen3-4B-Instruct-2507",
    ):
        assert needed in message


def test_a_hub_that_never_answers_is_a_clear_error_within_seconds(empty_cache, monkeypatch):
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        # the probe as in use, with 1 s to wait instead of PROBE_TIMEOUT (5 s)
        monkeypatch.setattr(
            hub_tokenizer, "hub_problem", functools.partial(hub_tokenizer.hub_problem, timeout=1.0)
        )
        training = Training("meta-llama/Llama-3.1-8B", None)
        started = time.monotonic()
        with pytest.raises(TokenizerUnavailable) as caught:
            load_tokenizer(training)
        waited = time.monotonic() - started
        assert 1.0 - 0.5 <= waited < 6 and training.loads == 0
    message = str(caught.value)
    # the SDK's own name for Llama 3's tokenizer, the hub's address, and what to do
    assert "thinkingmachineslabinc/meta-llama-3-instruct-tokenizer" in message
    assert endpoint in message and "HF_HUB_OFFLINE" in message and "hf download" in message


def test_a_reachable_hub_loads_the_way_the_sdk_does(empty_cache, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_tokenizer, "hub_problem", lambda endpoint, repo: "")
    training = Training("Qwen/Qwen3-8B", "Qwen/Qwen3-8B")
    assert load_tokenizer(training) == "the SDK's tokenizer" and training.loads == 1
