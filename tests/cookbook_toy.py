"""The cookbook's own RL loop (`tinker_cookbook.rl.train.main`) on a toy environment that
needs no download: one question ("yes, no or maybe?"), reward 1 for "yes", the tiny chat
model served by the Tinker double. What a cookbook user's run folder looks like, written by
the cookbook itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import chz
from tinker_cookbook import renderers
from tinker_cookbook.rl import train
from tinker_cookbook.rl.problem_env import ProblemEnv, ProblemGroupBuilder
from tinker_cookbook.rl.types import RLDataset, RLDatasetBuilder
from tinker_cookbook.tokenizer_utils import register_tokenizer

from tinker_tui.engine.local.base_model_names import DEFAULT_BASE_MODEL
from tinker_tui.engine.local.hf_tokenizer import TOKENIZER_DIR

QUESTION = "Answer with one word: yes, no or maybe. Is it?"


def tiny_tokenizer():  # noqa: ANN201  (a transformers tokenizer)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))


class YesEnv(ProblemEnv):
    def get_question(self) -> str:
        return QUESTION

    def check_answer(self, sample_str: str) -> bool:
        return "yes" in sample_str.lower()

    def check_format(self, sample_str: str) -> bool:
        return sample_str.strip() != ""

    def get_reference_answer(self) -> str:
        return "yes"


class YesData(RLDataset):
    def __init__(self, renderer: renderers.Renderer, batches: int, groups: int) -> None:
        self.renderer, self.batches, self.groups = renderer, batches, groups

    def get_batch(self, index: int) -> list[ProblemGroupBuilder]:
        return [
            ProblemGroupBuilder(
                lambda: YesEnv(self.renderer, format_coef=0.0), num_envs=4, dataset_name="yes"
            )
            for _ in range(self.groups)
        ]

    def __len__(self) -> int:
        return self.batches


@chz.chz
class YesDataBuilder(RLDatasetBuilder):
    batches: int = 6
    groups: int = 2

    async def __call__(self) -> tuple[YesData, None]:
        renderer = renderers.get_renderer("role_colon", tiny_tokenizer())
        return YesData(renderer, self.batches, self.groups), None


def train_through(base_url: str, log_path: Path, batches: int = 6) -> None:
    """Run the cookbook's RL loop to its end against the double at `base_url`
    (TINKER_API_KEY set to the double's key)."""
    register_tokenizer(DEFAULT_BASE_MODEL, tiny_tokenizer)
    config = train.Config(
        learning_rate=1e-3,
        dataset_builder=YesDataBuilder(batches=batches),
        model_name=DEFAULT_BASE_MODEL,
        recipe_name="toy_yes",
        max_tokens=8,
        log_path=str(log_path),
        renderer_name="role_colon",
        eval_every=0,
        save_every=3,
        base_url=base_url,
        lora_rank=8,
    )
    asyncio.run(train.main(config))
