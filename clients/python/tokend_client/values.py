"""The interface's values (io.tokend.Broker) as dataclasses, and the session
status as the typed dictionary tokend sends."""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, TypedDict, cast


@dataclass(frozen=True)
class Token:
    access_token: str
    token_type: str
    expires_at: int
    generation: int
    scope: Optional[str] = None
    # The resource (RFC 8707) the token is for, when the call named one.
    resource: Optional[str] = None

    @property
    def authorization(self) -> str:
        """The Authorization header value ("Bearer ..." or "DPoP ...")."""
        return f"{self.token_type or 'Bearer'} {self.access_token}"

    @property
    def dpop_bound(self) -> bool:
        """The provider bound the token to tokend's DPoP key (RFC 9449): each
        request needs a proof as well (Tokend.proof)."""
        return self.token_type.lower() == "dpop"

    @classmethod
    def from_wire(cls, value: Dict[str, Any]) -> "Token":
        return cls(value["accessToken"], value.get("tokenType") or "Bearer", value["expiresAt"], value["generation"],
                   value.get("scope"), value.get("resource"))


@dataclass(frozen=True)
class Cookie:
    name: str
    value: str
    domain: str
    host_only: bool
    path: str
    expires_at: Optional[int]
    secure: bool
    http_only: bool
    same_site: Optional[str]

    @classmethod
    def from_wire(cls, value: Dict[str, Any]) -> "Cookie":
        return cls(value["name"], value["value"], value["domain"], value.get("hostOnly", False), value["path"],
                   value.get("expiresAt"), value.get("secure", False), value.get("httpOnly", False),
                   value.get("sameSite"))


@dataclass(frozen=True)
class CookieSet:
    cookies: List[Cookie]
    header: str
    version: int


@dataclass(frozen=True)
class Event:
    """One Subscribe reply: "status" first, then cookies, loggedIn, refreshed, loggedOut, ..."""
    event: str
    session: str
    generation: int
    expires_at: Optional[int] = None
    reason: Optional[str] = None
    version: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, compare=False)
    # refreshed and status events: the key whose token this is (neither: the session's own).
    resource: Optional[str] = None
    scope: Optional[str] = None

    @classmethod
    def from_wire(cls, value: Dict[str, Any]) -> "Event":
        return cls(value.get("event", ""), value.get("session", ""), value.get("generation", 0),
                   value.get("expiresAt"), value.get("reason"), value.get("version"), value,
                   value.get("resource"), value.get("scope"))


class _KeyedTokenAlways(TypedDict):
    generation: int


class KeyedToken(_KeyedTokenAlways, total=False):
    """A session's token for a (resource, scope) key other than its own (absent members were null)."""
    resource: str
    scope: str
    expiresAt: int
    lastError: str


class _StatusAlways(TypedDict):
    session: str
    state: str
    generation: int
    refreshes: int
    coalesced: int
    failures: int
    cookies: int
    cookieVersion: int
    pendingLogins: int
    webOrigins: List[str]
    gitHosts: List[str]
    # The resources the session serves tokens for, those web pages may ask for, how keyed tokens
    # are refreshed ("shared-audience", "per-resource" or "undetermined") and why, and their tokens.
    resources: List[str]
    webResources: List[str]
    strategy: str
    strategyReason: str
    tokens: List[KeyedToken]


class SessionStatus(_StatusAlways, total=False):
    """GetStatus's answer as tokend sends it: camelCase keys, absent when null."""
    expiresAt: int
    expirySource: str
    lastRefreshAt: int
    nextRefreshAt: int
    lastError: str
    subject: str
    username: str
    email: str
    gitUsername: str
    redirectUri: str
    hostId: str
    store: str
    sharedVersion: int
    # The login flows the session's endpoints allow ("device", "browser"); absent until discovery succeeds.
    loginFlows: List[str]
    # A session a user added (AddSession): its owner's user name; absent for tokend.toml's sessions.
    owner: str


@dataclass(frozen=True)
class AddedSession:
    """AddSession's answer: the session's status, the authorization server found, and the client it
    logs in as (registered by tokend, RFC 7591, or the one given)."""
    status: SessionStatus
    issuer: str
    client_id: str
    registered: bool

    @classmethod
    def from_wire(cls, value: Dict[str, Any]) -> "AddedSession":
        return cls(cast(SessionStatus, value["status"]), value["issuer"], value["clientId"], value["registered"])
