"""The local clients against the installed tinker SDK, by inspection: same public methods, same
parameters (names, kinds, defaults). When tinker is upgraded, drift shows up here: a new or
changed SDK method fails until the local backend follows (or lists it as not offered)."""

from __future__ import annotations

import inspect

import pytest
import tinker

from tinker_tui.engine.local import LocalSamplingClient, LocalServiceClient, LocalTrainingClient

# SDK methods the local backend deliberately does not offer, and why.
NOT_OFFERED = {
    "ServiceClient": {
        "copy_weights": "copies checkpoints between Tinker accounts",
        "create_custom_loss": "uploads a loss to the service (use forward_backward_custom)",
        "create_rest_client": "REST API of the service",
        "get_console_url": "web console of the service",
        "holder": "connection internals",
    },
    "TrainingClient": {
        "get_console_url": "web console of the service",
        "save_weights_external": "encrypted export from the service",
        "save_weights_external_async": "encrypted export from the service",
    },
    "SamplingClient": {
        "create": "connection internals (use ServiceClient.create_sampling_client)",
        "from_sampler_handle": "handles address samplers of the service",
        "get_sampler_handle": "handles address samplers of the service",
        "on_queue_state_change": "queue callbacks of the service",
    },
}
# Constructors differ by nature (the SDK's take a connection holder); the service client's
# must accept the SDK's arguments and may add keyword-only ones (checkpoint_dir).
SKIP = {"__init__", "__reduce__", "__enter__", "__exit__"}
PAIRS = [
    (tinker.ServiceClient, LocalServiceClient),
    (tinker.TrainingClient, LocalTrainingClient),
    (tinker.SamplingClient, LocalSamplingClient),
]


def public_members(cls: type) -> dict[str, object]:
    members = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        members[name] = inspect.getattr_static(cls, name)
    return members


def parameters(fn: object) -> list[tuple[str, object, object]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize(("sdk", "local"), PAIRS, ids=lambda c: c.__name__)
def test_same_public_methods_and_parameters(sdk: type, local: type):
    not_offered = NOT_OFFERED[sdk.__name__]
    ours = public_members(local)
    problems = []
    for name, member in public_members(sdk).items():
        if name in not_offered:
            continue
        if name not in ours:
            problems.append(f"{sdk.__name__}.{name} is missing locally")
            continue
        if isinstance(member, property):
            continue
        sdk_fn, our_fn = getattr(sdk, name), getattr(local, name)
        if parameters(sdk_fn) != parameters(our_fn):
            problems.append(
                f"{sdk.__name__}.{name}: SDK {inspect.signature(sdk_fn)} vs local "
                f"{inspect.signature(our_fn)}"
            )
        # The SDK wraps its deprecated *_async methods; compare what is underneath.
        if inspect.iscoroutinefunction(inspect.unwrap(sdk_fn)) != inspect.iscoroutinefunction(
            inspect.unwrap(our_fn)
        ):
            problems.append(f"{sdk.__name__}.{name}: async-ness differs")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("sdk", "local"), PAIRS, ids=lambda c: c.__name__)
def test_not_offered_list_is_current(sdk: type, local: type):
    """Every name listed as not offered still exists in the SDK (else remove it here)."""
    stale = [n for n in NOT_OFFERED[sdk.__name__] if n not in public_members(sdk)]
    assert not stale, f"no longer in the SDK's {sdk.__name__}: {stale}"


def test_service_client_constructor_accepts_the_sdk_arguments():
    sdk = parameters(tinker.ServiceClient.__init__)
    ours = parameters(LocalServiceClient.__init__)
    extra = [p for p in ours if p not in sdk]
    assert [p for p in ours if p in sdk] == sdk
    assert all(kind == inspect.Parameter.KEYWORD_ONLY for _, kind, _ in extra)
    for dunder in ("__enter__", "__exit__"):
        assert parameters(getattr(tinker.ServiceClient, dunder)) == parameters(
            getattr(LocalServiceClient, dunder)
        )


def test_sampling_client_pickle_hook_exists():
    # The SDK pickles via __reduce__; ours via __getstate__/__setstate__ (tested in sampling).
    assert hasattr(LocalSamplingClient, "__getstate__")
    assert hasattr(LocalSamplingClient, "__setstate__")
