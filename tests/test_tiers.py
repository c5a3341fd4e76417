"""The tiers (tests/tiers.py): every test has exactly one, the rule reads what a test
starts through its helpers and fixtures, and a fast test that starts a process anyway
fails, naming it."""

from __future__ import annotations

import sys

import pytest
import tier_examples
import tiers


def test_every_collected_test_has_exactly_one_tier(request):
    wrong = [
        f"{item.nodeid}: {names or 'none'}"
        for item in request.session.items
        if len(names := [m.name for m in item.iter_markers() if m.name in tiers.TIERS]) != 1
    ]
    assert not wrong, "tests without exactly one tier:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("function", "reaches"),
    [
        (tier_examples.plain, set()),
        (tier_examples.runs_the_command_line, {"process"}),
        (tier_examples.names_the_interpreter, {"process"}),
        (tier_examples.starts_one_on_the_loop, {"process"}),
        (tier_examples.through_a_helper, {"process"}),
        (tier_examples.through_a_helper_module, {"process"}),
        (tier_examples.drives_a_browser, {"browser"}),
        (tier_examples.uses_a_class_that_starts_one, {"process"}),
        (tier_examples.drives_the_dashboard, {"ui"}),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_the_rule_follows_what_a_test_names(function, reaches):
    assert tiers.Reader().reaches(function) == reaches


class _Item:
    def __init__(self, tier: str) -> None:
        self.tier = tier

    def iter_markers(self):
        return [getattr(pytest.mark, self.tier).mark]


def test_a_tier_marked_by_hand_wins_and_this_test_is_fast(request):
    assert tiers.tier_of(_Item("e2e"), tiers.Reader()) == "e2e"  # type: ignore[arg-type]
    assert [m.name for m in request.node.iter_markers() if m.name in tiers.TIERS] == ["fast"]


def test_the_guard_fails_a_fast_test_that_starts_an_interpreter(request):
    guard = tiers.ProcessGuard()
    # The audit event a process start raises, without starting one.
    with guard.watch(_Item("fast")):  # type: ignore[arg-type]
        sys.audit("subprocess.Popen", sys.executable, [sys.executable, "-c", "pass"], None, None)
        sys.audit("subprocess.Popen", "uname", ["uname", "-p"], None, None)  # a probe
    with pytest.raises(AssertionError, match=r"fast or ui tier started a process .*'-c', 'pass'"):
        guard.check()
    with guard.watch(_Item("e2e")):  # type: ignore[arg-type]
        sys.audit("subprocess.Popen", sys.executable, [sys.executable], None, None)
    guard.check()  # an e2e test may
    request.config.stash[tiers.PROCESS_GUARD].started.clear()  # the suite's own saw it too
