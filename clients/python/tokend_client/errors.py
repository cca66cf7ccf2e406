"""tokend's Varlink errors as Python exceptions, one class per error name."""
from typing import Any, Dict, Optional, Type


class TokendError(Exception):
    """An error answer from tokend; `name` is the Varlink error, `parameters` its members."""

    def __init__(self, name: str, parameters: Optional[Dict[str, Any]] = None) -> None:
        self.name = name
        self.parameters = parameters or {}
        detail = self.parameters.get("reason") or ", ".join(f"{k}={v}" for k, v in self.parameters.items())
        super().__init__(f"{name}: {detail}" if detail else name)


class Unreachable(TokendError):
    """No tokend at the socket, or the connection broke."""


class NoSuchSession(TokendError):
    pass


class LoginRequired(TokendError):
    pass


class UpstreamUnavailable(TokendError):
    """The token endpoint cannot be reached and no valid token is cached, or the refresh asked for
    brought no token newer than the caller's; retry after `retry_after`."""

    @property
    def retry_after(self) -> Optional[int]:
        return self.parameters.get("retryAfter")


class StoreUnavailable(UpstreamUnavailable):
    """A fleet session's shared store cannot be reached and no valid token is cached."""


class RateLimited(TokendError):
    @property
    def retry_after(self) -> int:
        return int(self.parameters.get("retryAfter", 1))


class PermissionDenied(TokendError):
    pass


class TooManyConnections(TokendError):
    pass


_BY_NAME: Dict[str, Type[TokendError]] = {
    "io.tokend.Broker.NoSuchSession": NoSuchSession,
    "io.tokend.Broker.LoginRequired": LoginRequired,
    "io.tokend.Broker.UpstreamUnavailable": UpstreamUnavailable,
    "io.tokend.Broker.StoreUnavailable": StoreUnavailable,
    "io.tokend.Broker.RateLimited": RateLimited,
    "io.tokend.Broker.TooManyConnections": TooManyConnections,
    "org.varlink.service.PermissionDenied": PermissionDenied,
}


def error_for(name: str, parameters: Optional[Dict[str, Any]]) -> TokendError:
    return _BY_NAME.get(name, TokendError)(name, parameters)
