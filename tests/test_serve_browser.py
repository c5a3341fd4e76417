"""`tinker-tui serve` in a real browser: headless Chromium (the system's `chromium`, driven by
Playwright's Python package; Playwright's own browser download is not used).

The page with the token draws the run's dashboard (the reward pane), a key press reaches
the app (`?` opens the help), and with `--read-only` `p` does not pause the run (read back
from the store). Screenshots go to $TINKER_TUI_SCREENSHOTS if set, else the test's tmp dir.
The time from `goto` to the first frame is printed (`-s` shows it).

Skipped, with the reason, where chromium or playwright is missing (`.ci/run` installs both).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest
from test_serve import (  # noqa: F401 (live_run: a fixture)
    Served,
    live_run,
    screen_text,
    stored,
    two_finished_runs,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    from playwright.async_api import async_playwright
except ImportError:  # pragma: no cover - the skip below says so
    async_playwright = None

pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium)"
    ),
    pytest.mark.skipif(
        async_playwright is None,
        reason="the playwright package is missing (pip install -e '.[web]')",
    ),
]


def artifact_dir(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("TINKER_TUI_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class BrowserPage:
    """A Chromium page on the served address, with what its websocket received."""

    def __init__(self, page) -> None:
        self.page = page
        self.frames: list[bytes] = []
        page.on("websocket", self._watch)

    def _watch(self, websocket) -> None:
        def received(payload: bytes | str) -> None:
            self.frames.append(payload if isinstance(payload, bytes) else payload.encode())

        websocket.on("framereceived", received)

    def text(self, since: int = 0) -> str:
        return screen_text(self.frames[since:])

    async def until_text(self, words: str, since: int = 0, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while words not in self.text(since):
            assert time.monotonic() < deadline, (
                f"{words!r} never reached the page: {self.text(since)[-1500:]!r}"
            )
            await asyncio.sleep(0.1)

    async def press(self, key: str) -> None:
        await self.page.focus(".xterm-helper-textarea")  # the terminal's keyboard input
        await self.page.keyboard.press(key)


async def open_dashboard(browser, served: Served) -> tuple[BrowserPage, float]:
    """Open the printed address; returns the page and the seconds to its first frame."""
    page = BrowserPage(await browser.new_page(viewport={"width": 1280, "height": 800}))
    started = time.monotonic()
    await page.page.goto(served.url)
    await page.page.wait_for_selector("body.-first-byte", state="attached", timeout=90_000)
    first_frame = time.monotonic() - started
    print(f"\npage load to first frame: {first_frame:.2f}s")
    assert "token" not in page.page.url, "the token stays in the address bar"
    return page, first_frame


async def launch(playwright):
    return await playwright.chromium.launch(executable_path=CHROMIUM, headless=True)


async def test_the_served_page_draws_the_dashboard_and_takes_keys(live_run, tmp_path):  # noqa: F811
    shots = artifact_dir(tmp_path)
    served = Served(live_run)
    try:
        async with async_playwright() as playwright:
            browser = await launch(playwright)
            try:
                page, _ = await open_dashboard(browser, served)
                await page.until_text("Reward")
                await page.until_text("━ mean")  # the pane's subtitle: it has data
                await page.until_text("attached │ live")
                await asyncio.sleep(1.0)  # a few more steps on the chart
                await page.page.screenshot(path=str(shots / "serve-dashboard.png"))

                before_help = len(page.frames)
                await page.press("?")
                await page.until_text("command palette", since=before_help)  # the help's keys
                await page.page.screenshot(path=str(shots / "serve-help.png"))
                await page.page.close()
            finally:
                await browser.close()
    finally:
        out, err = served.stop()
    for name in ("serve-dashboard.png", "serve-help.png"):
        assert (shots / name).stat().st_size > 10_000, name
    assert "viewer 1 closed: page closed" in err, err
    assert served.token not in out + err


async def test_read_only_in_the_browser_p_does_not_pause(live_run, tmp_path):  # noqa: F811
    served = Served(live_run, "--read-only")
    try:
        async with async_playwright() as playwright:
            browser = await launch(playwright)
            try:
                page, _ = await open_dashboard(browser, served)
                await page.until_text("read-only │ live")
                await page.until_text("━ mean")
                _, before = await stored(live_run)
                drawn = len(page.frames)
                await page.press("p")
                await page.press("?")  # drawn once p was handled
                await page.until_text("command palette", since=drawn)
                await asyncio.sleep(2.0)
                commands, after = await stored(live_run)
                await page.page.screenshot(path=str(artifact_dir(tmp_path) / "serve-read-only.png"))
            finally:
                await browser.close()
    finally:
        served.stop()
    assert "pause" not in [c.command for c in commands]
    assert after > before + 5, "the run kept stepping"


async def test_a_click_in_the_list_of_runs_opens_that_runs_dashboard(tmp_path):
    from fake_session import LiveFakeSession

    shots = artifact_dir(tmp_path)
    db_path = tmp_path / "runs.db"
    await two_finished_runs(db_path)
    served = Served(db_path)
    try:
        async with async_playwright() as playwright:
            browser = await launch(playwright)
            try:
                page = BrowserPage(await browser.new_page(viewport={"width": 1280, "height": 800}))
                await page.page.goto(served.url)
                assert "token" not in page.page.url
                await page.page.screenshot(path=str(shots / "serve-runs.png"))
                assert "2 runs in the store" in await page.page.inner_text("body")
                # a run started meanwhile shows up in the open list, with no reload asked
                await LiveFakeSession(
                    str(db_path), step_seconds=0.0, max_steps=2, run_id="newer-0003"
                ).run()
                await page.page.wait_for_selector("text=newer-0003", timeout=15_000)
                assert "3 runs in the store" in await page.page.inner_text("body")
                await page.page.click("text=old-0001")
                await page.page.wait_for_selector(
                    "body.-first-byte", state="attached", timeout=90_000
                )
                assert page.page.url.endswith("/?run=old-0001")
                await page.until_text("FINISHED (completed)")
                await page.until_text("3/3")
                assert "5/5" not in page.text()
                await page.page.close()
            finally:
                await browser.close()
    finally:
        out, err = served.stop()
    assert (shots / "serve-runs.png").stat().st_size > 5_000
    assert "viewer 1 closed: page closed" in err, err
    assert served.token not in out + err
