"""Fixtures for the local backend tests: one service per test session (model building is cheap,
importing torch/transformers is not), fresh training clients per test."""

from __future__ import annotations

import pytest
import tinker

from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient

QUESTION = "Answer with one word: yes, no or maybe. Is the sky blue?"


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> LocalServiceClient:
    return LocalServiceClient(checkpoint_dir=tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture
def training_client(service: LocalServiceClient):
    return service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL, rank=8).result()


@pytest.fixture(scope="session")
def tokenizer():
    from tinker_tui.engine.local import WordTokenizer

    return WordTokenizer()


@pytest.fixture(scope="session")
def prompt(tokenizer) -> tinker.ModelInput:
    text = f"User: {QUESTION}\n\nAssistant:"
    return tinker.ModelInput.from_ints(tokenizer.encode(text))


@pytest.fixture(scope="session")
def hf_folder(tmp_path_factory: pytest.TempPathFactory):
    """A tiny Hugging Face Llama folder (random weights, BPE tokenizer, ChatML template)."""
    return load_tiny_hf().write_tiny_llama(tmp_path_factory.mktemp("hf") / "tiny-llama")


def load_tiny_hf():
    """The `tiny_hf` helper module beside this file (tests/ is not a package)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "tinker_tui_tiny_hf", Path(__file__).with_name("tiny_hf.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
