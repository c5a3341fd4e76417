import math

import pytest

from engine.trajectory import (
    SampledTurn,
    Trajectory,
    TrajectoryError,
    TrajectoryGroup,
    turn_to_datum_arrays,
)


def turn(tokens=(7, 8), version=3):
    return SampledTurn(prompt_tokens=(1, 2, 3), tokens=tuple(tokens),
                       logprobs=tuple(-0.5 * (i + 1) for i in range(len(tokens))),
                       policy_version=version)


def test_datum_arrays_put_advantages_only_on_sampled_tokens():
    arrays = turn_to_datum_arrays(turn(), advantage=0.25)
    assert arrays["model_input"] == [1, 2, 3, 7]
    assert arrays["target_tokens"] == [2, 3, 7, 8]
    # position i predicts target i: sampled tokens 7 and 8 sit at positions 2 and 3
    assert arrays["advantages"] == [0.0, 0.0, 0.25, 0.25]
    assert arrays["logprobs"] == [0.0, 0.0, -0.5, -1.0]


def test_group_advantages_are_relative_to_the_group_mean():
    trajectories = tuple(Trajectory(turns=(turn(),), reward=r) for r in (1.0, 0.5, 0.0))
    group = TrajectoryGroup(group_id=0, scenario_id="s", trajectories=trajectories,
                            started_at=0.0, finished_at=1.0)
    assert group.advantages() == pytest.approx([0.5, 0.0, -0.5])
    assert group.has_variance()
    same = TrajectoryGroup(group_id=1, scenario_id="s", finished_at=1.0, started_at=0.0,
                           trajectories=tuple(Trajectory(turns=(turn(),), reward=1.0)
                                              for _ in range(3)))
    assert not same.has_variance()


def test_policy_version_is_the_oldest_turn():
    trajectory = Trajectory(turns=(turn(version=5), turn(version=4)), reward=0.0)
    assert trajectory.policy_version == 4


@pytest.mark.parametrize("reward", [math.nan, math.inf, "1.0", True])
def test_reward_must_be_a_finite_number(reward):
    with pytest.raises(TrajectoryError, match="reward"):
        Trajectory(turns=(turn(),), reward=reward)


def test_from_choice_reads_server_extension_fields_and_explains_missing_ones():
    choice = {"prompt_token_ids": [1, 2], "token_ids": [3], "token_logprobs": [-0.1],
              "policy_version": 2}
    assert SampledTurn.from_choice(choice).tokens == (3,)
    with pytest.raises(TrajectoryError, match="this run's server"):
        SampledTurn.from_choice({"token_ids": [3]})
