"""Errors of the local backend, as the tinker SDK's own exception classes.

Engine code catches `tinker.BadRequestError` / `tinker.NotFoundError` (or `tinker.TinkerError`)
for the real service; raising the same classes here keeps that code identical for both
backends. Each class also derives from the matching builtin (`ValueError`,
`FileNotFoundError`, `FileExistsError`), so plain Python callers can catch them too. The SDK classes want an
HTTP response, so a synthetic one (``local://`` URL) is attached.
"""

from __future__ import annotations

import httpx
import tinker


def _response(status: int, what: str) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("POST", f"http://local.invalid/{what}"))


class LocalBadRequestError(tinker.BadRequestError, ValueError):
    """HTTP-400 equivalent: the request itself is wrong (bad loss inputs, unknown model...)."""


class LocalNotFoundError(tinker.NotFoundError, FileNotFoundError):
    """HTTP-404 equivalent: a checkpoint path that does not exist or cannot be read."""


class LocalConflictError(tinker.ConflictError, FileExistsError):
    """HTTP-409 equivalent: a checkpoint of that name exists and overwrite was not asked."""


def bad_request(message: str, what: str = "request") -> LocalBadRequestError:
    return LocalBadRequestError(message, response=_response(400, what), body=None)


def not_found(message: str, what: str = "checkpoint") -> LocalNotFoundError:
    return LocalNotFoundError(message, response=_response(404, what), body=None)


def conflict(message: str, what: str = "checkpoint") -> LocalConflictError:
    return LocalConflictError(message, response=_response(409, what), body=None)


POISONED_MESSAGE = (
    "A previous request failed; this TrainingClient is poisoned and cannot accept further requests."
)
