"""Keys that arrive together (a paste, tmux, a laggy SSH link) all arrive, in order.

The burst is posted to the app in one go, as the terminal driver does with the keys of one
read, so no key is handled before the next one is queued."""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

from fake_session import FakeSession, wait_for_charts
from textual import events
from textual.pilot import Pilot
from textual.widgets import Input

from tinker_tui.app.screens.knob_edit import KnobEditScreen
from tinker_tui.app.tui import TinkerTuiApp
from tinker_tui.app.widgets.rollouts_tree import RolloutsTree

CHARACTERS = {"enter": "\r", "full_stop": ".", "space": " "}


def burst(app: TinkerTuiApp, *keys: str) -> None:
    """Queue `keys` at once ("backspace", "enter", or single characters)."""
    for key in keys:
        app.post_message(events.Key(key, CHARACTERS.get(key, key if len(key) == 1 else None)))


async def until(predicate, pilot: Pilot, timeout: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.02)


async def open_knob(pilot: Pilot, row_downs: int) -> KnobEditScreen:
    app = pilot.app
    assert isinstance(app, TinkerTuiApp)
    await asyncio.wait_for(app.session.script_done.wait(), timeout=5)
    await wait_for_charts(pilot)
    await pilot.press("3")
    await until(lambda: app.focused is not None, pilot)
    for _ in range(row_downs):
        await pilot.press("down")
    await pilot.press("enter")
    await until(
        lambda: isinstance(app.screen, KnobEditScreen) and isinstance(app.focused, Input), pilot
    )
    assert isinstance(app.screen, KnobEditScreen)
    return app.screen


def make_app() -> TinkerTuiApp:
    session = FakeSession()
    app = TinkerTuiApp(session, clock=session.clock, refresh_interval=0.05)
    app.animation_level = "none"
    return app


async def test_a_burst_of_keys_in_the_knob_dialog_arrives_whole_and_in_order():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        dialog = await open_knob(pilot, row_downs=1)  # temperature, now 1 (selected)
        field = dialog.query_one(Input)
        burst(app, "backspace", "0", "full_stop", "8", "enter")
        await until(lambda: "Enter again" in str(dialog.query_one("#knob-message").render()), pilot)
        assert field.value == "0.8"
        assert "temperature: 1 → 0.8." in str(dialog.query_one("#knob-message").render())
        # editing keys in the middle of a burst land where they were typed
        burst(
            app,
            "backspace",
            "backspace",
            "backspace",
            *"0.85",
            "left",
            "left",
            "backspace",
            "home",
            "1",
        )
        await until(lambda: field.value == "1085", pilot)
        await pilot.pause(0.1)
        assert field.value == "1085"
        burst(app, "home", *(["delete"] * 4), *"abcdef", "backspace", "f")
        await until(lambda: field.value == "abcdef", pilot)
        await pilot.pause(0.1)
        assert field.value == "abcdef"
        # check and apply in one burst: both enters arrive, the value applied is the typed one
        burst(app, "home", *(["delete"] * 6), *"0.85", "enter", "enter")
        await until(lambda: not isinstance(app.screen, KnobEditScreen), pilot)
    assert app.session.control.calls == [("set_knob", "temperature=0.85")]


async def test_a_burst_in_the_rollouts_filter_arrives_whole():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await asyncio.wait_for(app.session.script_done.wait(), timeout=5)
        await wait_for_charts(pilot)
        await pilot.press("2")
        tree = app.screen.query_one(RolloutsTree)
        await until(lambda: len(tree.root.children) == 20, pilot)
        await pilot.press("slash")
        field = app.screen.query_one("#rollout-filter", Input)
        await until(lambda: app.focused is field, pilot)
        burst(app, *"stalx", "backspace", "e", "enter")
        await until(lambda: app.focused is tree, pilot)
        assert field.value == "stale"
        await until(lambda: len(tree.root.children) == 2, pilot)


async def test_keys_typed_with_the_enter_that_opens_the_dialog_go_into_it():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await asyncio.wait_for(app.session.script_done.wait(), timeout=5)
        await wait_for_charts(pilot)
        await pilot.press("3")
        await until(lambda: app.focused is not None, pilot)
        # one burst: open temperature's dialog, replace its value, check it, apply it
        burst(app, "down", "enter", "backspace", *"0.5", "enter", "enter")
        await until(lambda: app.session.control.calls, pilot)
        assert not isinstance(app.screen, KnobEditScreen)
    assert app.session.control.calls == [("set_knob", "temperature=0.5")]


async def test_keys_typed_right_behind_the_slash_go_into_the_rollouts_filter():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await asyncio.wait_for(app.session.script_done.wait(), timeout=5)
        await wait_for_charts(pilot)
        await pilot.press("2")
        tree = app.screen.query_one(RolloutsTree)
        await until(lambda: len(tree.root.children) == 20, pilot)
        # one burst: open the filter, type it, apply it (the tree must see none of these keys)
        burst(app, "slash", *"stale", "enter")
        field = app.screen.query_one("#rollout-filter", Input)
        await until(lambda: len(tree.root.children) == 2, pilot)
        assert field.value == "stale"
        await until(lambda: app.focused is tree, pilot)  # enter gives focus back to the tree
