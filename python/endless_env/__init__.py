"""Python clients for `endless serve`: environments for terminal agents over HTTP."""

from .client import Client, EndlessError, Session

__all__ = ["Client", "EndlessError", "Session"]
__version__ = "0.1.0"
