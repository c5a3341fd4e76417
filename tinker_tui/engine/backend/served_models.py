"""Before a Tinker run starts: does the service serve its base model?

Tinker retires models (its model-deprecations page: Qwen3's 30B siblings went on
2026-06-12, for Qwen3.5/3.6). A run on a retired or mistyped name would otherwise load its
task and start a session before the service refuses the training client. The service lists
what it serves (`RestClient.get_server_capabilities`), so the run asks first and stops in
seconds with one line naming what is served, and the closest name.

The question is bounded (`PREFLIGHT_WAIT`): the SDK retries a service that does not answer
for minutes, and that case is the run's own to report (its waits, `backend_unreachable_after`),
so a service that has not answered in time is not judged here. The call runs on a daemon
thread, left behind if it outlasts the wait (`engine.backend.blocking` says why).
"""

from __future__ import annotations

import threading

from tinker_tui.engine.backend.choice import BackendError
from tinker_tui.engine.did_you_mean import did_you_mean

#: Seconds the service has to say what it serves before the run starts without knowing.
PREFLIGHT_WAIT = 5.0


def served_model_names(wait: float = PREFLIGHT_WAIT) -> list[str] | None:
    """The models the service (TINKER_BASE_URL, TINKER_API_KEY) lists, through the SDK;
    None when it did not answer within `wait` seconds or the answer failed."""
    answer: list[list[str]] = []
    done = threading.Event()

    def ask() -> None:
        try:
            from tinker_tui.engine.backend.choice import rest_client

            capabilities = rest_client().get_server_capabilities().result()
            answer.append([m.model_name for m in capabilities.supported_models if m.model_name])
        except Exception:  # not judged here: the run reports a failing service its own way
            pass
        finally:
            done.set()

    threading.Thread(target=ask, name="tinker-served-models", daemon=True).start()
    done.wait(wait)
    return answer[0] if answer else None


def not_served_problem(base_model: str, served: list[str]) -> str | None:
    """The one line for a base model the service does not list (None if it does, or if
    it lists nothing to compare with)."""
    if not served or base_model in served:
        return None
    return (
        f"{base_model} is not served; served: {', '.join(sorted(served))}"
        f"{did_you_mean(base_model, served)}"
    )


def check_served(base_model: str, wait: float = PREFLIGHT_WAIT) -> None:
    """BackendError (exit 2, one line) when the service answers without `base_model`."""
    served = served_model_names(wait)
    problem = not_served_problem(base_model, served or [])
    if problem is not None:
        raise BackendError(problem)
