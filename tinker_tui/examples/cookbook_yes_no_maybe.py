"""yes / no / maybe as a tinker-cookbook RL environment, run unchanged by tinker-tui.

The built-in example's preference ("maybe" 1.0, "no" 0.75, "yes" 0.5) written the way a
cookbook recipe writes an environment: an `Env` that renders its own prompt tokens and reads
the sampled tokens back, an `EnvGroupBuilder` per question, an `RLDataset` of batches and an
`RLDatasetBuilder` that builds the train and test datasets. `Task.from_cookbook` makes the
task: tinker-tui drives these classes through the cookbook's own rollout loop, sampling
tokens straight from the backend. Run it with ``tinker-tui run cookbook_yes_no_maybe``.

The prompt is rendered by the embedded model's renderer over its tokenizer (what the
cookbook's `get_tokenizer` gives for a registered name), so the supervised format warm-up
of the built-in example (the three answers equally often) carries over and RL alone learns
the preference. For a Hub model, build the renderer from that model's tokenizer instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import chz
import tinker
from tinker_cookbook import renderers
from tinker_cookbook.rl.types import (
    Env,
    EnvGroupBuilder,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
)

from tinker_tui import Task
from tinker_tui.examples.yes_no_maybe import (
    EVAL_QUESTIONS,
    TRAIN_QUESTIONS,
    WARMUP,
    prompt_for,
    reward_for,
)


def embedded_renderer() -> renderers.Renderer:
    """The embedded model's chat renderer (`role_colon` over its own tokenizer)."""
    from transformers import AutoTokenizer

    from tinker_tui.engine.local.hf_tokenizer import TOKENIZER_DIR

    return renderers.get_renderer("role_colon", AutoTokenizer.from_pretrained(str(TOKENIZER_DIR)))


class YesNoMaybeEnv(Env):
    """One question, one answer: the reward says how much the answer is preferred."""

    def __init__(self, question: str, renderer: renderers.Renderer) -> None:
        self.question = question
        self.renderer = renderer

    async def initial_observation(self) -> tuple[tinker.ModelInput, list[int] | list[str]]:
        messages: list[renderers.Message] = [{"role": "user", "content": prompt_for(self.question)}]
        return self.renderer.build_generation_prompt(messages), self.renderer.get_stop_sequences()

    async def step(self, action: list[int], *, extra: object = None) -> StepResult:
        message, _ = self.renderer.parse_response(action)
        answer = renderers.get_text_content(message)
        reward = reward_for(answer)
        return StepResult(
            reward=reward,
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={"maybe": float(reward == 1.0), "answered": float(reward > 0)},
            logs={"answer": answer.strip()},
        )


@dataclasses.dataclass(frozen=True)
class QuestionGroup(EnvGroupBuilder):
    question: str
    renderer: renderers.Renderer
    group_size: int

    async def make_envs(self) -> Sequence[Env]:
        return [YesNoMaybeEnv(self.question, self.renderer) for _ in range(self.group_size)]

    def logging_tags(self) -> list[str]:
        return ["yes_no_maybe"]


class QuestionDataset(RLDataset):
    def __init__(
        self,
        questions: Sequence[str],
        renderer: renderers.Renderer,
        *,
        batch_size: int,
        group_size: int,
        batches: int,
    ) -> None:
        self.questions, self.renderer = questions, renderer
        self.batch_size, self.group_size, self.batches = batch_size, group_size, batches

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        start = index * self.batch_size
        return [
            QuestionGroup(
                self.questions[(start + k) % len(self.questions)], self.renderer, self.group_size
            )
            for k in range(self.batch_size)
        ]

    def __len__(self) -> int:
        return self.batches


@chz.chz
class YesNoMaybeDatasetBuilder(RLDatasetBuilder):
    batch_size: int = 4
    group_size: int = 8
    batches: int = 100

    async def __call__(self) -> tuple[QuestionDataset, QuestionDataset]:
        renderer = embedded_renderer()
        train = QuestionDataset(
            TRAIN_QUESTIONS,
            renderer,
            batch_size=self.batch_size,
            group_size=self.group_size,
            batches=self.batches,
        )
        test = QuestionDataset(
            EVAL_QUESTIONS, renderer, batch_size=len(EVAL_QUESTIONS), group_size=1, batches=1
        )
        return train, test


TASK = dataclasses.replace(
    Task.from_cookbook(
        YesNoMaybeDatasetBuilder(),
        name="cookbook_yes_no_maybe",
        settings={"max_steps": 60, "warmup_steps": 60, "eval_every": 20, "max_tokens": 6},
    ),
    # The built-in example's format warm-up: the answers, equally often, in the same
    # renderer's format (the env's prompts are rendered by the same renderer).
    warmup=WARMUP,
    backend_settings={"local": {"learning_rate": 3e-3}},
)
