"""The KL penalty against the base model (`kl_penalty_coef`), as tinker-cookbook applies it:
the arithmetic by hand, and on the real local backend a policy pushed away from its base is
pulled back by the penalty alone."""

import pytest
import tinker

from tinker_tui.engine.backend.datums import kl_penalized_advantages
from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.config import DEFAULT_BASE_MODEL
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.rollouts.trajectory import SampledTurn, Trajectory, TrajectoryGroup


def test_the_penalty_by_hand():
    # two datums; the first target of each is context (mask 0)
    advantages = [[0.0, 1.0, 1.0], [0.0, -1.0]]
    sampled = [[0.0, -0.5, -1.0], [0.0, -2.0]]
    base = [[-9.0, -1.5, -1.0], [-9.0, -1.0]]
    masks = [[0.0, 1.0, 1.0], [0.0, 1.0]]
    new, mean = kl_penalized_advantages(advantages, sampled, base, masks, coef=0.5)
    # d on sampled tokens: 1.0, 0.0, -1.0; mean d = 0.0
    assert mean == pytest.approx(0.0)
    # advantage + 0.5 * (mean - d); context untouched
    assert new == [[0.0, 0.5, 1.0], [0.0, -0.5]]
    # the batch's total advantage is unchanged
    assert sum(map(sum, new)) == pytest.approx(sum(map(sum, advantages)))


PROMPT = [{"role": "user", "content": "Answer yes, no or maybe: is it raining?"}]


async def kl_to_base(session, samples=64):
    """Mean over sampled tokens of logp_policy - logp_base: KL(policy || base) estimated."""
    prompt = session.renderer.build_generation_prompt(PROMPT)
    response, _ = await session.sample(
        prompt,
        samples,
        tinker.SamplingParams(max_tokens=4, seed=1, stop=session.renderer.get_stop_sequences()),
    )
    head = prompt.to_ints()
    total = count = 0.0
    for sequence in response.sequences:
        base = await session.reference.compute_logprobs(
            tinker.ModelInput.from_ints(head + list(sequence.tokens))
        )
        for logprob, base_logprob in zip(sequence.logprobs, base[len(head) :], strict=True):
            total += logprob - base_logprob
            count += 1
    return total / count


async def drifted_policy(tmp_path, coef):
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path),
        base_model=DEFAULT_BASE_MODEL,
        kl_penalty_coef=coef,
    )
    await session.start()
    for _ in range(6):  # push it towards always answering "yes"
        await session.train_supervised(
            [PROMPT + [{"role": "assistant", "content": "yes"}]] * 8, learning_rate=3e-3
        )
    await session.publish()
    return session


async def equal_reward_steps(session, steps):
    """RL steps whose rewards carry no signal (all equal): only the penalty can move it."""
    metrics = []
    prompt = session.renderer.build_generation_prompt(PROMPT)
    for step in range(steps):
        response, version = await session.sample(
            prompt,
            8,
            tinker.SamplingParams(
                max_tokens=4, seed=100 + step, stop=session.renderer.get_stop_sequences()
            ),
        )
        group = TrajectoryGroup(
            group_id=step,
            scenario_id="s",
            started_at=0.0,
            finished_at=0.0,
            trajectories=tuple(
                Trajectory(
                    turns=(
                        SampledTurn(
                            tuple(prompt.to_ints()), tuple(s.tokens), tuple(s.logprobs), version
                        ),
                    ),
                    reward=0.0,
                )
                for s in response.sequences
            ),
        )
        result = await session.train(session.build_datums([group]), learning_rate=3e-3)
        metrics.append(result.metrics)
    return metrics


async def test_the_penalty_pulls_a_drifting_policy_back_to_its_base(tmp_path):
    session = await drifted_policy(tmp_path / "a", coef=1.0)
    before = await kl_to_base(session)
    assert before > 0.05, "the supervised steps moved the policy away from its base"
    metrics = await equal_reward_steps(session, 20)
    after = await kl_to_base(session)
    assert after < before / 4, (before, after)
    # reported every step, and falling as the policy returns
    kl = [m["kl/policy_base"] for m in metrics]
    assert kl[-1] < kl[0] and all("time/kl_reference" in m for m in metrics)


async def test_without_the_penalty_the_same_steps_leave_it_where_it_drifted(tmp_path):
    session = await drifted_policy(tmp_path / "b", coef=0.0)
    assert session.reference is None
    session.reference = await session.service_client.create_sampling_client(
        base_model=DEFAULT_BASE_MODEL
    )  # only to measure
    before = await kl_to_base(session)
    metrics = await equal_reward_steps(session, 20)
    assert await kl_to_base(session) == pytest.approx(before, rel=1e-3)
    assert not any("kl/policy_base" in m for m in metrics)
