"""A Tinker service double: the real `tinker` SDK talks to it over HTTP, and it really trains.

Point the SDK at it with `TINKER_BASE_URL=double.base_url` and `TINKER_API_KEY=API_KEY`.
It speaks the wire protocol of SDK 0.38 (read from the SDK's source; see `app` for the
endpoints) and runs every model on the embedded local backend (`tinker_tui.engine.local`), so
a run through it learns like a local run. Faults (`faults.Faults`) make it slow, failing,
stuck or silent, per endpoint. `served_models` ({hub name: folder}) serves hub names from
local model folders (`service.ServedModels`).

In a test: `with TinkerDouble(tmp_path) as double: ...` serves on 127.0.0.1 from a thread of
the test process (its state, `double.service`, can be read directly). `python -m
tinker_double --port N` (with tests/ on the path) serves from a process of its own.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from .faults import Burst, Faults
from .service import DoubleService

#: The key the double accepts (the SDK requires the `tml-` form).
API_KEY = "tml-tinker-double-test-key"

__all__ = ["API_KEY", "Burst", "Faults", "TinkerDouble"]


class TinkerDouble:
    """The double served by uvicorn on a thread (its own event loop)."""

    def __init__(
        self,
        checkpoint_dir: Path,
        *,
        faults: Faults | None = None,
        api_key: str = API_KEY,
        hold: float = 1.0,
        port: int = 0,
        served_models: Mapping[str, str | Path] | None = None,
        clock_cycle: float = 0.0,
        only_served: bool = False,
    ) -> None:
        self.service = DoubleService(
            Path(checkpoint_dir),
            faults,
            served_models,
            clock_cycle=clock_cycle,
            only_served=only_served,
        )
        self.api_key = api_key
        self.hold = hold
        self._port = port
        self._server: object | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    @property
    def faults(self) -> Faults:
        return self.service.faults

    @faults.setter
    def faults(self, faults: Faults) -> None:
        self.service.faults = faults

    def env(self) -> dict[str, str]:
        """The environment that points the tinker SDK (and tinker-tui) at this double."""
        return {"TINKER_BASE_URL": self.base_url, "TINKER_API_KEY": self.api_key}

    def start(self) -> TinkerDouble:
        import uvicorn

        from .app import create_app

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self._port))
        port = sock.getsockname()[1]
        # Idle connections are kept a long time, as a service behind a load balancer keeps
        # them: uvicorn's 5 s default closes them while the SDK sends on them (a WriteError
        # it retries, shown to the user as a failure the service never had).
        config = uvicorn.Config(
            create_app(self.service, api_key=self.api_key, hold=self.hold),
            log_level="warning",
            access_log=False,
            timeout_keep_alive=120,
            timeout_graceful_shutdown=1,
            lifespan="off",
        )
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="tinker-double", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the Tinker double did not start")
            time.sleep(0.01)
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.config.app.state.release_hung()  # type: ignore[attr-defined]
            self._server.should_exit = True  # type: ignore[attr-defined]
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> TinkerDouble:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
