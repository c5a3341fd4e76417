"""Functions for tests/test_tiers.py to classify: each starts (or does not start) a process
or a browser in one of the ways the rule in tests/tiers.py follows."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import private_mount


def plain() -> int:
    return sum(range(3))


def runs_the_command_line() -> None:
    subprocess.run([sys.executable, "-m", "tinker_tui.app.cli", "--help"], check=True)


def names_the_interpreter() -> list[str]:
    return [sys.executable, "-c", "pass"]


async def starts_one_on_the_loop() -> None:
    await asyncio.create_subprocess_exec("true")


def through_a_helper() -> None:
    names_the_interpreter()


def through_a_helper_module() -> None:
    private_mount.run("true")


def drives_a_browser() -> None:
    from playwright.async_api import async_playwright

    async_playwright()


async def drives_the_dashboard(app) -> None:
    async with app.run_test() as pilot:
        await pilot.press("p")


class Server:
    def start(self) -> None:
        self.launch()

    def launch(self) -> None:
        subprocess.Popen(["true"])


def uses_a_class_that_starts_one() -> None:
    Server().start()
