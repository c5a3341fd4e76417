"""`tinker-tui serve [RUN]`: the dashboard of a run as a web page (see `app.web_serve`).

RUN is a run id, a unique prefix of one, or omitted: then a store of one run serves it, and
a store of several first shows a list of its runs (newest first, as `tinker-tui runs`) whose
links open each one's dashboard. A
running run (one with a control endpoint) is followed and can be steered from the page
unless `--read-only`; a finished run is shown. Each open page is its own dashboard process.

Safe by default: bound to 127.0.0.1 (reach it from elsewhere with an SSH port-forward), and
the printed address carries a random token without which nothing is served. Another
`--host` prints a warning: plain HTTP, anyone on that network who learns the token steers
the run.

Exit codes: 0 stopped with Ctrl+C (or SIGTERM, SIGHUP): serving has no run to stop; 2 no such run, a bad host, a port in use.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import secrets
import socket
import sys
from pathlib import Path
from typing import Any

from tinker_tui.app.commands.common import add_db_option, store_path
from tinker_tui.app.interrupts import EXIT_OK, release_signals, take_signals
from tinker_tui.engine.errors import UsageError

DEFAULT_PORT = 8000
DEFAULT_MAX_VIEWERS = 4
DEFAULT_IDLE_TIMEOUT = 3600.0  # seconds without input from a page before it is closed


def add_parser(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve a run's dashboard as a web page",
        description="Serve the dashboard of a run as a web page, on 127.0.0.1 behind a "
        "random token (in the printed address). From another machine: "
        f"ssh -L {DEFAULT_PORT}:127.0.0.1:{DEFAULT_PORT} HOST, then open the "
        "address there.",
    )
    serve.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help="run id or a unique prefix of one (default: a list of the "
        "store's runs to pick from, or its only run)",
    )
    add_db_option(serve)
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; another one is "
        "reachable by others on the network: a warning says so)",
    )
    serve.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    serve.add_argument(
        "--read-only",
        action="store_true",
        help="pages only watch: pause, checkpoint, eval, knobs and stop are disabled",
    )
    serve.add_argument(
        "--max-viewers",
        type=int,
        default=DEFAULT_MAX_VIEWERS,
        metavar="N",
        help=f"pages open at once, each a dashboard process (default {DEFAULT_MAX_VIEWERS})",
    )
    serve.add_argument(
        "--idle-timeout",
        type=float,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help="close a page after this long without a key, mouse or resize "
        f"from it (default {DEFAULT_IDLE_TIMEOUT:g})",
    )


def check_limits(args: argparse.Namespace) -> None:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, not {args.port}")
    if args.max_viewers < 1:
        raise UsageError(f"--max-viewers must be at least 1, not {args.max_viewers}")
    if not args.idle_timeout > 0:
        raise UsageError(f"--idle-timeout must be more than 0 seconds, not {args.idle_timeout:g}")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; UsageError (one line) for a bad host or a busy port."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise UsageError(f"--host {host!r} is not an address of this machine ({exc})") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {host} is in use; pick another with --port (0 picks a free one)"
            ) from None
        raise UsageError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def is_loopback(sock: socket.socket) -> bool:
    try:
        return ipaddress.ip_address(sock.getsockname()[0].split("%")[0]).is_loopback
    except ValueError:
        return False


def page_address(sock: socket.socket, host: str, token: str) -> str:
    bound, port = sock.getsockname()[:2]
    shown = (
        host
        if not ipaddress.ip_address(bound.split("%")[0]).is_unspecified
        else socket.gethostname()
    )
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/?token={token}"


def viewer_argv(db_path: Path, run_id: str, read_only: bool) -> list[str]:
    argv = [sys.executable, "-m", "tinker_tui.app.web_viewer", run_id, "--db", str(db_path)]
    return argv + (["--read-only"] if read_only else [])


async def serve(server: Any, sock: socket.socket) -> None:
    """Serve until SIGINT, SIGTERM or SIGHUP (the signals every command takes: not one the
    process was started ignoring), then close every page and its process."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    taken = take_signals(loop, lambda signum: stop.set())
    await server.start(sock)
    try:
        await stop.wait()
    finally:
        print("stopping: closing the pages", file=sys.stderr, flush=True)
        try:
            await server.close()
        finally:
            release_signals(loop, taken)


def main(args: argparse.Namespace) -> int:
    from tinker_tui.app.commands.runs import read_table
    from tinker_tui.engine.store import find_run

    check_limits(args)
    db_path = store_path(args)
    run = asyncio.run(find_run(db_path, args.run))
    several = args.run is None and len(asyncio.run(read_table(db_path))) > 1
    sock = bind(args.host, args.port)
    from tinker_tui.app.web_serve import WebServer

    token = secrets.token_urlsafe(24)
    picker: dict[str, Any] = {}
    if args.run is None:  # the page lists the store's runs while it holds several
        picker = {
            "list_runs": lambda: read_table(db_path),
            "run_argv": lambda run_id: viewer_argv(db_path, run_id, args.read_only),
        }
    server = WebServer(
        viewer_argv(db_path, run.run_id, args.read_only),
        token=token,
        title="tinker-tui" if several else f"tinker-tui · {run.run_id}",
        max_viewers=args.max_viewers,
        idle_timeout=args.idle_timeout,
        **picker,
    )
    mode = "read-only" if args.read_only else "watch and steer"
    what = f"the runs of {db_path}" if several else f"run {run.run_id}"
    print(f"serving {what} ({mode}) at {page_address(sock, args.host, token)}", flush=True)
    if not is_loopback(sock):
        print(
            f"warning: listening on {args.host}, not 127.0.0.1: anyone who can reach it "
            "and learns the token can watch"
            + ("" if args.read_only else " and steer")
            + " this run, and plain HTTP shows the token to the network; prefer the "
            "default with an SSH port-forward",
            file=sys.stderr,
            flush=True,
        )
    else:
        bound, port = sock.getsockname()[:2]
        target = f"[{bound}]" if ":" in bound else bound
        print(
            f"from another machine: ssh -L {port}:{target}:{port} THIS_HOST, then open "
            "the address there; Ctrl+C stops serving (not the run)",
            flush=True,
        )
    try:
        asyncio.run(serve(server, sock))
    finally:
        sock.close()
    return EXIT_OK
