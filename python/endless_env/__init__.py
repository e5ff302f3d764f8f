"""Python clients for `endless serve`: environments for terminal agents over HTTP."""

from typing import Any

from .client import (AuthError, BadRequest, Client, Conflict, EndlessError, KeyReused, NotFound, Retry,
                     ServerBusy, ServerError, ServerUnavailable, Session, SessionGone, Unreachable)

__all__ = ["AsyncClient", "AuthError", "BadRequest", "Client", "Conflict", "EndlessError", "KeyReused",
           "NotFound", "Retry", "ServerBusy", "ServerError", "ServerUnavailable", "Session", "SessionGone",
           "Unreachable"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # httpx is imported only by those who use the async client.
    if name == "AsyncClient":
        from .aclient import AsyncClient

        return AsyncClient
    raise AttributeError(f"module 'endless_env' has no attribute {name!r}")
