"""Every use the engine makes of the Tinker SDK's private names, in one module.

The SDK is pinned (pyproject.toml). The engine needs three things it does not expose: the
base URL a `ServiceClient` was given (to say where the service is, as the SDK resolves it),
the logger its HTTP client logs retries and failed requests under (the module
`tinker._base_client`: `engine.backend.sdk_watch` reads it to show why a run waits), and a
REST client that does not wait on another's (`rest_client_of_its_own`). Each private name
is in `PRIVATE_NAMES`, each private parameter in `PRIVATE_PARAMETERS`; the suite checks the
installed SDK still has every one (tests/test_private_names.py) and that no other module
reaches into the SDK's privates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tinker

#: (owner, name): the private names used below.
PRIVATE_NAMES = (
    ("tinker.ServiceClient", "_base_url"),
    ("tinker._base_client", "log"),
    ("tinker.ServiceClient", "_session_holder"),
    ("tinker.lib.internal_client_holder.InternalClientHolder", "_session_id"),
)
#: (callable, parameter): the private parameters passed below.
PRIVATE_PARAMETERS = (
    ("tinker.lib.internal_client_holder.InternalClientHolder", "_skip_session"),
    ("tinker.RestClient", "_holder"),
)

#: The logger of the SDK's HTTP client (its module's `log`, named after the module).
CLIENT_LOGGER = "tinker._base_client"


def given_base_url(service_client: object) -> str | None:
    """The base URL `service_client` was made with (None: TINKER_BASE_URL or production)."""
    url = getattr(service_client, "_base_url", None)
    return url if isinstance(url, str) else None


def rest_client_of_its_own(base_url: str, api_key: str | None) -> tinker.RestClient:
    """A `tinker.RestClient` over connections of its own, for `base_url` and `api_key`.

    `tinker.RestClient(base_url=..., api_key=...)` shares a process-wide holder per service,
    made under one lock that stays held while the new holder fetches the service's config,
    which the SDK retries for minutes. One question to a service that does not answer (a
    preflight the run gave up on) would then hold every later REST client in the process,
    for any service. A holder of its own is made without that lock; it costs one config
    fetch per client, and the engine makes a few per run."""
    import tinker
    from tinker.lib.internal_client_holder import InternalClientHolder

    holder = InternalClientHolder(base_url=base_url, api_key=api_key, _skip_session=True)
    return tinker.RestClient(_holder=holder)


def session_id(service_client: object) -> str:
    """The SDK session's id, which the service bills by (no public accessor in 0.38);
    "" when it is not at hand."""
    holder = getattr(service_client, "_session_holder", None)
    session = getattr(holder, "_session_id", None)
    return session if isinstance(session, str) else ""
