"""Download a Tinker checkpoint as Hugging Face files (`export-model` on a Tinker run).

SDK 0.38 has no ``get_checkpoint_archive_url_from_tinker_path`` (the one-archive download of
older SDKs); its way, which its own ``tinker checkpoint download`` takes, is: load the
checkpoint into a training client, save it as *external weights* (Hugging Face format,
`save_weights_external`), fetch one signed URL per file (`get_external_weights_urls`),
download them, and delete the temporary external checkpoint. The same steps here, blocking:
call it from a command, not from the engine's loop.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import tinker

#: How long the temporary external checkpoint lives if the delete fails (the SDK's least).
TEMPORARY_TTL_SECONDS = 3600


def download(path: str, out: Path) -> list[str]:
    """The files of checkpoint `path` (``tinker://.../weights/...``), written into `out`
    (which exists); their names."""
    import tinker

    service = tinker.ServiceClient()
    status: Literal["success", "errored"] = "errored"
    try:
        written = _download(service, path, out)
        status = "success"
        return written
    finally:
        service.close(status).result()  # ends the session and its heartbeats


def _download(service: tinker.ServiceClient, path: str, out: Path) -> list[str]:
    from tinker_tui.engine.backend.choice import rest_client

    rest = rest_client()
    training = service.create_training_client_from_state(path).result()
    name = f"export-{time.time_ns()}"
    external = training.save_weights_external(name, ttl_seconds=TEMPORARY_TTL_SECONDS).result()
    written: list[str] = []
    try:
        urls = rest.get_external_weights_urls(external.path).result().urls
        base = out.resolve()
        for file_name, url in sorted(urls.items()):
            target = (out / file_name).resolve()
            if not target.is_relative_to(base):
                raise ValueError(f"the service named an unsafe file path: {file_name!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            with urllib.request.urlopen(url, timeout=120) as response:
                target.write_bytes(response.read())
            written.append(file_name)
    finally:
        rest.delete_checkpoint_from_tinker_path(external.path).result()
    return written
