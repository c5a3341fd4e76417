"""Fixtures for the local backend tests: one service per test session (model building is cheap,
importing torch/transformers is not), fresh training clients per test."""

from __future__ import annotations

import pytest
import tinker

from engine.local import DEFAULT_BASE_MODEL, LocalServiceClient

QUESTION = "Answer with one word: yes, no or maybe. Is the sky blue?"


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> LocalServiceClient:
    return LocalServiceClient(checkpoint_dir=tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture
def training_client(service: LocalServiceClient):
    return service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL, rank=8).result()


@pytest.fixture(scope="session")
def tokenizer():
    from engine.local import WordTokenizer

    return WordTokenizer()


@pytest.fixture(scope="session")
def prompt(tokenizer) -> tinker.ModelInput:
    text = f"User: {QUESTION}\n\nAssistant:"
    return tinker.ModelInput.from_ints(tokenizer.encode(text))
