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


class ResourceNotAllowed(TokendError):
    """The resource is not one of the session's (`resources` in tokend.toml), or this user may not have
    tokens for it (`resource-access`); tokend asked no one."""

    @property
    def resource(self) -> str:
        return str(self.parameters.get("resource", ""))


class ScopeNotAllowed(TokendError):
    """The scope asks for more than the session's; tokend asked no one."""

    @property
    def scope(self) -> str:
        return str(self.parameters.get("scope", ""))


class TargetRefused(TokendError):
    """The provider would not issue a token for this (resource, scope) (invalid_target, invalid_scope);
    the session and its other keys are unaffected."""

    @property
    def resource(self) -> Optional[str]:
        return self.parameters.get("resource")

    @property
    def scope(self) -> Optional[str]:
        return self.parameters.get("scope")


class InvalidParameter(TokendError):
    """tokend refused the parameter `parameter`; `reason`, where given, says why. For GetProof's url: the
    URL is not one the session allows proofs for (its resources, its provider's userinfo endpoint, or
    `proof-targets` in tokend.toml, hosts written as listed), or it is one of the provider's own endpoints."""

    @property
    def parameter(self) -> str:
        return str(self.parameters.get("parameter", ""))


class SessionExists(TokendError):
    """AddSession: the caller already has a session of that name (`session`: its full name, USER/NAME)."""


class SessionRefused(TokendError):
    """AddSession: this user may not add sessions, or the authorization server is outside what
    [user-sessions] allows; `reason` says which."""


class TooManySessions(TokendError):
    """AddSession: the caller holds as many sessions of their own as one person may (`limit`)."""

    @property
    def limit(self) -> int:
        return int(self.parameters.get("limit", 0))


class DiscoveryFailed(TokendError):
    """AddSession: the server did not conform at `step` (challenge, resource-metadata, server-metadata,
    registration), at `url`, answering `status` (None: no answer)."""

    @property
    def step(self) -> str:
        return str(self.parameters.get("step", ""))

    @property
    def url(self) -> str:
        return str(self.parameters.get("url", ""))

    @property
    def status(self) -> Optional[int]:
        return self.parameters.get("status")


class AddressRefused(TokendError):
    """AddSession: tokend does not connect to `url` for a user (not https, or `address` is link-local,
    a cloud metadata address, loopback or private)."""

    @property
    def url(self) -> str:
        return str(self.parameters.get("url", ""))

    @property
    def address(self) -> Optional[str]:
        return self.parameters.get("address")


_BY_NAME: Dict[str, Type[TokendError]] = {
    "io.tokend.Broker.NoSuchSession": NoSuchSession,
    "io.tokend.Broker.LoginRequired": LoginRequired,
    "io.tokend.Broker.UpstreamUnavailable": UpstreamUnavailable,
    "io.tokend.Broker.StoreUnavailable": StoreUnavailable,
    "io.tokend.Broker.RateLimited": RateLimited,
    "io.tokend.Broker.TooManyConnections": TooManyConnections,
    "io.tokend.Broker.ResourceNotAllowed": ResourceNotAllowed,
    "io.tokend.Broker.ScopeNotAllowed": ScopeNotAllowed,
    "io.tokend.Broker.TargetRefused": TargetRefused,
    "io.tokend.Broker.SessionExists": SessionExists,
    "io.tokend.Broker.SessionRefused": SessionRefused,
    "io.tokend.Broker.TooManySessions": TooManySessions,
    "io.tokend.Broker.DiscoveryFailed": DiscoveryFailed,
    "io.tokend.Broker.AddressRefused": AddressRefused,
    "org.varlink.service.PermissionDenied": PermissionDenied,
    "org.varlink.service.InvalidParameter": InvalidParameter,
}


def error_for(name: str, parameters: Optional[Dict[str, Any]]) -> TokendError:
    return _BY_NAME.get(name, TokendError)(name, parameters)
