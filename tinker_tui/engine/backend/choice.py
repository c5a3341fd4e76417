"""Which backend a run uses, and what that choice brings with it.

The backend seam is the Tinker client interface: the real `tinker.ServiceClient` talks to the
service; `tinker_tui.engine.local.LocalServiceClient` runs the same interface in-process on
torch. This module decides between them up front, from credentials only (trying the network
would hang for minutes while the SDK retries), builds the service client, and picks the
tinker-cookbook renderer that turns chat messages into tokens for a base model. The code above
the seam is `tinker_tui.engine.backend.session.BackendSession`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.engine.errors import UsageError

if TYPE_CHECKING:
    import tinker

    from tinker_tui.engine.backend.capabilities import ServiceClient


class BackendError(UsageError, RuntimeError):
    """A backend cannot be used as asked; the message tells the user what to do."""


#: Where `tinker auth login` stores keys (the SDK's default credentials file).
STORED_CREDENTIALS = Path("~/.tinker/credentials.json")


def tinker_credentials_present() -> bool:
    """Local-only check (never contacts the service): is a Tinker credential configured?

    Without a key in the environment and without the stored credentials file the answer
    is no at once; only when that file exists is the SDK (which imports torch) asked.
    """
    if os.environ.get("TINKER_API_KEY") or os.environ.get("TINKER_CREDENTIAL_CMD"):
        return True
    if not STORED_CREDENTIALS.expanduser().is_file():
        return False
    from tinker.auth import tinker_has_credentials

    return tinker_has_credentials()


def check_api_key_form() -> None:
    """A TINKER_API_KEY the SDK would refuse (it wants `tml-...`, or a JWT), refused now,
    not seconds later from inside the SDK."""
    key = os.environ.get("TINKER_API_KEY")
    if key and not key.startswith(("tml-", "eyJ")):
        raise BackendError(
            "TINKER_API_KEY is not a Tinker API key: keys start with 'tml-' (copy it again "
            "from the Tinker console, or unset TINKER_API_KEY to use TINKER_CREDENTIAL_CMD, "
            "`tinker auth login`, or --backend local)"
        )


def choose_backend(requested: str | None) -> str:
    """Decide up front between the real service and the local one, from credentials only.

    Trying the network instead would hang for minutes while the SDK retries.
    """
    if requested == "tinker":
        if not tinker_credentials_present():
            raise BackendError(
                "--backend tinker needs a Tinker API key: set TINKER_API_KEY (or "
                "TINKER_CREDENTIAL_CMD, or run `tinker auth login`), or use --backend local."
            )
        check_api_key_form()
        return "tinker"
    if requested == "local":
        return "local"
    if requested is None:
        if tinker_credentials_present():
            check_api_key_form()
            return "tinker"
        return "local"
    raise BackendError(f"unknown backend {requested!r}: use 'local' or 'tinker'")


def check_base_model(backend: str, base_model: str) -> None:
    """The embedded models exist only here: the Tinker service cannot serve them. A service
    at another address (TINKER_BASE_URL: a self-hosted or test service) may. The local
    backend loads an embedded model or a model folder; anything else is refused now, before
    the engine loads."""
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL

    embedded = base_model.startswith(DEFAULT_BASE_MODEL.split("/")[0] + "/")
    if backend == "tinker" and embedded and not os.environ.get("TINKER_BASE_URL"):
        raise BackendError(
            "the embedded base model runs only on the local backend; "
            "choose a Tinker base model for --backend tinker (--base-model NAME)"
        )
    if backend == "local":
        from tinker_tui.engine.local.base_model_names import base_model_problem

        problem = base_model_problem(base_model)
        if problem is not None:
            raise BackendError(problem)


def make_service_client(backend: str, checkpoint_dir: Path) -> ServiceClient:
    """The backend's service client. `tinker.ServiceClient()` builds no connection: its
    session is made on first use (see `engine.backend.blocking`)."""
    if backend == "tinker":
        import tinker

        return tinker.ServiceClient()
    from tinker_tui.engine.local import LocalServiceClient

    return LocalServiceClient(checkpoint_dir=checkpoint_dir)


def rest_client() -> tinker.RestClient:
    """A `tinker.RestClient` for the service and key the environment names now.

    Resolved now, not by the SDK: a bare `RestClient()` would reuse the process's first
    connections, still aimed at the service of its first run after TINKER_BASE_URL changed
    (a second run in the same process then waits minutes on a service that is gone). Its
    connections are its own (`tinker_private.rest_client_of_its_own` says why). Its
    constructor fetches the service's config: call it off the loop (`sdk_call`)."""
    from tinker.lib.base_url import resolve_base_url

    from tinker_tui.engine.backend.tinker_private import rest_client_of_its_own

    return rest_client_of_its_own(resolve_base_url(None), os.environ.get("TINKER_API_KEY") or None)


def is_tinker_sdk(service_client: object) -> bool:
    """Whether this is the real SDK's client (which talks to a service over HTTP)."""
    import tinker

    return isinstance(service_client, tinker.ServiceClient)


