import dataclasses
import math

import pytest

from tinker_tui.engine.rollouts.trajectory import (
    SampledTurn,
    Trajectory,
    TrajectoryError,
    TrajectoryGroup,
    trajectory_to_datum_arrays,
)


def turn(tokens=(7, 8), version=3):
    return SampledTurn(
        prompt_tokens=(1, 2, 3),
        tokens=tuple(tokens),
        logprobs=tuple(-0.5 * (i + 1) for i in range(len(tokens))),
        policy_version=version,
    )


def test_datum_arrays_put_advantages_only_on_sampled_tokens():
    joined = trajectory_to_datum_arrays((turn(),), advantage=0.25)
    assert (joined.turns, joined.prefix_mismatches) == (1, 0)
    [arrays] = joined.examples
    assert arrays["model_input"] == [1, 2, 3, 7]
    assert arrays["target_tokens"] == [2, 3, 7, 8]
    # position i predicts target i: sampled tokens 7 and 8 sit at positions 2 and 3
    assert arrays["advantages"] == [0.0, 0.0, 0.25, 0.25]
    assert arrays["logprobs"] == [0.0, 0.0, -0.5, -1.0]


def test_group_advantages_are_relative_to_the_group_mean():
    trajectories = tuple(Trajectory(turns=(turn(),), reward=r) for r in (1.0, 0.5, 0.0))
    group = TrajectoryGroup(
        group_id=0, scenario_id="s", trajectories=trajectories, started_at=0.0, finished_at=1.0
    )
    assert group.advantages() == pytest.approx([0.5, 0.0, -0.5])
    assert group.has_variance()
    same = TrajectoryGroup(
        group_id=1,
        scenario_id="s",
        finished_at=1.0,
        started_at=0.0,
        trajectories=tuple(Trajectory(turns=(turn(),), reward=1.0) for _ in range(3)),
    )
    assert not same.has_variance()


def test_policy_version_is_the_oldest_turn():
    trajectory = Trajectory(turns=(turn(version=5), turn(version=4)), reward=0.0)
    assert trajectory.policy_version == 4


def test_group_version_and_tokens_come_from_its_members():
    old = Trajectory(turns=(turn(tokens=(7,), version=2), turn(version=6)), reward=0.0)
    new = Trajectory(turns=(turn(tokens=(7, 8, 9), version=5),), reward=1.0)
    assert (old.policy_version, old.num_tokens, new.num_tokens) == (2, 3, 3)
    group = TrajectoryGroup(
        group_id=0, scenario_id="s", trajectories=(new, old), started_at=0.0, finished_at=1.0
    )
    assert (group.policy_version, group.num_tokens) == (2, 6)
    # derived, not part of what makes two trajectories equal or of their repr
    assert old == Trajectory(turns=old.turns, reward=0.0)
    assert repr(old).endswith("messages=())")


def test_a_group_needs_a_trajectory():
    with pytest.raises(TrajectoryError, match="at least one trajectory"):
        TrajectoryGroup(
            group_id=0, scenario_id="s", trajectories=(), started_at=0.0, finished_at=1.0
        )


@pytest.mark.parametrize("reward", [math.nan, math.inf, "1.0", True])
def test_reward_must_be_a_finite_number(reward):
    with pytest.raises(TrajectoryError, match="reward"):
        Trajectory(turns=(turn(),), reward=reward)


def test_from_choice_reads_server_extension_fields_and_explains_missing_ones():
    choice = {
        "prompt_token_ids": [1, 2],
        "token_ids": [3],
        "token_logprobs": [-0.1],
        "policy_version": 2,
    }
    assert SampledTurn.from_choice(choice).tokens == (3,)
    with pytest.raises(TrajectoryError, match="this run's server"):
        SampledTurn.from_choice({"token_ids": [3]})


def test_turns_that_extend_the_sampled_sequence_share_one_example():
    first = SampledTurn(
        prompt_tokens=(1, 2), tokens=(3, 4), logprobs=(-0.3, -0.4), policy_version=0
    )
    # the next prompt is everything sampled so far, then a tool result (5, 6)
    second = SampledTurn(
        prompt_tokens=(1, 2, 3, 4, 5, 6), tokens=(7,), logprobs=(-0.7,), policy_version=1
    )
    arrays = trajectory_to_datum_arrays((first, second), advantage=0.5)
    assert arrays.turns == 2 and arrays.prefix_mismatches == 0
    [example] = arrays.examples
    assert example["model_input"] == [1, 2, 3, 4, 5, 6]
    assert example["target_tokens"] == [2, 3, 4, 5, 6, 7]
    # exactly the sampled tokens are trained, with the logprobs they were sampled with
    assert example["advantages"] == [0.0, 0.5, 0.5, 0.0, 0.0, 0.5]
    assert example["logprobs"] == [0.0, -0.3, -0.4, 0.0, 0.0, -0.7]
    # the mask marks the sampled targets whatever their advantage (the KL penalty's tokens)
    assert example["mask"] == [0.0, 1.0, 1.0, 0.0, 0.0, 1.0]


def test_a_prompt_that_does_not_extend_the_sampled_tokens_is_counted_and_trained_apart():
    first = SampledTurn(
        prompt_tokens=(1, 2), tokens=(3, 4), logprobs=(-0.3, -0.4), policy_version=0
    )
    # re-rendered differently: token 4 became 9 in the next prompt
    second = SampledTurn(
        prompt_tokens=(1, 2, 3, 9, 5), tokens=(7, 8), logprobs=(-0.7, -0.8), policy_version=0
    )
    third = SampledTurn(
        prompt_tokens=(1, 2, 3, 9, 5, 7, 8, 6), tokens=(2,), logprobs=(-0.2,), policy_version=0
    )
    arrays = trajectory_to_datum_arrays((first, second, third), advantage=-1.0)
    assert arrays.turns == 3 and arrays.prefix_mismatches == 1
    a, b = arrays.examples
    assert a == {
        "model_input": [1, 2, 3],
        "target_tokens": [2, 3, 4],
        "logprobs": [0.0, -0.3, -0.4],
        "advantages": [0.0, -1.0, -1.0],
        "mask": [0.0, 1.0, 1.0],
        "versions": [-1, 0, 0],
        "provenance": [],  # the turns do not say which sampled sequence they were
    }
    assert b["model_input"] == [1, 2, 3, 9, 5, 7, 8, 6]
    assert b["target_tokens"] == [2, 3, 9, 5, 7, 8, 6, 2]
    assert b["advantages"] == [0.0] * 4 + [-1.0, -1.0, 0.0, -1.0]
    # every sampled token is trained exactly once across the examples
    trained = sum(1 for ex in arrays.examples for adv in ex["advantages"] if adv)
    assert trained == sum(len(t.tokens) for t in (first, second, third))
    # with sequence ids, the second example's runs start afresh at the second turn's prompt
    named = [
        dataclasses.replace(t, sequence_id=f"s{i}") for i, t in enumerate((first, second, third))
    ]
    _, b = trajectory_to_datum_arrays(named, advantage=-1.0).examples
    assert [(r.kind, r.sequence_id, r.offset, r.length) for r in b["provenance"]] == [
        ("prompt", "s1", 0, 5),
        ("sampled", "s1", 0, 2),
        ("prompt", "s2", 7, 1),
        ("sampled", "s2", 0, 1),
    ]
