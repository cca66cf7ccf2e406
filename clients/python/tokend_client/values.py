"""The interface's values (io.tokend.Broker) as dataclasses."""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class Token:
    access_token: str
    token_type: str
    expires_at: int
    generation: int
    scope: Optional[str] = None

    @property
    def authorization(self) -> str:
        """The Authorization header value ("Bearer ...")."""
        return f"{self.token_type or 'Bearer'} {self.access_token}"

    @classmethod
    def from_wire(cls, value: Dict[str, Any]) -> "Token":
        return cls(value["accessToken"], value.get("tokenType") or "Bearer", value["expiresAt"], value["generation"],
                   value.get("scope"))


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

    @classmethod
    def from_wire(cls, value: Dict[str, Any]) -> "Event":
        return cls(value.get("event", ""), value.get("session", ""), value.get("generation", 0),
                   value.get("expiresAt"), value.get("reason"), value.get("version"), value)
