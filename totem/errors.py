"""Errors that reach API clients, and the one shape of every JSON error body.

Handlers raise these; the server turns them into responses. Nothing else builds an error body:
`error_body()` is the only place that knows the `$.invalid` shape
(`[{"name": field, "error": reason}]`).
"""

from __future__ import annotations

import json


class ApiError(Exception):
    """An answer other than success: an HTTP status and a list of (field, reason) pairs."""

    status = 400

    def __init__(self, errors, status: int | None = None, headers: dict[str, str] | None = None):
        if isinstance(errors, str):
            errors = [("", errors)]
        elif isinstance(errors, tuple):
            errors = [errors]
        self.errors = list(errors)
        if status is not None:
            self.status = status
        self.headers = headers or {}
        super().__init__("; ".join(f"{name}: {error}" if name else error for name, error in self.errors))


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class MethodNotAllowed(ApiError):
    status = 405


class Conflict(ApiError):
    status = 409


class PayloadTooLarge(ApiError):
    status = 413


class UnsupportedMediaType(ApiError):
    status = 415


class TooManyRequests(ApiError):
    status = 429


def error_body(errors) -> bytes:
    """The JSON body of an error answer: `[{"name": field, "error": reason}, ...]`."""
    return json.dumps([{"name": name, "error": error} for name, error in errors]).encode()