def backend_label(service_client: object) -> str:
    """How waits and errors name the backend."""
    return "Tinker" if is_tinker_sdk(service_client) else "local backend"


def service_address(service_client: object) -> str:
    """The URL the SDK talks to (its argument, else TINKER_BASE_URL, else production)."""
    from tinker.lib.base_url import resolve_base_url

    from tinker_tui.engine.backend.tinker_private import given_base_url

    return resolve_base_url(given_base_url(service_client))


async def context_length_of(backend: str, base_model: str) -> int | None:
    """The base model's context in tokens, as the backend states it: the local backend from the
    model itself (the embedded model's spec, a folder's config and tokenizer: what its sampler
    enforces), Tinker from its server capabilities (None when it does not list the model or
    gives no length). The policy server refuses longer prompts with this."""
    if backend == "local":
        from tinker_tui.engine.local.model import max_context_of

        return await asyncio.to_thread(max_context_of, base_model)

    from tinker_tui.engine.backend.blocking import sdk_call

    # The SDK's way: a RestClient, which needs no session (ServiceClient's method is deprecated).
    rest: tinker.RestClient = await sdk_call(rest_client)
    capabilities: tinker.types.GetServerCapabilitiesResponse = await rest.get_server_capabilities()
    for model in capabilities.supported_models:
        if model.model_name == base_model:
            return model.max_context_length
    return None


# ---------------------------------------------------------------------------- renderers
#: The renderer of the embedded model: its word-level tokenizer has no chat template.
LOCAL_RENDERER = "role_colon"


def renderer_name_for(base_model: str) -> str:
    """The tinker-cookbook renderer recommended for a base model (role_colon if unknown)."""
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL

    if base_model == DEFAULT_BASE_MODEL:
        return LOCAL_RENDERER
    from tinker_cookbook.model_info import get_recommended_renderer_names

    try:
        return get_recommended_renderer_names(base_model)[0]
    except Exception:
        return LOCAL_RENDERER


def renderer_name(base_model: str, requested: str | None = None) -> str:
    """The name of the renderer a session on `base_model` renders with, asked for
    `requested` (None: chosen from the model): the name `make_renderer` gives it at the
    session's start, known before one starts (what an evaluation's protocol is keyed by).
    A model folder's is decided by `make_renderer` itself, over the folder's own tokenizer
    (as the local backend loads it); a name or a hub model's needs no tokenizer."""
    if requested:
        return requested
    if is_model_folder(base_model):
        from tinker_tui.engine.local.model import get_tokenizer

        return make_renderer(base_model, get_tokenizer(base_model))[1]
    return renderer_name_for(base_model)


def is_model_folder(base_model: str) -> bool:
    """Whether `base_model` is a Hugging Face model folder on disk (not the embedded model)."""
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL

    return base_model != DEFAULT_BASE_MODEL and Path(base_model).expanduser().is_dir()


def make_renderer(
    base_model: str,
    tokenizer: Any,
    name: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> tuple[Any, str]:
    """The renderer for a policy and the name it is known by.

    An explicit `name` is any tinker-cookbook renderer. Otherwise: the embedded model uses
    role_colon; a base model that is a folder on disk (a local Hugging Face model) uses the
    cookbook's renderer for its family where that agrees with the folder's own chat
    template, else the template (`engine.rendering.folder_renderer`); a hub model name uses the
    cookbook's recommendation (Qwen3-4B-Instruct-2507 -> qwen3_instruct, Llama 3 -> llama3,
    gpt-oss -> gpt_oss_...).
    """
    if name:
        try:
            return cookbook_renderer(name, tokenizer), name
        except Exception as exc:
            raise BackendError(
                f"renderer {name!r} cannot be used with {base_model}: {exc}"
            ) from None
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL

    if is_model_folder(base_model):
        from tinker_tui.engine.rendering.folder_renderer import folder_renderer

        return folder_renderer(base_model, tokenizer, cookbook_renderer)
    chosen = renderer_name_for(base_model)
    if chosen == LOCAL_RENDERER and base_model != DEFAULT_BASE_MODEL and warn is not None:
        warn(
            f"no recommended renderer is known for {base_model}; using {LOCAL_RENDERER} "
            f"(pass --renderer to choose one)"
        )
    return cookbook_renderer(chosen, tokenizer), chosen


def cookbook_renderer(name: str, tokenizer: Any) -> Any:
    """`tinker_cookbook.renderers.get_renderer(name, tokenizer)`, except that `role_colon` is
    built directly: `get_renderer` first imports every renderer module, and with them
    transformers (about 2 s and 100 MB before the embedded model's first step). The pickle
    metadata it stamps on a renderer is stamped the same way (a test compares the two)."""
    if name == LOCAL_RENDERER:
        from tinker_cookbook.renderers.role_colon import RoleColonRenderer

        from tinker_tui.engine.rendering.cookbook_private import stamp_as_get_renderer_does

        renderer = RoleColonRenderer(tokenizer)
        stamp_as_get_renderer_does(renderer, name, tokenizer.name_or_path)
        return renderer
    from tinker_cookbook.renderers import get_renderer

    return get_renderer(name, tokenizer)
