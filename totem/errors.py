"""Errors that reach API clients, and the one shape of every JSON error body.

Handlers raise these; the server turns them into responses. Nothing else builds an error body:
`error_body()` is the only place that knows the `$.invalid` shape
(`[{"name": field, "error": reason}]`).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3


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


class StorageFull(ApiError):
    """A write that failed for want of space (sqlite's "database or disk is full", ENOSPC or
    EDQUOT): 507, naming the folder and what is left there. Nothing was changed by it."""

    status = 507

    def __init__(self, folder: str):
        self.folder = folder
        super().__init__(("storage", f"the disk is full: {folder} has {_size(free_bytes(folder))} free; "
                                     "free some space, then try again"))


def out_of_space(exc: BaseException) -> bool:
    """Whether an error is a write that failed for want of space."""
    if isinstance(exc, StorageFull):
        return True
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc)
    return False


def free_bytes(folder: str) -> int | None:
    """The bytes an unprivileged process may still write in the file system of `folder`."""
    path = folder
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path or "/").free
    except OSError:
        return None


def _size(count: int | None) -> str:
    if count is None:
        return "an unknown amount"
    if count < 1024:
        return f"{count} B"
    value = count / 1024
    for unit in ("KB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def error_body(errors) -> bytes:
    """The JSON body of an error answer: `[{"name": field, "error": reason}, ...]`."""
    return json.dumps([{"name": name, "error": error} for name, error in errors]).encode()
