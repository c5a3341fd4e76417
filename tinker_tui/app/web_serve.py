"""The dashboard as a web page, for `tinker-tui serve`: an aiohttp server in front of
Textualize's `textual-serve`.

textual-serve ships the browser side (xterm.js, its fonts) and the bridge between a page's
websocket and one dashboard process (`AppService`). Its own `Server` serves anyone who can
reach the port, with no limit on processes; this module is the small layer in front:

- Every request needs the token: `?token=...` on the first visit (the address `serve`
  prints), then an HttpOnly, SameSite=Strict cookie. A missing or wrong one gets 401 before
  any handler runs, so no process starts. The page takes the token out of the address bar.
- A websocket from another origin is refused (a page elsewhere cannot drive the dashboard).
- Each viewer is a process: at most `max_viewers` at once (503 beyond), one closed after
  `idle_timeout` seconds without a key, mouse or resize event from its page, and its
  process ended (asked to quit, then terminated, then killed) when its page goes away.
- No access log: request lines would carry the token.
- With `list_runs` (serve without a RUN), a store of several runs first gets a page that
  lists them (read again every `PICKER_REFRESH` seconds, so a new run or a run's progress
  shows without a reload); each links to `/?run=ID`, whose page's websocket (`/ws/ID`)
  starts a viewer for that run, and whose page links back to the list. Only ids in the
  store's list are accepted.

The page is our own (textual-serve's links a font from the internet; this one uses the font
the package ships, so a machine without internet serves it whole).
"""

from __future__ import annotations

import asyncio
import hmac
import html
import json
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from importlib import resources
from typing import Any
from urllib.parse import quote

from aiohttp import WSCloseCode, WSMsgType, web
from textual_serve.download_manager import DownloadManager

from tinker_tui.app.textual_serve_private import ExecAppService

COOKIE = "tinker_tui_serve"
QUIT_GRACE = 5.0  # seconds a viewer process has to quit before it is terminated, then killed
HEARTBEAT = 15.0  # websocket pings: a page that vanished without closing is noticed
PICKER_REFRESH = 5  # seconds between reloads of the run list page

STATIC_DIR = resources.files("textual_serve") / "static"


class ViewerProcess(ExecAppService):
    """One viewer's dashboard process, bridged to its page by textual-serve's `AppService`.

    Started from an argument list (no shell between, so paths need no quoting: see
    `app.textual_serve_private`) and ended for sure by `end()`.
    """

    async def end(self, grace: float = QUIT_GRACE) -> int | None:
        """Ask the dashboard to quit; terminate it if it has not after `grace` seconds, then
        kill it. Returns its exit code (None if it never started)."""
        process = self.process
        if process is None:
            return None
        stopping = asyncio.ensure_future(self.stop())  # sends "quit", waits for its output
        try:
            await asyncio.wait_for(asyncio.shield(stopping), grace)
        except TimeoutError:
            for signal_it in (process.terminate, process.kill):
                with suppress(ProcessLookupError):
                    signal_it()
                try:
                    await asyncio.wait_for(process.wait(), grace)
                    break
                except TimeoutError:
                    continue
            await stopping
        return await process.wait()


class Viewer:
    """A page's websocket and its process, while it is open."""

    def __init__(
        self, number: int, websocket: web.WebSocketResponse, process: ViewerProcess
    ) -> None:
        self.number = number
        self.websocket = websocket
        self.process = process


