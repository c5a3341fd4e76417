"""`tinker-tui serve`: the token, the viewer limits and `--read-only`, over plain HTTP and
websockets (no browser: these always run). The page in a real browser is in
test_serve_browser.py.

The server is the real command in its own process; the run is a scripted one in another
(real store, real control endpoint), as in test_attach.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from fake_session import LiveFakeSession
from test_attach import LIVE_FAKE_RUN, ROOT

from tinker_tui.app.cli import main as cli_main
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import CommandReceived, StepTrained
from tinker_tui.engine.store import StoreReader, find_run

ANSI = re.compile(r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


def screen_text(chunks: list[bytes]) -> str:
    """The text a terminal stream wrote, escape sequences removed."""
    return ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


# ------------------------------------------------------------------ helpers


class Served:
    """`tinker-tui serve` in its own process, with the address it printed."""

    def __init__(self, db_path: Path, *args: str) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("CI", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tinker_tui.app.cli",
                "serve",
                "--db",
                str(db_path),
                "--port",
                "0",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:(\d+)/\?token=(\S+))$", first.strip())
        assert match, (first, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.printed = first
        self.url, self.port, self.token = match.group(1), int(match.group(2)), match.group(3)
        self.base = f"http://127.0.0.1:{self.port}"
        self.stderr_lines: list[str] = []

    def stop(self) -> tuple[str, str]:
        """SIGINT, as Ctrl+C; returns the rest of stdout and all of stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=30)
        return out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def children_of(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


async def wait_until(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


class Page:
    """A viewer over a plain websocket: what a browser's page sends and receives."""

    def __init__(self, websocket: aiohttp.ClientWebSocketResponse) -> None:
        self.websocket = websocket
        self.chunks: list[bytes] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.websocket:
            if message.type == aiohttp.WSMsgType.BINARY:
                self.chunks.append(message.data)

    def text(self, since: int = 0) -> str:
        return screen_text(self.chunks[since:])

    async def until_text(
        self, words: str, timeout: float = 30.0, *, since: int = 0, keep_alive: bool = False
    ) -> None:
        """Wait for `words` on the screen; `keep_alive` presses a harmless key (s, the
        smoothing) every second meanwhile, so a short idle timeout does not close the page
        while its dashboard starts."""
        waiting = asyncio.create_task(
            wait_until(
                lambda: words in self.text(since) or self.reader.done(),
                f"{words!r} on the page",
                timeout,
            )
        )
        while keep_alive and not waiting.done():
            await self.press("s")
            await asyncio.wait([waiting], timeout=1.0)
        await waiting
        assert words in self.text(since), self.text(since)[-2000:]

    async def press(self, keys: str) -> None:
        await self.websocket.send_str(json.dumps(["stdin", keys]))

    async def close(self) -> None:
        await self.websocket.close()
        await self.reader


def browser_session() -> aiohttp.ClientSession:
    """A client that keeps cookies as a browser does (also for an IP address's)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def open_page(session: aiohttp.ClientSession, served: Served) -> Page:
    websocket = await session.ws_connect(f"{served.base}/ws?width=100&height=30")
    # the page's terminal reports its size once it is drawn; the app draws after that
    await websocket.send_str(json.dumps(["resize", {"width": 100, "height": 30}]))
    return Page(websocket)


async def finished_run(db_path: Path) -> str:
    """A short scripted run, finished, in the store at `db_path`; its id."""
    session = LiveFakeSession(str(db_path), step_seconds=0.0, max_steps=3, run_id="done-0001")
    await session.run()
    return session.run_id


@pytest.fixture
def live_run(tmp_path):
    """A scripted run in another process, stepping every 50 ms until stopped."""
    db_path = tmp_path / "runs.db"
    # its output goes to a file: a pipe nobody reads fills after ~500 step lines and
    # stalls the run
    output = (tmp_path / "run.out").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", LIVE_FAKE_RUN, str(db_path)],
        stdout=output,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"},
    )
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("*.control.json")) or not db_path.exists():
        assert proc.poll() is None, (tmp_path / "run.out").read_text()
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.05)
    try:
        yield db_path
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        output.close()


async def stored(db_path: Path) -> tuple[list[CommandReceived], int]:
    """The run's stored commands and its last stored step."""
    run = await find_run(db_path, None)
    async with await StoreReader.open_readonly(db_path) as store:
        events = await store.events(run)
    commands = [e for e in events if isinstance(e, CommandReceived)]
    steps = [e.step for e in events if isinstance(e, StepTrained)]
    return commands, max(steps, default=0)


# ------------------------------------------------------------------ bad input


def test_serve_answers_bad_input_with_one_line_and_exit_2(tmp_path, capsys):
    db_path = tmp_path / "runs.db"
    assert cli_main(["serve", "--db", str(db_path)]) == 2  # no store
    asyncio.run(finished_run(db_path))
    busy = socket.create_server(("127.0.0.1", 0))
    try:
        port = busy.getsockname()[1]
        cases = [
            (["serve", "nope", "--db", str(db_path)], "no run"),
            (
                ["serve", "--db", str(db_path), "--port", str(port)],
                f"port {port} on 127.0.0.1 is in use",
            ),
            (
                ["serve", "--db", str(db_path), "--host", "no-such-host.invalid"],
                "--host 'no-such-host.invalid' is not an address of this machine",
            ),
            (
                ["serve", "--db", str(db_path), "--host", "192.0.2.1", "--port", "0"],
                "cannot listen on 192.0.2.1",
            ),
            (["serve", "--db", str(db_path), "--port", "70000"], "--port must be between"),
            (["serve", "--db", str(db_path), "--max-viewers", "0"], "--max-viewers must be"),
            (["serve", "--db", str(db_path), "--idle-timeout", "0"], "--idle-timeout must be"),
        ]
        capsys.readouterr()
        for argv, message in cases:
            started = time.monotonic()
            assert cli_main(argv) == 2, argv
            err = capsys.readouterr().err
            assert message in err and err.count("\n") == 1, (argv, err)
            assert err.startswith("tinker-tui: error: ")
            assert time.monotonic() - started < 10
    finally:
        busy.close()


def test_another_address_than_localhost_prints_a_warning_naming_the_risk(tmp_path):
    db_path = tmp_path / "runs.db"
    asyncio.run(finished_run(db_path))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "serve",
            "--db",
            str(db_path),
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        address = proc.stdout.readline()
        warning = proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert "/?token=" in address and "127.0.0.1" not in address
    assert warning.startswith(
        "warning: listening on 0.0.0.0, not 127.0.0.1: anyone who can "
        "reach it and learns the token can watch and steer this run"
    )
    assert "plain HTTP" in warning and "SSH port-forward" in warning


# ------------------------------------------------------------------ the token


async def test_without_the_token_everything_is_401_and_no_process_starts(tmp_path):
    db_path = tmp_path / "runs.db"
    run_id = await finished_run(db_path)
    served = Served(db_path)
    try:
        assert f"serving run {run_id} (watch and steer) at http://127.0.0.1:" in served.printed
        async with aiohttp.ClientSession() as anonymous:
            for path in (
                "/",
                "/?token=wrong",
                f"/?token={served.token}x",
                "/ws",
                "/ws?token=wrong",
                "/static/js/textual.js",
                "/nothing",
            ):
                async with anonymous.get(served.base + path) as response:
                    assert response.status == 401, path
                    assert "the address `tinker-tui serve` printed" in await response.text()
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await anonymous.ws_connect(f"{served.base}/ws")
            assert refused.value.status == 401
            wrong_cookie = {"tinker_tui_serve": "guess"}
            async with anonymous.get(served.base + "/", cookies=wrong_cookie) as response:
                assert response.status == 401
        await asyncio.sleep(0.3)
        assert children_of(served.proc.pid) == [], "a refused request started a process"

        async with browser_session() as browser:
            async with browser.get(served.url) as response:
                assert response.status == 200
                page = await response.text()
                cookie = response.headers["Set-Cookie"]
                # the token in the address is never passed on to another site
                assert response.headers.get("Referrer-Policy") == "no-referrer"
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
            assert f'data-session-websocket-url="ws://127.0.0.1:{served.port}/ws/{run_id}"' in page
            assert "http" not in page.split("<body>")[0].replace("http-equiv", "")  # offline
            assert served.token not in page
            async with browser.get(served.base + "/") as response:  # the cookie alone
                assert response.status == 200
            for asset in (
                "js/textual.js",
                "css/xterm.css",
                "fonts/RobotoMono-VariableFont_wght.ttf",
            ):
                async with browser.get(f"{served.base}/static/{asset}") as response:
                    assert response.status == 200, asset
                    assert len(await response.read()) > 1000
            # a websocket from a page served elsewhere is refused, even with the cookie
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await browser.ws_connect(
                    f"{served.base}/ws", headers={"Origin": "http://evil.example"}
                )
            assert refused.value.status == 403
            viewer = await open_page(browser, served)
            await viewer.until_text(f"finished run │ {run_id}")  # the run's id
            await viewer.until_text("FINISHED (completed)")
            processes = children_of(served.proc.pid)
            assert len(processes) == 1

            # Ctrl+C on the server closes the open page and ends its process
            out, err = served.stop()
            await asyncio.wait_for(viewer.reader, 15)
    finally:
        served.kill()
    assert served.proc.returncode == 0, err
    assert served.token not in served.printed.replace(served.url, "") + out + err, (
        "the token reached the server's output outside the address"
    )
    assert "viewer 1 opened" in err and "viewer 1 closed: server stopped" in err, err
    assert "viewer 2" not in err
    for pid in processes:
        assert not Path(f"/proc/{pid}").exists(), "a viewer outlived the server"


# ------------------------------------------------------------------ several runs


async def two_finished_runs(db_path: Path) -> None:
    """old-0001 (3 steps), started a minute before new-0002 (5 steps): the list is newest
    first."""
    old = LiveFakeSession(str(db_path), step_seconds=0.0, max_steps=3, run_id="old-0001")
    old.clock = FakeClock(time.time() - 60)
    await old.run()
    await LiveFakeSession(str(db_path), step_seconds=0.0, max_steps=5, run_id="new-0002").run()


async def test_a_store_of_several_runs_is_listed_and_each_opens_its_dashboard(tmp_path):
    db_path = tmp_path / "runs.db"
    await two_finished_runs(db_path)
    served = Served(db_path)
    try:
        assert f"serving the runs of {db_path} (watch and steer) at" in served.printed
        async with browser_session() as browser:
            async with browser.get(served.url) as response:
                assert response.status == 200
                listing = await response.text()
            assert served.token not in listing
            assert "2 runs in the store" in listing
            assert listing.index('href="/?run=new-0002"') < listing.index('href="/?run=old-0001"')
            assert "<td>5/5</td>" in listing and "<td>3/3</td>" in listing
            assert listing.count("<td>completed</td>") == 2
            assert "data-session-websocket-url" not in listing
            assert children_of(served.proc.pid) == [], "the list started a process"

            async with browser.get(served.base + "/?run=old-0001") as response:
                assert response.status == 200
                page = await response.text()
            assert f'data-session-websocket-url="ws://127.0.0.1:{served.port}/ws/old-0001"' in page
            assert 'history.replaceState(null, "", "/?run=old-0001")' in page
            assert '<a class="back" href="/">All runs</a>' in page  # back to the list
            for path in ("/?run=nothing", "/?run=old"):  # only a listed id, not a prefix
                async with browser.get(served.base + path) as response:
                    assert response.status == 404, path
            for path in ("/ws", "/ws/nothing"):  # several runs: a websocket names one
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await browser.ws_connect(served.base + path)
                assert refused.value.status == 404, path
            assert children_of(served.proc.pid) == []

            for run_id, steps in (("old-0001", "3/3"), ("new-0002", "5/5")):
                websocket = await browser.ws_connect(
                    f"{served.base}/ws/{run_id}?width=100&height=30"
                )
                await websocket.send_str(json.dumps(["resize", {"width": 100, "height": 30}]))
                viewer = Page(websocket)
                await viewer.until_text("FINISHED (completed)")
                await viewer.until_text(steps)
                await viewer.close()
    finally:
        out, err = served.stop()
    assert "viewer 1 closed: page closed" in err and "viewer 2 closed: page closed" in err, err
    assert served.token not in out + err


# ------------------------------------------------------------------ the limits


async def test_viewers_are_capped_closed_when_idle_and_end_with_their_page(tmp_path):
    db_path = tmp_path / "runs.db"
    await finished_run(db_path)
    served = Served(db_path, "--max-viewers", "1", "--idle-timeout", "3")
    try:
        async with browser_session() as browser:
            async with browser.get(served.url) as response:
                assert response.status == 200
            first = await open_page(browser, served)
            await first.until_text("finished run", keep_alive=True)
            processes = children_of(served.proc.pid)
            assert len(processes) == 1

            # a second page: 503, no second process
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await browser.ws_connect(f"{served.base}/ws")
            assert refused.value.status == 503
            async with browser.get(served.base + "/") as response:
                assert response.status == 503
                assert "the limit is 1" in await response.text()
            assert children_of(served.proc.pid) == processes

            # input keeps a page open; without it, it is closed after the timeout
            for _ in range(4):
                await asyncio.sleep(1.0)
                await first.press("s")  # smoothing: harmless
            assert not first.reader.done()
            started = time.monotonic()
            await asyncio.wait_for(first.reader, 15)
            assert 2.0 < time.monotonic() - started < 10
            await wait_until(
                lambda: children_of(served.proc.pid) == [], "the idle viewer's process to end"
            )
            for pid in processes:
                assert (
                    not Path(f"/proc/{pid}").exists()
                    or "zombie" in Path(f"/proc/{pid}/status").read_text()
                )

            # the slot is free again; closing the page ends its process
            second = await open_page(browser, served)
            await second.until_text("finished run", keep_alive=True)
            assert len(children_of(served.proc.pid)) == 1
            await second.close()
            await wait_until(
                lambda: children_of(served.proc.pid) == [],
                "the closed page's process to end",
                timeout=15,
            )
    finally:
        out, err = served.stop()
    assert "viewer 1 closed: no input for 3s" in err, err
    assert "viewer 2 closed: page closed" in err, err
    assert served.token not in out + err


# ------------------------------------------------------------------ read-only


async def press_p_and_read_store(db_path: Path, *args: str) -> tuple[list[str], int, int]:
    """Serve the live run and press p, then ?, on a page. Once the help is drawn (p was
    handled before it), the stored commands and the run's last step before p and after."""
    served = Served(db_path, *args)
    try:
        async with browser_session() as browser:
            async with browser.get(served.url):
                pass
            page = await open_page(browser, served)
            mode = "read-only" if "--read-only" in args else "attached"
            await page.until_text(f"{mode} │ live", timeout=60)
            _, before = await stored(db_path)
            drawn = len(page.chunks)
            await page.press("p")
            await page.press("?")
            await page.until_text("command palette", since=drawn)  # the help
            # a pause goes to the run from a thread: give it time to land (3 s when none
            # should, up to 30 s when one should)
            deadline = time.monotonic() + (3 if mode == "read-only" else 30)
            while True:
                commands, after = await stored(db_path)
                if any(c.command == "pause" for c in commands) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            await page.close()
    finally:
        served.stop()
    return [c.command for c in commands], before, after


async def test_read_only_p_does_not_pause_the_run(live_run):
    commands, before, after = await press_p_and_read_store(live_run, "--read-only")
    assert "pause" not in commands
    assert after > before + 5, "the run kept stepping"


async def test_without_read_only_p_pauses_the_run(live_run):
    """The same keys without --read-only reach the run: the check above can fail."""
    commands, before, after = await press_p_and_read_store(live_run)
    assert "pause" in commands
    _, later = await stored(live_run)
    await asyncio.sleep(1.0)
    _, latest = await stored(live_run)
    assert latest <= later + 1, "the run kept stepping while paused"


def test_the_run_list_names_the_runs_as_runs_does():
    """`serve`'s list lacked the run's name, which `runs` shows."""
    from tinker_tui.app.web_serve import WebServer

    server = WebServer([], token="t", max_viewers=1, idle_timeout=1.0)
    row = {
        "RUN": "r-1",
        "NAME": "lr 3e-4",
        "TASK": "t",
        "STATUS": "completed",
        "STEP": "5/5",
        "REWARD": "0.9",
        "STARTED": "now",
    }
    page = server.picker_page([row, {**row, "RUN": "r-2", "NAME": "-"}]).text
    assert "<th>NAME</th>" in page and "<td>lr 3e-4</td>" in page
    unnamed = server.picker_page([{**row, "NAME": "-"}]).text
    assert "<th>NAME</th>" not in unnamed  # no run has a name: no column of dashes
