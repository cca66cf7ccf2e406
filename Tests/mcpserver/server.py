"""A remote MCP server with its own OAuth authorization server, for the tests:
FastMCP's in-memory OAuth provider (dynamic client registration, PKCE,
rotating refresh tokens that revoke the previous one and its access token),
served over streamable HTTP on 127.0.0.1, plain http.

    server.py DIRECTORY PORT [--access-ttl S] [--refresh-ttl S] [--rotation revoke|reuse|omit]

FastMCP's code runs unchanged. A subclass of its provider writes what it does
to DIRECTORY/events.jsonl, one JSON object a line, tokens by fingerprint
(fingerprint() below; Tests/integration/mcp.py has the same), never in full:

    register         a client registered (RFC 7591): client_id and its metadata
    client_unknown   a request named a client this server does not know (after a
                     restart every client is forgotten: invalid_client, 401)
    authorize        an authorization request approved (FastMCP approves at
                     once: no login or consent page, the redirect carries the code)
    code             a code exchanged for tokens
    refresh          a refresh answered: the old refresh token, the new ones
    refresh_refused  a refresh token refused, and why: rotated (used again
                     after its rotation), revoked, expired, expired_access
                     (FastMCP drops a refresh token when its access token is
                     presented after expiry), unknown
    access_refused   a bearer token refused at the MCP endpoint, and why
    revoke           a revocation request
    call             a tool call: the tool, its count, the token that made it
    stream_step      slow_stream is sending step i (written before it is sent)

DIRECTORY/ready appears once the port listens (connections made from then on
wait in its backlog until the server serves them)."""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlparse

from fastmcp import Context, FastMCP
from fastmcp.server.auth.auth import ClientRegistrationOptions, RevocationOptions
from fastmcp.server.auth.providers.in_memory import InMemoryOAuthProvider
from fastmcp.server.dependencies import get_access_token
from mcp.server.auth.provider import AccessToken, AuthorizationCode, AuthorizationParams, RefreshToken
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

T = TypeVar("T")


def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


class EventLog:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(self, event: str, **fields: Any) -> None:
        # One write per line on an O_APPEND file: a reader never sees half a line of two writers.
        line = json.dumps({"event": event, "time": time.time(), **fields}) + "\n"
        os.write(self.fd, line.encode())


