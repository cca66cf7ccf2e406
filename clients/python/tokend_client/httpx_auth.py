"""`httpx` auth, for Client and AsyncClient: the session's token on every
request (or its token for a resource and scope); on a 401 with it, one
compare-and-refresh of that key through tokend and one retry — only when the
401 came from the request's own origin, not from a redirect's other one
(httpx sends that no token). A DPoP-bound
token (RFC 9449) goes with a proof of each request, and a resource server's
use_dpop_nonce gets one retry with its nonce (no refresh)."""
from typing import AsyncGenerator, Generator, Optional

import httpx

from .client import AsyncTokend, Tokend
from .dpop import nonce_asked
from .errors import LoginRequired, TargetRefused, UpstreamUnavailable
from .origin import origin
from .values import Token


class TokendAuth(httpx.Auth):
    # The body is kept so that the request can be sent again after a refresh.
    requires_request_body = True

    def __init__(self, tokend: Optional[Tokend] = None, async_tokend: Optional[AsyncTokend] = None,
                 session: Optional[str] = None, min_valid: Optional[int] = None, resource: Optional[str] = None,
                 scope: Optional[str] = None) -> None:
        self._tokend = tokend
        self._async_tokend = async_tokend
        self.session = session
        self.min_valid = min_valid
        self.resource = resource
        self.scope = scope
        # Set once the session's tokens turn out DPoP-bound: from then on one GetProof per request.
        self._dpop = False

    def _authorize(self, tokend: Tokend, request: httpx.Request, nonce: Optional[str] = None) -> Token:
        if not self._dpop:
            token = tokend.get_token(self.session, self.min_valid, self.resource, self.scope)
            if not token.dpop_bound:
                request.headers["Authorization"] = token.authorization
                return token
            self._dpop = True
        proof, token = tokend.proof(request.method, str(request.url), self.session, self.resource, nonce)
        request.headers["Authorization"] = token.authorization
        request.headers["DPoP"] = proof
        return token

    async def _async_authorize(self, tokend: AsyncTokend, request: httpx.Request, nonce: Optional[str] = None) -> Token:
        if not self._dpop:
            token = await tokend.get_token(self.session, self.min_valid, self.resource, self.scope)
            if not token.dpop_bound:
                request.headers["Authorization"] = token.authorization
                return token
            self._dpop = True
        proof, token = await tokend.proof(request.method, str(request.url), self.session, self.resource, nonce)
        request.headers["Authorization"] = token.authorization
        request.headers["DPoP"] = proof
        return token

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        tokend = self._tokend = self._tokend or Tokend()
        token = self._authorize(tokend, request)
        response = yield request
        if response.status_code != 401 or origin(str(response.request.url)) != origin(str(request.url)):
            return
        nonce = nonce_asked(response.status_code, response.headers) if token.dpop_bound else None
        if nonce is not None:
            self._authorize(tokend, request, nonce)
            yield request
            return
        # tokend has nothing newer than the refused token: the 401 stands.
        try:
            fresh = tokend.refresh(self.session, token.generation, self.resource, self.scope)
        except (UpstreamUnavailable, LoginRequired, TargetRefused):
            return
        if fresh.access_token != token.access_token:
            if fresh.dpop_bound:
                self._authorize(tokend, request)
            else:
                request.headers["Authorization"] = fresh.authorization
            yield request

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        tokend = self._async_tokend = self._async_tokend or AsyncTokend()
        token = await self._async_authorize(tokend, request)
        response = yield request
        if response.status_code != 401 or origin(str(response.request.url)) != origin(str(request.url)):
            return
        nonce = nonce_asked(response.status_code, response.headers) if token.dpop_bound else None
        if nonce is not None:
            await self._async_authorize(tokend, request, nonce)
            yield request
            return
        try:
            fresh = await tokend.refresh(self.session, token.generation, self.resource, self.scope)
        except (UpstreamUnavailable, LoginRequired, TargetRefused):
            return
        if fresh.access_token != token.access_token:
            if fresh.dpop_bound:
                await self._async_authorize(tokend, request)
            else:
                request.headers["Authorization"] = fresh.authorization
            yield request