class WebServer:
    """The aiohttp application that serves the dashboard page (see the module docstring).

    Args:
        viewer_argv: The command line of one viewer's dashboard process.
        token: The secret a browser must present (`secrets.token_urlsafe`).
        title: The page's title.
        max_viewers: Viewer processes allowed at once.
        idle_timeout: Seconds without input from a page before its viewer is closed.
        log: Where one line per viewer event goes (never the token).
        list_runs: The store's runs, newest first (rows of `tinker-tui runs`); given, the
            page picks a run (see the module docstring) and `viewer_argv` is ignored.
        run_argv: The command line of a viewer of one run (with `list_runs`).
    """

    def __init__(
        self,
        viewer_argv: Sequence[str],
        *,
        token: str,
        title: str = "tinker-tui",
        max_viewers: int,
        idle_timeout: float,
        log: Callable[[str], None] | None = None,
        list_runs: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None,
        run_argv: Callable[[str], Sequence[str]] | None = None,
    ) -> None:
        self.viewer_argv = list(viewer_argv)
        self.list_runs = list_runs
        self.run_argv = run_argv
        self.token = token
        self.title = title
        self.max_viewers = max_viewers
        self.idle_timeout = idle_timeout
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.viewers: dict[int, Viewer] = {}
        self.viewers_started = 0
        self.downloads = DownloadManager()  # AppService needs one; the dashboard sends none
        self._runner: web.AppRunner | None = None
        self.stopping = False

    # ---------------------------------------------------------------- the application

    def application(self) -> web.Application:
        app = web.Application(middlewares=[self.authenticate])
        app.add_routes(
            [
                web.get("/", self.handle_index),
                web.get("/ws", self.handle_websocket),
                web.get("/ws/{run}", self.handle_websocket),
                web.static("/static", str(STATIC_DIR)),
            ]
        )
        return app

    async def start(self, sock: socket.socket) -> None:
        """Serve on a bound, listening socket (the caller reports binding errors)."""
        self._runner = web.AppRunner(self.application(), access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def close(self) -> None:
        """Close every page's websocket (which ends its process), then the server."""
        self.stopping = True
        await asyncio.gather(
            *(
                viewer.websocket.close(code=WSCloseCode.GOING_AWAY, message=b"server stopped")
                for viewer in list(self.viewers.values())
            )
        )
        deadline = asyncio.get_running_loop().time() + 3 * QUIT_GRACE
        while self.viewers and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)  # their handlers end the processes
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---------------------------------------------------------------- the token

    def presented_token(self, request: web.Request) -> str | None:
        return request.query.get("token") or request.cookies.get(COOKIE)

    def token_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            presented.encode(), self.token.encode()
        )

    @web.middleware
    async def authenticate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not self.token_ok(self.presented_token(request)):
            return web.Response(
                status=401,
                headers={"Cache-Control": "no-store"},
                text="401 Unauthorized: open the address `tinker-tui serve` printed "
                "(it carries the token)\n",
            )
        response = await handler(request)
        if "token" in request.query and isinstance(response, web.Response):
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
        return response

    # ---------------------------------------------------------------- the page

    async def chosen_run(self, asked: str | None) -> tuple[str | None, list[dict[str, Any]]]:
        """The run a request names (or the store's only run), if it is in the store's list;
        and the list."""
        assert self.list_runs is not None
        rows = await self.list_runs()
        ids = [str(row["RUN"]) for row in rows]
        if asked is None:
            return (ids[0] if len(ids) == 1 else None), rows
        return (asked if asked in ids else None), rows

    async def handle_index(self, request: web.Request) -> web.Response:
        path, title = "/", self.title
        websocket_path = "/ws"
        back = ""  # a link to the run list, when there is one to go back to
        if self.list_runs is not None:
            run, rows = await self.chosen_run(request.query.get("run"))
            if run is None and "run" in request.query:
                return web.Response(
                    status=404,
                    text=f"404: no run {request.query['run']!r} "
                    "in the store; the runs are listed at /\n",
                )
            if run is None:
                return self.picker_page(rows)
            if len(rows) > 1:
                path = f"/?run={quote(run, safe='')}"
                back = BACK_LINK
            websocket_path = f"/ws/{quote(run, safe='')}"
            title = f"tinker-tui · {run}"
        if len(self.viewers) >= self.max_viewers:
            return self.full()
        scheme = "wss" if request.secure else "ws"
        font_size = clamp(request.query.get("fontsize"), 16, 6, 64)
        page = INDEX_PAGE.format(
            title=html.escape(title),
            page_path=json.dumps(path).replace("<", "\\u003c"),
            websocket_url=html.escape(f"{scheme}://{request.host}{websocket_path}", quote=True),
            font_size=font_size,
            back=back,
        )
        return web.Response(
            text=page,
            content_type="text/html",
            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
        )

    def picker_page(self, rows: list[dict[str, Any]]) -> web.Response:
        """The store's runs, newest first, each a link to its dashboard."""
        # the run's own name, as `runs` shows it, where any run has one
        named = any(row.get("NAME", "-") != "-" for row in rows)
        columns = (
            "RUN",
            *(("NAME",) if named else ()),
            "TASK",
            "STATUS",
            "STEP",
            "REWARD",
            "STARTED",
        )
        head = "".join(f"<th>{column}</th>" for column in columns)
        lines = []
        for row in rows:
            link = html.escape(f"/?run={quote(str(row['RUN']), safe='')}", quote=True)
            cells = [f'<td><a href="{link}">{html.escape(str(row["RUN"]))}</a></td>']
            cells += [f"<td>{html.escape(str(row[column]))}</td>" for column in columns[1:]]
            lines.append(f"<tr>{''.join(cells)}</tr>")
        page = PICKER_PAGE.format(
            title=html.escape(self.title),
            count=len(rows),
            head=head,
            rows="\n".join(lines),
            refresh=PICKER_REFRESH,
        )
        return web.Response(
            text=page,
            content_type="text/html",
            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
        )

    def full(self) -> web.Response:
        return web.Response(
            status=503,
            text=f"503: {len(self.viewers)} viewers already "
            f"(the limit is {self.max_viewers}); close a "
            "page, or restart serve with --max-viewers\n",
        )

    # ---------------------------------------------------------------- a viewer

    def same_origin(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:  # not a browser: it has the token, it may connect
            return True
        return origin.split("://", 1)[-1] == request.host

    async def handle_websocket(self, request: web.Request) -> web.StreamResponse:
        if not self.same_origin(request):
            return web.Response(status=403, text="403: this page is served elsewhere\n")
        argv = self.viewer_argv
        if self.list_runs is not None and self.run_argv is not None:
            run, _ = await self.chosen_run(request.match_info.get("run"))
            if run is None:
                return web.Response(status=404, text="404: no such run in the store\n")
            argv = list(self.run_argv(run))
        elif "run" in request.match_info:  # serving one run: there is no other
            return web.Response(status=404, text="404: this server shows one run\n")
        if len(self.viewers) >= self.max_viewers:
            return self.full()
        websocket = web.WebSocketResponse(heartbeat=HEARTBEAT)
        self.viewers_started += 1
        number = self.viewers_started
        process = ViewerProcess(
            argv,
            write_bytes=websocket.send_bytes,
            write_str=websocket.send_str,
            close=websocket.close,
            download_manager=self.downloads,
        )
        self.viewers[number] = Viewer(number, websocket, process)  # before any await
        try:
            await websocket.prepare(request)
        except BaseException:  # not a websocket request
            del self.viewers[number]
            raise
        why = "page closed"
        try:
            self.log(f"viewer {number} opened ({len(self.viewers)} of at most {self.max_viewers})")
            await process.start(
                clamp(request.query.get("width"), 80, 10, 1000),
                clamp(request.query.get("height"), 24, 5, 500),
            )
            why = await self.relay(websocket, process)
        except asyncio.CancelledError:
            why = "server stopped"
            raise
        finally:
            code = await process.end()
            del self.viewers[number]
            if not websocket.closed:
                await websocket.close()
            self.log(f"viewer {number} closed: {why} (its dashboard exited with {code})")
        return websocket

    async def relay(self, websocket: web.WebSocketResponse, process: ViewerProcess) -> str:
        """Pass the page's messages to its process until the page closes (or idles, or its
        process ends); returns why it stopped."""
        loop = asyncio.get_running_loop()
        last_input = loop.time()
        while True:
            left = self.idle_timeout - (loop.time() - last_input)
            if left <= 0:
                await websocket.close(code=WSCloseCode.GOING_AWAY, message=b"idle")
                return f"no input for {self.idle_timeout:g}s"
            try:
                message = await websocket.receive(timeout=left)
            except TimeoutError:
                continue
            if message.type in (
                WSMsgType.CLOSE,
                WSMsgType.CLOSING,
                WSMsgType.CLOSED,
                WSMsgType.ERROR,
            ):
                return (
                    "server stopped"
                    if self.stopping
                    else "dashboard exited"
                    if process_ended(process)
                    else "page closed"
                )
            if message.type != WSMsgType.TEXT:
                continue
            try:
                kind, *payload = json.loads(message.data)
            except (ValueError, TypeError):
                continue  # not the page's protocol: ignored
            if kind == "stdin" and payload and isinstance(payload[0], str):
                last_input = loop.time()
                await process.send_bytes(payload[0].encode("utf-8"))
            elif kind == "resize" and payload and isinstance(payload[0], dict):
                last_input = loop.time()
                await process.set_terminal_size(
                    clamp(payload[0].get("width"), 80, 10, 1000),
                    clamp(payload[0].get("height"), 24, 5, 500),
                )
            elif kind == "ping" and payload:
                await websocket.send_json(["pong", payload[0]])
            elif kind == "focus":
                await process.focus()
            elif kind == "blur":
                await process.blur()


def process_ended(process: ViewerProcess) -> bool:
    return process.process is not None and process.process.returncode is not None


def clamp(value: object, default: int, low: int, high: int) -> int:
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default
    return max(low, min(high, number))


#: The page: textual-serve's client (static/js/textual.js) in a terminal element that fills
#: the window, the font from the package, and the two dialogs the client toggles.
INDEX_PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<title>{title}</title>
<script>history.replaceState(null, "", {page_path});</script>
<link rel="stylesheet" href="static/css/xterm.css">
<script src="static/js/textual.js"></script>
<style>
@font-face {{ font-family: "Roboto Mono"; font-style: normal;
  src: url("static/fonts/RobotoMono-VariableFont_wght.ttf") format("truetype"); }}
@font-face {{ font-family: "Roboto Mono"; font-style: italic;
  src: url("static/fonts/RobotoMono-Italic-VariableFont_wght.ttf") format("truetype"); }}
body {{ background: #0c181f; margin: 0; }}
.dialog {{ position: absolute; inset: 0; display: flex; align-items: center;
  justify-content: center; z-index: 10; color: #eee;
  font-family: "Roboto Mono", monospace; }}
.dialog button {{ padding: 12px 28px; margin: 16px; background: #5e0ba7; color: #fff;
  border: none; font-family: inherit; cursor: pointer; }}
body.-first-byte .starting {{ display: none; }}
.textual-terminal {{ opacity: 0; }}
body.-first-byte .textual-terminal {{ opacity: 1; }}
.closed {{ display: none; }}
body.-closed .closed {{ display: flex; flex-direction: column; background: #0c181f; }}
#start {{ display: none; }}
.back {{ color: #c9a0ff; }}
</style>
</head>
<body>
<div class="dialog starting">{title}: starting the dashboard…<button id="start"
  type="button" onclick="location.reload()">Start</button></div>
<div class="dialog closed"><div>Session ended.</div>
  <button type="button" onclick="location.reload()">Open again</button>{back}</div>
<div id="terminal" class="textual-terminal" data-session-websocket-url="{websocket_url}"
  data-font-size="{font_size}"></div>
</body>
</html>
"""


#: On a run's page, when the store holds several: back to the list (the cookie carries the
#: token).
BACK_LINK = '<a class="back" href="/">All runs</a>'

#: The list of runs shown first when the store holds several and no RUN was named.
PICKER_PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{refresh}">
<title>{title}</title>
<script>history.replaceState(null, "", location.pathname);</script>
<style>
@font-face {{ font-family: "Roboto Mono"; font-style: normal;
  src: url("static/fonts/RobotoMono-VariableFont_wght.ttf") format("truetype"); }}
body {{ background: #0c181f; color: #eee; font-family: "Roboto Mono", monospace;
  margin: 2em; }}
a {{ color: #c9a0ff; }}
th, td {{ text-align: left; padding: 4px 16px 4px 0; }}
th {{ color: #999; font-weight: normal; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p>{count} runs in the store, newest first; open one to watch its dashboard. This list
updates every {refresh} s.</p>
<table>
<tr>{head}</tr>
{rows}
</table>
</body>
</html>
"""
