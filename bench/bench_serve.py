"""How long a browser waits for the served dashboard: from opening the address `tinker-tui
serve` printed to the first frame on the page, against the same dashboard's first frame in a
terminal (`tinker-tui show` on an 80x24 pseudo-terminal), measured in the same run.

    python bench/bench_serve.py              # 3 alternating rounds
    python bench/bench_serve.py --rounds 5

Needs chromium on PATH and the playwright package (`pip install -e ".[web]"`). The run is a
short scripted one in a temporary store. One `serve` process serves every round; each round
opens a fresh page (a fresh dashboard process): the time is from `goto` to the page's
`-first-byte` class (textual-serve's client sets it when the first frame arrives), and on to
the reward pane drawn with its data. The terminal's first frame is the time until the status
line ("STARTING") is written. Figures: median and min per kind, and the browser's medians
over the terminal's (the cost of serving over starting the dashboard itself).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench")]

from bench_startup import FRAME_MARKER, environment  # noqa: E402
from fake_session import LiveFakeSession  # noqa: E402
from test_serve import screen_text  # noqa: E402

COMMAND = [sys.executable, "-m", "tinker_tui.app.cli"]


def time_to_terminal_frame(db_path: Path, env: dict[str, str], cwd: Path) -> float:
    """`show` on an 80x24 pseudo-terminal, until its status line is written."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*COMMAND, "show", "--db", str(db_path)],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    os.close(follower)
    seen = b""
    try:
        while FRAME_MARKER not in seen:
            ready, _, _ = select.select([leader], [], [], 60)
            if not ready:
                raise TimeoutError("no frame from show in 60 s")
            seen += os.read(leader, 65536)
        return time.perf_counter() - started
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(leader)


async def time_to_page_frame(browser, url: str) -> tuple[float, float]:
    """Seconds from `goto` to the first frame, and to the reward pane with data."""
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    frames: list[bytes] = []
    page.on(
        "websocket",
        lambda ws: ws.on(
            "framereceived", lambda p: frames.append(p if isinstance(p, bytes) else p.encode())
        ),
    )
    started = time.perf_counter()
    await page.goto(url)
    await page.wait_for_selector("body.-first-byte", state="attached", timeout=120_000)
    first = time.perf_counter() - started
    while "━ mean" not in screen_text(frames):
        if time.perf_counter() - started > 120:
            raise TimeoutError("the reward pane never drew its data")
        await asyncio.sleep(0.05)
    reward = time.perf_counter() - started
    await page.close()
    return first, reward


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        sys.exit("needs the playwright package: pip install -e '.[web]'")
    if chromium is None:
        sys.exit("needs chromium on PATH")

    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        env = environment(cwd)
        db_path = cwd / "runs.db"
        await LiveFakeSession(str(db_path), step_seconds=0.0, max_steps=50).run()
        serve = subprocess.Popen(
            [*COMMAND, "serve", "--db", str(db_path), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=cwd,
        )
        assert serve.stdout is not None
        match = re.search(r"at (http://\S+)$", serve.stdout.readline().strip())
        assert match, "serve printed no address"
        url = match.group(1)
        terminal: list[float] = []
        first: list[float] = []
        reward: list[float] = []
        try:
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=chromium)
                await time_to_page_frame(browser, url)  # warm: the browser's own start-up
                for _ in range(args.rounds):
                    terminal.append(
                        await asyncio.to_thread(time_to_terminal_frame, db_path, env, cwd)
                    )
                    page_first, page_reward = await time_to_page_frame(browser, url)
                    first.append(page_first)
                    reward.append(page_reward)
                await browser.close()
        finally:
            serve.send_signal(signal.SIGINT)
            serve.wait(timeout=30)

    def line(name: str, values: list[float]) -> str:
        return f"{name:<34} median {statistics.median(values):6.2f}s  min {min(values):6.2f}s"

    print(f"{args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    print(line("terminal: show, first frame", terminal))
    print(line("browser: goto to first frame", first))
    print(line("browser: goto to reward pane data", reward))
    base = statistics.median(terminal)
    print(f"browser first frame / terminal first frame: {statistics.median(first) / base:.2f}")
    print(f"browser reward pane / terminal first frame: {statistics.median(reward) / base:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
