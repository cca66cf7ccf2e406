"""Ask tokend for access tokens over its Varlink socket (standard library only)."""
from .client import AsyncTokend, Tokend, default_socket
from .errors import (
    AddressRefused,
    DiscoveryFailed,
    InvalidParameter,
    LoginRequired,
    NoSuchSession,
    PermissionDenied,
    RateLimited,
    ResourceNotAllowed,
    ScopeNotAllowed,
    SessionExists,
    SessionRefused,
    StoreUnavailable,
    TargetRefused,
    TokendError,
    TooManyConnections,
    TooManySessions,
    Unreachable,
    UpstreamUnavailable,
)
from .values import AddedSession, Cookie, CookieSet, Event, KeyedToken, SessionStatus, Token

__all__ = [
    "AsyncTokend", "Tokend", "default_socket", "Token", "Cookie", "CookieSet", "Event", "KeyedToken",
    "SessionStatus", "TokendError", "InvalidParameter", "LoginRequired", "NoSuchSession", "PermissionDenied", "RateLimited",
    "ResourceNotAllowed", "ScopeNotAllowed", "StoreUnavailable", "TargetRefused", "TooManyConnections",
    "Unreachable", "UpstreamUnavailable", "AddedSession", "SessionExists", "SessionRefused", "TooManySessions",
    "DiscoveryFailed", "AddressRefused",
]
