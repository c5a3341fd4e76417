"""One spec per run setting: RunConfig's checks, the live knobs, the dashboard's parsing, the
command line's flags and the test fake all read `engine.config.SETTINGS`."""

import argparse
import dataclasses

import pytest
from fake_session import KNOBS, FakeSession

from tinker_tui.app.argparse_private import actions, subcommand_parsers
from tinker_tui.app.cli import build_parser
from tinker_tui.app.commands.run import _default_text as default_text
from tinker_tui.app.view_maths import format_knob, parse_knob_value
from tinker_tui.engine.config import (
    LIVE_KNOBS,
    SETTINGS,
    ConfigError,
    RunConfig,
    Setting,
    check_knob,
)


def test_every_field_has_a_setting_with_a_meaning():
    names = [f.name for f in dataclasses.fields(RunConfig)]
    assert list(SETTINGS) == names
    for name, spec in SETTINGS.items():
        assert spec.name == name and spec.meaning and "\n" not in spec.meaning
        assert spec.default == getattr(RunConfig(), name)
        assert spec.group in ("run", "pipeline", "backend", "trackers")
    assert SETTINGS["max_steps"].value_type is int and SETTINGS["temperature"].value_type is float
    assert SETTINGS["eval_at_start"].value_type is bool


def test_live_knobs_come_from_the_spec_in_the_control_views_order():
    assert LIVE_KNOBS == ("learning_rate", "temperature", "max_steps_off_policy", "rollout_workers")
    assert all(SETTINGS[name].live for name in LIVE_KNOBS)
    assert list(KNOBS) == list(LIVE_KNOBS)


def out_of_range(spec: Setting) -> list[float]:
    bad = []
    if spec.low is not None:
        bad.append(spec.low if spec.low_open else spec.low - 1)
    if spec.high is not None:
        bad.append(spec.high if spec.high_open else spec.high + 1)
    return bad


#: Numbers any finite value of which a run takes: a seed, a reward.
UNBOUNDED = ("seed", "truncated_reward_cap", "eval_success_threshold")


@pytest.mark.parametrize(
    "name", [n for n, s in SETTINGS.items() if s.numeric and n not in UNBOUNDED]
)
def test_a_setting_and_its_knob_refuse_the_same_values_with_the_same_message(name):
    spec = SETTINGS[name]
    assert out_of_range(spec), f"{name} has no range"
    for value in out_of_range(spec):
        with pytest.raises(ConfigError) as config_error:
            RunConfig(**{name: value})
        assert str(config_error.value) == f"{name} must be {spec.allowed()}, got {value}"
        if spec.live:
            with pytest.raises(ValueError) as knob_error:
                check_knob(name, value)
            assert str(knob_error.value) == str(config_error.value)
            with pytest.raises(
                ValueError, match=spec.allowed().replace("(", r"\(").replace(")", r"\)")
            ):
                parse_knob_value(name, str(value))
            with pytest.raises(ValueError) as fake_error:
                FakeSession().control.set_knob(name, value)
            assert str(fake_error.value) == str(config_error.value)


def test_allowed_reads_as_a_sentence():
    assert SETTINGS["max_steps"].allowed() == "at least 1"
    assert SETTINGS["checkpoint_every"].allowed() == "0 or more"
    assert SETTINGS["temperature"].allowed() == "between 0 and 2"
    assert SETTINGS["learning_rate"].allowed() == "between 0 and 1 (exclusive)"
    assert SETTINGS["error_pause_rate"].allowed() == "in (0, 1]"
    assert SETTINGS["adam_beta1"].allowed() == "in [0, 1)"
    assert SETTINGS["adam_eps"].allowed() == "positive"
    assert SETTINGS["loss_fn"].allowed() == (
        "importance_sampling, ppo, cispo, dro, gspo or stable_reinforce"
    )


def test_types_are_checked_and_whole_floats_become_ints():
    config = RunConfig(max_steps=5.0, temperature=1)
    assert config.max_steps == 5 and isinstance(config.max_steps, int)
    assert isinstance(config.temperature, float)
    for value, message in (
        (2.5, "a whole number"),
        ("3", "a number"),
        (True, "a number"),
        (float("nan"), "a finite number"),
    ):
        with pytest.raises(ConfigError, match=f"max_steps must be {message}"):
            RunConfig(max_steps=value)
    with pytest.raises(ConfigError, match="loss_fn must be importance_sampling, ppo"):
        RunConfig(loss_fn="sgd")
    # the store holds 64-bit whole numbers: a run it could not record is refused up front
    assert RunConfig(max_steps=2**63 - 1).max_steps == 2**63 - 1
    for value in (2**63, 10**20, 1e20):
        with pytest.raises(
            ConfigError,
            match="max_steps must be at most 9,223,372,036,854,775,"
            "807 .the largest whole number the run store",
        ):
            RunConfig(max_steps=value)
    with pytest.raises(
        ConfigError, match="min_groups_per_step must be between 0 and groups_per_step"
    ):
        RunConfig(groups_per_step=2, min_groups_per_step=3)


def test_knobs_that_are_not_live_are_refused_by_name():
    with pytest.raises(
        ValueError,
        match="'seed' cannot be changed live; the live knobs are learning_rate, temperature",
    ):
        check_knob("seed", 1)
    assert check_knob("rollout_workers", 8.0) == 8
    assert isinstance(check_knob("learning_rate", 1e-3), float)


def test_the_dashboard_parses_and_formats_from_the_spec():
    assert parse_knob_value("max_steps_off_policy", " 2.0 ") == 2
    assert parse_knob_value("learning_rate", "1_0e-4") == pytest.approx(1e-3)
    assert format_knob("rollout_workers", 4.0) == "4"
    assert format_knob("learning_rate", 0.0005) == "0.0005"
    assert format_knob("temperature", None) == "-"


def test_every_setting_is_a_flag_that_says_what_it_means():
    run = subcommand_parsers(build_parser())["run"]
    flags: dict[str, argparse.Action] = {}  # the flag --help lists for each setting
    for action in actions(run):
        if action.help != argparse.SUPPRESS:
            flags.setdefault(action.dest, action)
    for name, spec in SETTINGS.items():
        assert name in flags, name
        if flags[name].option_strings == ["--" + name.replace("_", "-")]:
            assert spec.meaning in flags[name].help, name
            assert f"(default {default_text(spec.default)})" in flags[name].help, name
        else:  # a shorter flag stands for it (--steps, --wandb, --tensorboard)
            assert flags[name].help, name
    args = build_parser().parse_args(
        ["run", "example", "--rollout-workers", "8", "--no-eval-at-start", "--temperature", "0.7"]
    )
    assert (args.rollout_workers, args.eval_at_start, args.temperature) == (8, False, 0.7)


def test_a_whole_number_setting_says_what_was_typed_as_a_whole_number():
    from tinker_tui.engine.config import SETTINGS

    workers = SETTINGS["rollout_workers"]
    with pytest.raises(ConfigError, match=r"between 1 and 256, got 0$"):
        workers.parse("0")
    with pytest.raises(ConfigError, match=r"got 1000$"):
        workers.parse("1_000")
    with pytest.raises(ConfigError, match=r"temperature must be .*, got 33.0$"):
        SETTINGS["temperature"].parse("33")