class ObservedProvider(InMemoryOAuthProvider):
    """FastMCP's InMemoryOAuthProvider, its answers kept, with its events logged, the
    access- and refresh-token lifetimes given, and the rotation chosen:
    revoke (FastMCP's own: a new refresh token, the old one and its access token
    revoked), reuse (the same refresh token answered again, still valid) or omit (no
    refresh_token in the answer; the old one stays valid).
    It also keeps each grant's RFC 8707 resource on its tokens (FastMCP's in-memory
    provider drops it), so the whoami tool says what the caller's token was issued for."""

    def __init__(self, log: EventLog, access_ttl: int, refresh_ttl: int | None, rotation: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.log, self.access_ttl, self.refresh_ttl, self.rotation = log, access_ttl, refresh_ttl, rotation
        self.gone_refresh: dict[str, str] = {}  # fingerprint -> why it was removed
        self.gone_access: dict[str, str] = {}

    async def _tracking(self, why: str, call: Callable[[], Awaitable[T]]) -> T:
        """Runs `call`, noting every token it removed and why."""
        refresh, access = set(self.refresh_tokens), set(self.access_tokens)
        try:
            return await call()
        finally:
            for token in refresh - set(self.refresh_tokens):
                self.gone_refresh.setdefault(fingerprint(token), why)
            for token in access - set(self.access_tokens):
                self.gone_access.setdefault(fingerprint(token), why)

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        found = await super().get_client(client_id)
        if found is None:
            self.log.write("client_unknown", client_id=client_id)
        return found

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        await super().register_client(client_info)
        self.log.write("register", client_id=client_info.client_id,
                       redirect_uris=[str(u) for u in client_info.redirect_uris or []],
                       token_endpoint_auth_method=client_info.token_endpoint_auth_method,
                       grant_types=client_info.grant_types, response_types=client_info.response_types,
                       scope=client_info.scope, client_name=client_info.client_name)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        redirect = await super().authorize(client, params)
        code = parse_qs(urlparse(redirect).query)["code"][0]
        self.auth_codes[code] = self.auth_codes[code].model_copy(update={"resource": params.resource})
        self.log.write("authorize", client_id=client.client_id, redirect_uri=str(params.redirect_uri),
                       scopes=params.scopes, resource=params.resource, state=params.state is not None)
        return redirect

    def _shape(self, answer: OAuthToken, resource: str | None) -> OAuthToken:
        """The lifetimes this server was given, and the grant's resource, on the tokens just issued."""
        now = time.time()
        access = self.access_tokens[answer.access_token]
        self.access_tokens[answer.access_token] = access.model_copy(
            update={"expires_at": int(now + self.access_ttl), "resource": resource})
        if answer.refresh_token:
            refresh = self.refresh_tokens[answer.refresh_token]
            expires = int(now + self.refresh_ttl) if self.refresh_ttl else None
            self.refresh_tokens[answer.refresh_token] = refresh.model_copy(
                update={"expires_at": expires, "resource": resource})
        return answer.model_copy(update={"expires_in": self.access_ttl})

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        answer = self._shape(await super().exchange_authorization_code(client, authorization_code),
                             authorization_code.resource)
        self.log.write("code", client_id=client.client_id, access=fingerprint(answer.access_token),
                       refresh=fingerprint(answer.refresh_token or ""), expires_in=answer.expires_in,
                       resource=authorization_code.resource, scopes=authorization_code.scopes)
        return answer

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        found = await self._tracking("expired", lambda: super(ObservedProvider, self).load_refresh_token(
            client, refresh_token))
        if found is None:
            mark = fingerprint(refresh_token)
            self.log.write("refresh_refused", client_id=client.client_id, refresh=mark,
                           reason=self.gone_refresh.get(mark, "unknown"))
        return found

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        answer = await self._tracking("rotated", lambda: super(ObservedProvider, self).exchange_refresh_token(
            client, refresh_token, scopes))
        if self.rotation != "revoke":
            # FastMCP rotated: put the old refresh token back in the new one's place.
            old, new = refresh_token.token, answer.refresh_token or ""
            self.refresh_tokens[old] = self.refresh_tokens.pop(new).model_copy(update={"token": old})
            self._refresh_to_access_map[old] = self._refresh_to_access_map.pop(new)
            self._access_to_refresh_map[answer.access_token] = old
            self.gone_refresh.pop(fingerprint(old), None)
            answer = answer.model_copy(update={"refresh_token": old if self.rotation == "reuse" else None})
        answer = self._shape(answer, refresh_token.resource)
        if answer.refresh_token is None:
            self.refresh_tokens[refresh_token.token] = self._shape_refresh(refresh_token.token, refresh_token.resource)
        self.log.write("refresh", client_id=client.client_id, old=fingerprint(refresh_token.token),
                       refresh=fingerprint(answer.refresh_token) if answer.refresh_token else None,
                       access=fingerprint(answer.access_token), expires_in=answer.expires_in,
                       resource=refresh_token.resource, scopes=scopes)
        return answer

    def _shape_refresh(self, token: str, resource: str | None) -> RefreshToken:
        expires = int(time.time() + self.refresh_ttl) if self.refresh_ttl else None
        return self.refresh_tokens[token].model_copy(update={"expires_at": expires, "resource": resource})

    async def load_access_token(self, token: str) -> AccessToken | None:  # type: ignore[override]
        found = await self._tracking("expired_access", lambda: super(ObservedProvider, self).load_access_token(token))
        if found is None:
            mark = fingerprint(token)
            reason = self.gone_access.get(mark, "unknown")
            if reason == "expired_access":
                reason = "expired"  # the access token itself expired; its refresh token went with it
            self.log.write("access_refused", access=mark, reason=reason)
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        kind = "refresh" if isinstance(token, RefreshToken) else "access"
        await self._tracking("revoked", lambda: super(ObservedProvider, self).revoke_token(token))
        self.log.write("revoke", kind=kind, token=fingerprint(token.token), client_id=token.client_id)


def build(directory: str, port: int, access_ttl: int, refresh_ttl: int | None, rotation: str) -> FastMCP:
    log = EventLog(os.path.join(directory, "events.jsonl"))
    base = f"http://127.0.0.1:{port}"
    provider = ObservedProvider(
        log, access_ttl, refresh_ttl, rotation, base_url=base,
        client_registration_options=ClientRegistrationOptions(enabled=True),
        revocation_options=RevocationOptions(enabled=True))
    mcp = FastMCP("tokend-test", auth=provider)
    calls = {"count": 0}

    def caller() -> dict[str, Any]:
        token = get_access_token()
        if token is None:
            return {}
        return {"token": fingerprint(token.token), "client_id": token.client_id}

    @mcp.tool
    def count() -> int:
        """Counts its calls; every call is logged with the token that made it."""
        calls["count"] += 1
        log.write("call", tool="count", n=calls["count"], **caller())
        return calls["count"]

    @mcp.tool
    def whoami() -> dict[str, Any]:
        """What the caller's access token was issued for: client, scopes, resource, expiry."""
        token = get_access_token()
        assert token is not None
        log.write("call", tool="whoami", **caller())
        return {"client_id": token.client_id, "scopes": token.scopes, "resource": token.resource,
                "expires_at": token.expires_at, "token": fingerprint(token.token)}

    @mcp.tool
    async def slow_stream(ctx: Context, steps: int = 5, interval: float = 1.0, gate: str = "") -> str:
        """A streamed answer: a progress notification and a log message per step, on the
        request's SSE response, then the result. Steps follow each other after `interval`
        seconds; with `gate`, step i (i > 1) waits instead for the file gate-GATE-i in the
        server's directory, so a test can show step i-1 reached it before step i was sent."""
        for step in range(1, steps + 1):
            if step > 1 and gate:
                release = os.path.join(directory, f"gate-{gate}-{step}")
                deadline = time.monotonic() + 300
                while not os.path.exists(release):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no {release}")
                    await asyncio.sleep(0.02)
            elif step > 1:
                await asyncio.sleep(interval)
            # Logged before it is sent: a test that has step i finds its event.
            log.write("stream_step", step=step, steps=steps, gate=gate, **caller())
            await ctx.report_progress(step, steps, f"step {step}")
            await ctx.info(f"step {step} of {steps}")
        log.write("call", tool="slow_stream", steps=steps, **caller())
        return f"streamed {steps} steps"

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("port", type=int)
    parser.add_argument("--access-ttl", type=int, default=8)
    parser.add_argument("--refresh-ttl", type=int, default=None)
    parser.add_argument("--rotation", choices=["revoke", "reuse", "omit"], default="revoke")
    args = parser.parse_args()
    mcp = build(args.directory, args.port, args.access_ttl, args.refresh_ttl, args.rotation)
    listener = socket.socket(socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(128)
    with open(os.path.join(args.directory, "ready"), "w") as f:
        f.write(str(os.getpid()))
    asyncio.run(mcp.run_http_async(show_banner=False, host="127.0.0.1", port=args.port, path="/mcp",
                                   log_level="info", sockets=[listener]))


if __name__ == "__main__":
    main()
