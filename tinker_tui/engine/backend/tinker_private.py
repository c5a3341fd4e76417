"""Every use the engine makes of the Tinker SDK's private names, in one module.

The SDK is pinned (pyproject.toml). The engine needs two things it does not expose: the
base URL a `ServiceClient` was given (to say where the service is, as the SDK resolves it),
and the logger its HTTP client logs retries and failed requests under (the module
`tinker._base_client`: `engine.backend.sdk_watch` reads it to show why a run waits). Each private
name is in `PRIVATE_NAMES`; the suite checks the installed SDK still has every one
(tests/test_private_names.py) and that no other module reaches into the SDK's privates.
"""

from __future__ import annotations

#: (owner, name): the private names used below.
PRIVATE_NAMES = (
    ("tinker.ServiceClient", "_base_url"),
    ("tinker._base_client", "log"),
    ("tinker.ServiceClient", "_session_holder"),
    ("tinker.lib.internal_client_holder.InternalClientHolder", "_session_id"),
)

#: The logger of the SDK's HTTP client (its module's `log`, named after the module).
CLIENT_LOGGER = "tinker._base_client"


def given_base_url(service_client: object) -> str | None:
    """The base URL `service_client` was made with (None: TINKER_BASE_URL or production)."""
    url = getattr(service_client, "_base_url", None)
    return url if isinstance(url, str) else None


def session_id(service_client: object) -> str:
    """The SDK session's id, which the service bills by (no public accessor in 0.38);
    "" when it is not at hand."""
    holder = getattr(service_client, "_session_holder", None)
    session = getattr(holder, "_session_id", None)
    return session if isinstance(session, str) else ""
