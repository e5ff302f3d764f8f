"""Python clients for `endless serve`: environments for terminal agents over HTTP."""

from typing import Any

from .client import (AuthError, BadRequest, Client, Conflict, EndlessError, KeyReused, Node, NodeLost, NotFound,
                     Retry, ServerBusy, ServerError, ServerUnavailable, Session, SessionGone, Unreachable)

# `endless_env.ray` and `endless_env.pool` (Ray) are imported by those who use them.
__all__ = ["AsyncClient", "AuthError", "BadRequest", "Client", "Conflict", "EndlessError", "KeyReused", "Node",
           "NodeLost", "NotFound", "Retry", "ServerBusy", "ServerError", "ServerUnavailable", "Session",
           "SessionGone", "Unreachable"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # httpx is imported only by those who use the async client.
    if name == "AsyncClient":
        from .aclient import AsyncClient

        return AsyncClient
    raise AttributeError(f"module 'endless_env' has no attribute {name!r}")
