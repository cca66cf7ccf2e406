"""Ask tokend for access tokens over its Varlink socket (standard library only)."""
from .client import AsyncTokend, Tokend, default_socket
from .errors import (
    LoginRequired,
    NoSuchSession,
    PermissionDenied,
    RateLimited,
    StoreUnavailable,
    TokendError,
    TooManyConnections,
    Unreachable,
    UpstreamUnavailable,
)
from .values import Cookie, CookieSet, Event, Token

__all__ = [
    "AsyncTokend", "Tokend", "default_socket", "Token", "Cookie", "CookieSet", "Event", "TokendError",
    "LoginRequired", "NoSuchSession", "PermissionDenied", "RateLimited", "StoreUnavailable", "TooManyConnections",
    "Unreachable", "UpstreamUnavailable",
]
